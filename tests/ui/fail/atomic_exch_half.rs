// `atomic_exch` and `atomic_cas` swap 32-bit elements: the GPU has no
// 16-bit exchange.
#[tile::kernel]
fn swap_in(x: &Tensor<f16>, slots: &mut Tensor<f16>) {
    let i = block_id(0);
    slots.atomic_exch([arange(64)], x.load([i], [64]));
}

fn main() {}
