//! The tensors a pass over the blocks writes, made once per pass, and once
//! per cache for decode steps (as llm.c allocates its activations once): a
//! recorded step is then kernels only, with no allocation or clearing
//! between them, either of which would also keep a kernel from starting
//! while the one before it ends.

use crate::Result;
use tile::{Backend, Element};

/// A pass's activations for `rows` token rows; every kernel overwrites
/// what it writes, so none is cleared between passes.
pub(crate) struct Activations<B: Backend, T: Element> {
    /// The residual stream, `[rows, C]`.
    pub(crate) x: B::Tensor<T>,
    /// Where a block writes the residual stream plus its output, before
    /// the two swap, `[rows, C]`.
    pub(crate) next: B::Tensor<T>,
    /// This rank's queries, keys and values, `[rows, 3c]` (`[b, t, 3c]`
    /// while attention reads them).
    pub(crate) qkv: B::Tensor<T>,
    /// Attention's output, `[rows, c]` (`[b, t, c]` while written).
    pub(crate) att: B::Tensor<T>,
    /// The MLP's inner activations, `[rows, hidden]`.
    pub(crate) fc: B::Tensor<T>,
}

impl<B: Backend, T: Element> Activations<B, T> {
    /// Activations of `rows` rows for a model of `n_embd` channels whose
    /// rank holds `c` of the attention's channels and `hidden` of the MLP's.
    pub(crate) fn new(on: &B, rows: usize, (n_embd, c, hidden): (usize, usize, usize)) -> Result<Self> {
        Ok(Activations {
            x: on.zeros(&[rows, n_embd])?,
            next: on.zeros(&[rows, n_embd])?,
            qkv: on.zeros(&[rows, 3 * c])?,
            att: on.zeros(&[rows, c])?,
            fc: on.zeros(&[rows, hidden])?,
        })
    }
}
