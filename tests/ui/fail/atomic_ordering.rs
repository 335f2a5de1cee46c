// A tile atomic orders the block's accesses with Acquire, Release or
// AcqRel; there is no sequentially consistent form.
#[tile::kernel]
fn count(x: &Tensor<f32>, n: &mut Tensor<u32>) {
    let i = block_id(0);
    let big = x.load([i], [64]) > 0.0;
    n.atomic_add([full([64], 0)], big.cast::<u32>(), Ordering::SeqCst);
}

fn main() {}
