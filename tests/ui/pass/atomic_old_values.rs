// A tile atomic gives the elements' old values; one whose old values
// nobody reads adds all the same.
use tile::{Cpu, HostTensor};

#[tile::kernel(num_warps = 4)]
fn tickets(counter: &mut Tensor<u32>, got: &mut Tensor<u32>, total: &mut Tensor<u32>) {
    let t = counter.atomic_add([zeros::<i32>([4])], full([4], 1u32));
    got.store([block_id(0)], t);
    total.atomic_add([zeros::<i32>([4])], full([4], 2u32), Ordering::Release);
}

fn main() {
    let mut counter = HostTensor::<u32>::zeros(&[1]);
    let mut got = HostTensor::<u32>::zeros(&[12]);
    let mut total = HostTensor::<u32>::zeros(&[1]);
    tickets::launch(&Cpu, 3, &mut counter, &mut got, &mut total).unwrap();
    assert_eq!(got.to_vec(), (0..12).collect::<Vec<u32>>());
    assert_eq!(counter.to_vec(), [12]);
    assert_eq!(total.to_vec(), [24]);
}
