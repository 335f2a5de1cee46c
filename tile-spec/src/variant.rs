//! One compiled PTX entry of a kernel, and the tensor maps it takes.
//!
//! The slices and strings are [`Cow`]s: the compiler fills them with owned
//! data, and the expansion of `#[tile::kernel]` writes the same values as
//! `static` data (`Cow::Borrowed(&[..])`), which the runtime reads; the
//! PTX it writes packed ([`Ptx`]).

use crate::{DType, Ptx, Target};
use std::borrow::Cow;

/// A tensor map a variant takes: a box of one tensor parameter, copied by
/// TMA into shared memory with a swizzle. The runtime encodes it at launch
/// (`cuTensorMapEncodeTiled`) and passes it after the regular parameters.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TensorMap {
    /// The tensor's index among the kernel's parameters.
    pub param: usize,
    /// The box one copy moves, innermost dimension first, in elements.
    pub box_dims: Cow<'static, [u32]>,
    /// Shared-memory swizzle span in bytes (32, 64 or 128): the box's inner extent.
    pub swizzle_bytes: u32,
    /// The tensor's rows (second-innermost dimension, a multiple of 8) are
    /// split into (k / 4 % 2, k % 4, k / 8), innermost first, so that a box
    /// stores them interleaved.
    pub interleaved_rows: bool,
    /// The copy rounds f32 elements to tf32, to nearest
    /// (`CU_TENSOR_MAP_DATA_TYPE_TFLOAT32`): operands of tf32 `wgmma`, which
    /// otherwise reads f32 data by dropping the low 13 bits of the mantissa
    /// (cuBLAS rounds).
    pub tf32: bool,
}

/// One compiled PTX entry: a specialization (type and const values) with
/// one choice of vector accesses, target, persistence and clustering. The
/// runtime picks among a kernel's variants at each launch.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Variant {
    /// Element types of the kernel's type parameters, in declaration order.
    pub types: Cow<'static, [DType]>,
    /// Values of the kernel's const parameters, in declaration order.
    pub consts: Cow<'static, [i64]>,
    /// The tensor parameters (indices among all parameters) this variant
    /// accesses with 16-byte vectors: valid only when each of those
    /// arguments is 16-byte aligned with a contiguous last dimension whose
    /// length and the other strides are multiples of 16 bytes (the
    /// launcher checks). All the tensors it loads or stores as tiles, none,
    /// or those an `mma` kernel's pipelines copy (`cp.async`, TMA).
    pub vectorized: Cow<'static, [usize]>,
    /// The `.entry` name.
    pub entry: Cow<'static, str>,
    /// Threads per block.
    pub threads: u32,
    /// Static shared memory the entry declares.
    pub shared_bytes: usize,
    /// Dynamic shared memory to launch with (pipeline stages).
    pub dynamic_shared_bytes: usize,
    /// The only target this variant runs on (`wgmma` needs sm_90a), or
    /// `None` for portable PTX, valid on every target.
    pub target: Option<Target>,
    /// Tensor maps (TMA copies) the launcher encodes and passes after the
    /// regular parameters, in order.
    pub tensor_maps: Cow<'static, [TensorMap]>,
    /// The tensor parameters read only by TMA copies (among `vectorized`),
    /// sorted: their arguments need a 16-byte aligned address and strides
    /// that are multiples of 16 bytes, but no particular shape, so a
    /// read-only one whose rows are not 16 bytes apart may be copied into
    /// rows that are.
    pub tma_only: Cow<'static, [usize]>,
    /// Launched on a persistent grid (warp-specialized on sm_90a; portable:
    /// two tiles per persistent block): the launcher starts at most as many blocks
    /// along x as fit on the GPU at once and passes the requested count
    /// last; each block loops over its share.
    pub persistent: bool,
    /// Blocks per cluster along x (1: none): the entry requires clusters of
    /// that many blocks (`.reqnctapercluster`), so the launcher starts a
    /// multiple of it, and no more clusters than fit on the GPU at once.
    pub cluster: u32,
    /// The blocks of each cluster gather tiles (`cluster_gather`): the
    /// entry runs in its clusters whatever the launch asks, and only over
    /// a grid whose x is a multiple of `cluster`.
    pub gathers: bool,
    /// The `.entry` text, without the module header.
    pub ptx: Ptx,
}

impl Variant {
    /// Shared memory a block takes, static and dynamic.
    pub fn block_shared_bytes(&self) -> usize {
        self.shared_bytes + self.dynamic_shared_bytes
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A variant as the expansion writes it: nested borrowed data in a `static`.
    static WRITTEN: Variant = Variant {
        types: Cow::Borrowed(&[DType::BF16]),
        consts: Cow::Borrowed(&[128, 64]),
        vectorized: Cow::Borrowed(&[0, 1]),
        entry: Cow::Borrowed("k_bf16_128_64_wgmma"),
        threads: 384,
        shared_bytes: 16,
        dynamic_shared_bytes: 1024,
        target: Some(Target::Sm90a),
        tensor_maps: Cow::Borrowed(&[TensorMap {
            param: 0,
            box_dims: Cow::Borrowed(&[64, 128]),
            swizzle_bytes: 128,
            interleaved_rows: false,
            tf32: false,
        }]),
        tma_only: Cow::Borrowed(&[0]),
        persistent: true,
        cluster: 1,
        gathers: false,
        ptx: Ptx::Text(Cow::Borrowed(".visible .entry k_bf16_128_64_wgmma()")),
    };

    #[test]
    fn a_static_variant_equals_the_one_built_with_owned_data() {
        let built = Variant {
            types: vec![DType::BF16].into(),
            consts: vec![128, 64].into(),
            vectorized: vec![0, 1].into(),
            entry: "k_bf16_128_64_wgmma".to_string().into(),
            tensor_maps: vec![TensorMap {
                box_dims: vec![64, 128].into(),
                ..WRITTEN.tensor_maps[0].clone()
            }]
            .into(),
            tma_only: vec![0].into(),
            ptx: Ptx::Text(".visible .entry k_bf16_128_64_wgmma()".to_string().into()),
            ..WRITTEN.clone()
        };
        assert_eq!(built, WRITTEN);
        assert_eq!(WRITTEN.block_shared_bytes(), 1040);
    }
}
