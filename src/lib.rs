//! hipfp8: FP8 training kernels (quantization, cast-transpose, MXFP8, grouped GEMM) for AMD
//! Instinct GPUs, with a CPU backend that is both a usable fallback and the oracle for every
//! GPU test.
#![allow(clippy::too_many_arguments)] // op signatures mirror the C ABI: flat shape/pointer lists
pub mod cast_transpose;
pub mod device;
pub(crate) mod dispatch;
pub mod error;
pub mod ffi;
pub mod format;
pub mod grouped_gemm;
pub mod grouped_gemm_gpu;
pub mod grouped_gemm_rule;
pub mod mx;
pub mod ops;
pub mod quant;
pub mod reference;
pub mod scaling;
pub mod sys;
pub(crate) mod workspace;

pub use cast_transpose::Scaling;
pub use device::{Device, DeviceBuffer, Event, Stream};
pub use error::{Error, Result};
pub use format::Fp8Format;
pub use grouped_gemm::GemmParams;
pub use grouped_gemm_gpu::{Fallback, GemmBackend, GemmImpl, GemmPlan, GemmWorkspace, GroupedOp};
pub use half::{bf16, f16};
pub use mx::{MxParams, MxRounding};
pub use ops::*;
