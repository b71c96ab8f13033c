//! hipfp8: FP8 training kernels (quantization, cast-transpose, MXFP8, grouped GEMM) for AMD
//! Instinct GPUs, with a CPU backend that is both a usable fallback and the oracle for every
//! GPU test.
pub mod error;
pub mod ffi;
pub mod format;
pub mod ops;
pub mod reference;
pub mod scaling;

pub use error::{Error, Result};
pub use format::Fp8Format;
pub use half::{bf16, f16};
pub use ops::*;
