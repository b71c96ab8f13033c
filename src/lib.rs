//! hipfp8: FP8 training kernels (quantization, cast-transpose, MXFP8, grouped GEMM) for AMD
//! Instinct GPUs, with a CPU backend that is both a usable fallback and the oracle for every
//! GPU test.
//!
//! The modules form floors; a module uses only modules of lower floors (docs/ARCHITECTURE.md):
//! `sys`, `error`, `knobs`, `format` → `view`, `params`, `scaling`, `validate` → `runtime`, `reference`
//! → `workspace` → `context` → `dispatch` → op families (`quant`, `cast_transpose`, `mx`, `moe`,
//! `route`, `grouped_gemm`) → `recipe` → `ffi` → the binaries.
#![allow(clippy::too_many_arguments)] // op signatures mirror the C ABI: flat shape/pointer lists
pub mod cast_transpose;
pub mod context;
pub(crate) mod dispatch;
pub mod error;
pub mod ffi;
pub mod format;
pub mod grouped_gemm;
pub mod knobs;
pub mod moe;
pub mod mx;
pub mod params;
pub mod quant;
pub mod recipe;
pub mod reference;
pub mod route;
pub mod runtime;
pub mod scaling;
pub mod sys;
pub mod validate;
pub mod view;
pub mod workspace;

pub use context::{BackendKind, Context};
pub use dispatch::NoParams;
pub use error::{Error, Result};
pub use format::Fp8Format;
pub use grouped_gemm::gpu::{Fallback, GemmPlan, GroupedOp};
pub use grouped_gemm::params::{GemmBackend, GemmImpl, GemmParams, GemmWorkspace};
pub use half::{bf16, f16};
pub use params::{
    CastParams, FormatChoice, Layout, MoeCastParams, MxParams, MxRounding, ScaleOutput, Scaling,
};
pub use runtime::{Device, DeviceBuffer, Event, Graph, Stream};
pub use validate::{checked_mul, require_no_pow2, require_nonzero, validate_offsets};
pub use view::{Dst, HpSrc, Loc, Src, StreamRef};
pub use workspace::Workspace;

/// Every op's declaration (`dispatch.rs`): the tests derive their C op table from it.
#[doc(hidden)]
pub mod decl {
    pub use crate::cast_transpose::{CAST_TRANSPOSE, CAST_TRANSPOSE_SCALED};
    pub use crate::dispatch::{BufInfo, Elem, OpDecl, OpParams};
    pub use crate::grouped_gemm::{
        GROUPED_GEMM_2D2D, GROUPED_GEMM_2D3D, GROUPED_GEMM_BLOCKWISE_2D2D,
        GROUPED_GEMM_BLOCKWISE_2D3D,
    };
    pub use crate::moe::{MOE_ACT_DUAL, MOE_SWIGLU_BWD_QUANT, MOE_SWIGLU_QUANT, MOE_WEIGHTS_DUAL};
    pub use crate::mx::{MXFP8_DIM0, MXFP8_DIM1};
    pub use crate::quant::{
        BLOCKWISE_1X128, BLOCKWISE_128X128, COLWISE_3D, PER_GROUP_COLWISE, PER_GROUP_COLWISE_DUAL,
        PER_GROUP_COLWISE_DUAL_PADDED, PER_GROUP_ROWWISE, ROWWISE_2D, ROWWISE_2D_PADDED,
        ROWWISE_3D_TRANSPOSE_RHS, TENSORWISE, TENSORWISE_SCALED,
    };
    pub use crate::recipe::SCALE_RECIPROCAL;
    pub use crate::route::{
        MOE_COMBINE, MOE_COMBINE_BWD_DUAL, MOE_COMBINE_BWD_SCORES, MOE_DISPATCH_DUAL,
    };
}

/// The public paths of earlier releases, kept as aliases (nothing inside the crate uses them).
pub mod ops {
    pub use crate::context::{BackendKind, Context};
    pub use crate::params::{CastParams, FormatChoice, Layout};
    pub use crate::validate::{checked_mul, require_no_pow2, require_nonzero, validate_offsets};
    pub use crate::view::{Dst, HpSrc, Loc, Src, StreamRef};
}

/// The GPU runtime under its earlier path: [`runtime`] plus the test helpers of [`context`].
pub mod device {
    pub use crate::context::{gpu_for_tests, skip_test};
    pub use crate::runtime::*;
}

/// The grouped GEMM's instance rule under a short path.
pub use grouped_gemm::rule as grouped_gemm_rule;

/// The grouped GEMM's GPU arm under its earlier path.
pub mod grouped_gemm_gpu {
    pub use crate::grouped_gemm::gpu::*;
    pub use crate::grouped_gemm::params::{GemmBackend, GemmImpl, GemmWorkspace};
}
