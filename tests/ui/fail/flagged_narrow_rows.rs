// A flagged tile's rows are whole 4-byte words, each beside its flag.
#[tile::kernel]
fn hand_over(x: &Tensor<bf16>, peer: &mut Tensor<bf16>, round: u32) {
    peer.store_flagged([0, 0], x.load([0, 0], [64, 1]), round);
}

fn main() {}
