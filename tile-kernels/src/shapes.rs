//! Shape checks the host entry points share: operands whose sizes disagree
//! are a `tile::Error::Shape` naming the tensor, not a partial result.

/// The `N` sizes of `shape`, or a `tile::Error::Shape` unless it has `N` dimensions.
pub(crate) fn dims<const N: usize>(what: &str, shape: &[usize]) -> tile::Result<[usize; N]> {
    shape
        .try_into()
        .map_err(|_| tile::Error::Shape(format!("{what} must have rank {N}, got shape {shape:?}")))
}

/// A `tile::Error::Shape` for the first of `tensors` (name, shape, the
/// shape the operation needs) that differs, saying where the need comes from.
pub(crate) fn expect_shapes(from: &str, tensors: &[(&str, &[usize], &[usize])]) -> tile::Result<()> {
    match tensors.iter().find(|(_, got, want)| got != want) {
        Some((name, got, want)) => Err(tile::Error::Shape(format!(
            "{name} must be {want:?} ({from}), got {got:?}"
        ))),
        None => Ok(()),
    }
}
