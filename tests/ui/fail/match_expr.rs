// `match` is not part of the DSL.
#[tile::kernel]
fn pick(x: &Tensor<f32>, y: &mut Tensor<f32>, mode: i32) {
    let i = block_id(0);
    let t = x.load([i], [64]);
    let s = match mode {
        0 => 1.0,
        _ => 2.0,
    };
    y.store([i], t * s);
}

fn main() {}
