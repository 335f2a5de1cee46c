//! A kernel of one's own, run on the GPU when there is one and on the
//! kernel's CPU version either way, the two results compared.

use tile::prelude::*;

/// `y = a x + y` over vectors, one `BLOCK`-wide tile per block.
#[tile::kernel(T = [f32, bf16], BLOCK = [1024])]
fn axpy<T, const BLOCK: usize>(a: f32, x: &Tensor<T>, y: &mut Tensor<T>) {
    let i = block_id(0);
    let sum = a * x.load([i], [BLOCK]).cast::<f32>() + y.load([i], [BLOCK]).cast::<f32>();
    y.store([i], sum.cast::<T>());
}

/// `a x + y` computed on `on`: a GPU stream or the CPU.
fn run<B: Backend>(on: &B, a: f32, x: &[f32], y: &[f32]) -> tile::Result<Vec<f32>> {
    let xd = on.upload_slice(x, &[x.len()])?;
    let mut yd = on.upload_slice(y, &[y.len()])?;
    axpy::launch::<f32, 1024, _>(on, x.len().div_ceil(1024) as u32, a, &xd, &mut yd)?;
    Ok(on.download(&yd)?.to_vec())
}

fn main() -> tile::Result<()> {
    let n = 3000; // not a multiple of the tile: the last block's tile is cut at the edge
    let x: Vec<f32> = (0..n).map(|i| i as f32).collect();
    let y = vec![1.0f32; n];
    let cpu = run(&Cpu, 2.0, &x, &y)?;
    assert!(cpu.iter().zip(&x).all(|(v, x)| *v == 2.0 * x + 1.0));
    println!("cpu: {:?} .. {:?}", &cpu[..3], &cpu[n - 1]);
    match Device::new(0) {
        Ok(device) => {
            let gpu = run(&device.stream(), 2.0, &x, &y)?;
            assert_eq!(gpu, cpu);
            println!("gpu ({}): same result", device.name());
        }
        Err(e) => println!("no GPU ({e}): ran on the CPU only"),
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    #[test]
    fn axpy_on_the_cpu_matches_the_formula() {
        let x = [1.0, -2.0, 0.5];
        let y = [3.0, 4.0, 5.0];
        assert_eq!(super::run(&tile::Cpu, 3.0, &x, &y).unwrap(), vec![6.0, -2.0, 6.5]);
    }
}
