//! Enums and small types shared by every op family of the C ABI.
//!
//! The enums are exported so C and C++ see named constants, but fields and parameters that a
//! caller fills in are `uint32_t` on the Rust side: an out-of-range value from C must be an
//! error (`HIPFP8_STATUS_INVALID_ENUM`), and a Rust enum holding it would be undefined
//! behaviour. The library only ever *writes* the enum types (queries).

use crate::format::Fp8Format;
use crate::params::FormatChoice;

/// Opaque ROCm/CUDA stream. The header forward-declares it exactly as the ROCm libraries do
/// (`typedef struct ihipStream_t *hipStream_t;`) so it needs no HIP header; on NVIDIA pass a
/// `cudaStream_t` cast to `hipStream_t`. NULL is the default stream.
pub enum ihipStream_t {}
/// See [`ihipStream_t`].
pub type hipStream_t = *mut ihipStream_t;

c_enum! {
    /// Backend of a context.
    hipfp8_backend {
        /// Creation only: GPU `device` when one is present and this build has a GPU backend,
        /// else the CPU backend.
        HIPFP8_BACKEND_AUTO = 0,
        /// The CPU backend (host pointers). Its native format is OCP unless created with
        /// `hipfp8_context_create_cpu`.
        HIPFP8_BACKEND_CPU = 1,
        /// A GPU (device pointers, streams).
        HIPFP8_BACKEND_GPU = 2,
    }
}

c_enum! {
    /// FP8 element format of an op's output. `AUTO` picks the device's native E4M3 flavour
    /// (FNUZ on gfx940/941/942, OCP on gfx950 / NVIDIA / CPU): using OCP codes on an FNUZ device
    /// silently halves every value, so AUTO is the safe default (it is 0, so a zeroed
    /// descriptor gets it).
    hipfp8_format => FormatChoice {
        /// E4M3 in the device's native flavour.
        HIPFP8_FORMAT_AUTO = 0 => FormatChoice::Auto,
        /// E5M2 in the device's native flavour (gradients).
        HIPFP8_FORMAT_AUTO_E5M2 = 1 => FormatChoice::AutoE5M2,
        /// OCP E4M3FN: bias 7, max 448, NaN 0x7F.
        HIPFP8_FORMAT_E4M3FN = 2 => Fp8Format::E4M3Fn.into(),
        /// OCP E5M2: bias 15, max 57344, NaN 0x7F.
        HIPFP8_FORMAT_E5M2 = 3 => Fp8Format::E5M2.into(),
        /// AMD E4M3FNUZ: bias 8, max 240, NaN 0x80.
        HIPFP8_FORMAT_E4M3FNUZ = 4 => Fp8Format::E4M3FnUz.into(),
        /// AMD E5M2FNUZ: bias 16, max 57344, NaN 0x80.
        HIPFP8_FORMAT_E5M2FNUZ = 5 => Fp8Format::E5M2FnUz.into(),
    }
}

c_enum! {
    /// Element type of a high-precision input (0 = bf16, so a zeroed descriptor reads bf16).
    hipfp8_dtype {
        /// bfloat16, 2-byte aligned.
        HIPFP8_DTYPE_BF16 = 0,
        /// IEEE float32, 4-byte aligned.
        HIPFP8_DTYPE_F32 = 1,
    }
}

c_enum! {
    /// Bits of a descriptor's `flags` field. Unknown bits are rejected (INVALID_ENUM).
    hipfp8_flag {
        /// Round every scale down to a power of two (torchao's MoE default).
        HIPFP8_FLAG_POW2_SCALES = 1,
        /// The scale outputs hold the grouped GEMMs' dequant scales 1 / s (bit for bit
        /// `hipfp8_scale_reciprocal` of the forward scales) instead of the forward scales s;
        /// the codes are the same. The fused MoE casts (`hipfp8_moe_*`) only: every other op
        /// returns NOT_SUPPORTED.
        HIPFP8_FLAG_DEQUANT_SCALES = 2,
        /// The experts block (`hipfp8_moe_experts_forward` / `_backward`, not the pre-cast
        /// calls: NOT_SUPPORTED there and in the grouped linear) writes its wgrad operands with
        /// every group starting on a 16-token boundary (zero tokens after each group) and runs
        /// the wgrad GEMMs on those padded offsets: the grouped GEMM's library path for any
        /// routing. Pass it when the offsets are not multiples of 16 (a token dispatcher that
        /// does not pad). Every other op: INVALID_ENUM (an unknown bit).
        HIPFP8_FLAG_PAD_WGRAD = 4,
    }
}
