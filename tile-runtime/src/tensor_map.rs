//! Tensor maps for TMA copies: encoded at each launch from a tensor's
//! address, shape and strides with `cuTensorMapEncodeTiled`, and passed to
//! the kernel by value after its regular parameters.

use cudarc::driver::sys;
use tile_spec::{DType, TensorMap};

/// A `CUtensorMap` as a kernel argument (128 bytes, 64-byte aligned): a
/// plain, fully initialized value the driver copies into the parameter
/// buffer, where the kernel declares `.align 64 .b8 [128]`.
#[expect(dead_code, reason = "read by the driver, through the argument pointer")]
pub(crate) struct TensorMapArg(sys::CUtensorMap);

/// The tensor map for `spec` over the tensor at `ptr` with `shape` and
/// `strides` (elements). `None` when the driver refuses it (strides not
/// multiples of 16 bytes, a zero stride, a dimension past 2^32) or rows to
/// interleave are not a multiple of 8: the launcher then takes the
/// portable variant.
pub(crate) fn encode(
    spec: &TensorMap,
    dtype: DType,
    ptr: u64,
    shape: &[usize],
    strides: &[usize],
) -> Option<TensorMapArg> {
    use sys::CUtensorMapDataType_enum as Data;
    use sys::CUtensorMapSwizzle_enum as Swizzle;
    let rank = shape.len();
    if rank == 0 || strides[..rank - 1].contains(&0) {
        return None;
    }
    let bytes = dtype.bytes() as u64;
    // Innermost first; interleaved rows split in three (see `TensorMap`).
    let mut dims: Vec<u64> = shape.iter().rev().map(|&n| n as u64).collect();
    let mut byte_strides: Vec<u64> = strides[..rank - 1].iter().rev().map(|&s| s as u64 * bytes).collect();
    if spec.interleaved_rows {
        if rank < 2 || !shape[rank - 2].is_multiple_of(8) {
            return None;
        }
        let row = byte_strides[0];
        dims.splice(1..2, [2, 4, shape[rank - 2] as u64 / 8]);
        byte_strides.splice(0..1, [4 * row, row, 8 * row]);
    }
    let rank = dims.len();
    if rank != spec.box_dims.len() {
        return None;
    }
    let element_strides = vec![1u32; rank];
    let data = match dtype {
        DType::F16 => Data::CU_TENSOR_MAP_DATA_TYPE_FLOAT16,
        DType::BF16 => Data::CU_TENSOR_MAP_DATA_TYPE_BFLOAT16,
        DType::F32 if spec.tf32 => Data::CU_TENSOR_MAP_DATA_TYPE_TFLOAT32,
        DType::F32 => Data::CU_TENSOR_MAP_DATA_TYPE_FLOAT32,
        DType::I32 => Data::CU_TENSOR_MAP_DATA_TYPE_INT32,
        DType::U32 => Data::CU_TENSOR_MAP_DATA_TYPE_UINT32,
        DType::Bool => return None,
    };
    let swizzle = match spec.swizzle_bytes {
        128 => Swizzle::CU_TENSOR_MAP_SWIZZLE_128B,
        64 => Swizzle::CU_TENSOR_MAP_SWIZZLE_64B,
        32 => Swizzle::CU_TENSOR_MAP_SWIZZLE_32B,
        _ => Swizzle::CU_TENSOR_MAP_SWIZZLE_NONE,
    };
    let mut map = sys::CUtensorMap { opaque: [0; 16] };
    // SAFETY: every array holds `rank` entries (strides `rank - 1`), as the
    // call requires; `map` is written by the driver.
    let result = unsafe {
        sys::cuTensorMapEncodeTiled(
            &mut map,
            data,
            rank as u32,
            ptr as *mut std::ffi::c_void,
            dims.as_ptr(),
            byte_strides.as_ptr(),
            spec.box_dims.as_ptr(),
            element_strides.as_ptr(),
            sys::CUtensorMapInterleave_enum::CU_TENSOR_MAP_INTERLEAVE_NONE,
            swizzle,
            sys::CUtensorMapL2promotion_enum::CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
            sys::CUtensorMapFloatOOBfill_enum::CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE,
        )
    };
    result.result().ok().map(|()| TensorMapArg(map))
}
