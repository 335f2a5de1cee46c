// `atomic_cas` takes the expected values before the new ones.
#[tile::kernel]
fn claim(slots: &mut Tensor<i32>) {
    let at = block_id(0) * 64 + arange(64);
    slots.atomic_cas([at % 16], at);
}

fn main() {}
