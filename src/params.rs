//! Parameters of the ops: the output format choice and the per-family parameter structs
//! (plain data, no behaviour beyond constructors).

use crate::format::Fp8Format;

/// Which FP8 format an op produces.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum FormatChoice {
    /// E4M3 in the device's native flavour: FNUZ on gfx940/941/942, OCP elsewhere
    /// (gfx950, NVIDIA, CPU unless the context was told otherwise).
    #[default]
    Auto,
    /// E5M2 in the device's native flavour (gradients).
    AutoE5M2,
    Exact(Fp8Format),
}

impl From<Fp8Format> for FormatChoice {
    fn from(f: Fp8Format) -> Self {
        FormatChoice::Exact(f)
    }
}

/// Parameters shared by every scale-and-cast op.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct CastParams {
    pub format: FormatChoice,
    /// Round scales down to a power of two (torchao's MoE default: true).
    pub pow2_scales: bool,
}

impl CastParams {
    pub fn new(format: impl Into<FormatChoice>, pow2_scales: bool) -> Self {
        CastParams {
            format: format.into(),
            pow2_scales,
        }
    }
}

/// What the scale outputs of the fused MoE casts (`moe`) hold; the codes are the same either
/// way.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum ScaleOutput {
    /// The forward scale s: codes = encode(x * s) (what every cast writes).
    #[default]
    Forward,
    /// The grouped GEMMs' dequant scale 1 / s, bit for bit what `scale_reciprocal` makes of
    /// the forward scale (the IEEE f32 division; NaN -> the canonical NaN).
    Dequant,
}

/// Parameters of the fused MoE casts: the [`CastParams`] choices and what the scale outputs
/// hold.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct MoeCastParams {
    pub format: FormatChoice,
    /// Round scales down to a power of two (before any reciprocal).
    pub pow2_scales: bool,
    pub scales: ScaleOutput,
}

impl MoeCastParams {
    /// Forward scales (as [`CastParams::new`]).
    pub fn new(format: impl Into<FormatChoice>, pow2_scales: bool) -> Self {
        CastParams::new(format, pow2_scales).into()
    }
    /// The same parameters with the scale outputs holding `scales`.
    pub fn with_scales(self, scales: ScaleOutput) -> Self {
        MoeCastParams { scales, ..self }
    }
}

impl From<CastParams> for MoeCastParams {
    /// Forward scales.
    fn from(p: CastParams) -> Self {
        MoeCastParams {
            format: p.format,
            pow2_scales: p.pow2_scales,
            scales: ScaleOutput::Forward,
        }
    }
}

/// Memory layout of a matrix argument (row-major: last index contiguous).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Layout {
    RowMajor,
    ColMajor,
}

/// How cast-transpose scales.
#[repr(u32)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Scaling {
    /// One scale for the whole tensor; `scales[0] == scales_t[0]`, `out_t` is `out`
    /// transposed code for code.
    Tensorwise = 0,
    /// Per row of x for `out` (`scales[M]`), per column of x (= per row of x^T) for
    /// `out_t` (`scales_t[K]`).
    Rowwise = 1,
}

/// How a block's E8M0 exponent is derived from its amax.
#[repr(u32)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub enum MxRounding {
    /// `floor(log2(amax)) - emax_elem` (OCP MX reference; torchao's default). Values near
    /// the block max may saturate.
    #[default]
    Floor = 0,
    /// `ceil(log2(amax / max_elem))` (cuBLAS / Blackwell `cvt.rp`): never saturates.
    Rceil = 1,
}

/// Parameters of the MXFP8 casts.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct MxParams {
    /// Element format; must resolve to E4M3FN or E5M2 (MX defines no FNUZ elements, so
    /// `Auto` on an FNUZ-native context is rejected).
    pub format: FormatChoice,
    pub rounding: MxRounding,
}

impl MxParams {
    pub fn new(format: impl Into<FormatChoice>, rounding: MxRounding) -> Self {
        MxParams {
            format: format.into(),
            rounding,
        }
    }
}
