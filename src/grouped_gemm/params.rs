//! Parameters of the grouped GEMMs: operand formats, which implementation runs on a GPU, and
//! the caller-owned workspace.

use crate::grouped_gemm::rule::CutlassChoice;
use crate::params::FormatChoice;

/// Element formats of the two operands (e.g. E4M3 activations x E5M2 gradients), and for
/// GPU contexts which implementation runs and with which workspace
/// (see `crate::grouped_gemm::gpu`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct GemmParams {
    pub a_format: FormatChoice,
    pub b_format: FormatChoice,
    /// GPU only: vendor library (CK / CUTLASS) or the portable reference kernel.
    pub backend: GemmBackend,
    /// GPU only: caller-owned device workspace (None: the stream's cached buffer), at least
    /// `Context::grouped_gemm_op_workspace_size` bytes (smaller: refused).
    pub workspace: Option<GemmWorkspace>,
    /// CUTLASS only: this instance and scheduler setting instead of the rule's
    /// (`crate::grouped_gemm::rule`; tests and benchmarks). Must be compiled for the pair.
    pub cutlass: Option<CutlassChoice>,
    /// 2D x 2D on a library only: never stage (docs/OPS.md "Any group start"): groups off a
    /// 16-token boundary run on the reference kernel inside the call, as with
    /// `HIPFP8_GG_STAGE=off`, and the workspace needs no staging area. For callers whose
    /// offsets are 16-aligned anyway (the staged and unstaged runs then give the same bits)
    /// and for tests.
    pub unstaged_2d2d: bool,
}

impl GemmParams {
    pub fn new(a_format: impl Into<FormatChoice>, b_format: impl Into<FormatChoice>) -> Self {
        GemmParams {
            a_format: a_format.into(),
            b_format: b_format.into(),
            ..GemmParams::default()
        }
    }

    /// The same parameters with another GPU backend choice.
    pub fn with_backend(self, backend: GemmBackend) -> Self {
        GemmParams { backend, ..self }
    }

    /// The same parameters with a fixed CUTLASS instance / scheduler setting.
    pub fn with_cutlass(self, choice: CutlassChoice) -> Self {
        GemmParams {
            cutlass: Some(choice),
            ..self
        }
    }

    /// The same parameters with 2D x 2D staging off ([`GemmParams::unstaged_2d2d`]).
    pub fn without_staging(self) -> Self {
        GemmParams {
            unstaged_2d2d: true,
            ..self
        }
    }

    /// The same parameters with a caller-owned GPU workspace.
    pub fn with_workspace(self, workspace: GemmWorkspace) -> Self {
        GemmParams {
            workspace: Some(workspace),
            ..self
        }
    }
}

/// Which grouped-GEMM implementation a GPU context should use.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum GemmBackend {
    /// The vendor library (CK / CUTLASS) where the plan (`Context::grouped_gemm_plan`) says
    /// it takes the call, else the reference kernel.
    #[default]
    Auto,
    /// The portable reference kernel.
    Reference,
    /// The vendor library only; an unsupported call is an error.
    Library,
}

/// A concrete grouped-GEMM implementation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum GemmImpl {
    /// A CPU context: the host reference (`crate::reference::grouped_gemm`).
    Cpu,
    /// The portable GPU reference kernel (`hip/grouped_gemm/reference.hip`).
    Reference,
    CutlassSm90,
    CkGfx942,
    CkGfx950,
}

impl GemmImpl {
    pub fn name(self) -> &'static str {
        match self {
            GemmImpl::Cpu => "cpu-reference",
            GemmImpl::Reference => "reference",
            GemmImpl::CutlassSm90 => "cutlass-sm90",
            GemmImpl::CkGfx942 => "ck-gfx942",
            GemmImpl::CkGfx950 => "ck-gfx950",
        }
    }
}

/// A caller-owned device workspace for the vendor libraries (size from
/// [`crate::Context::grouped_gemm_op_workspace_size`]): the crate's one workspace type.
pub type GemmWorkspace = crate::workspace::Workspace;
