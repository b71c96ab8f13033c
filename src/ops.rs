//! The operation API: one method per op on [`Context`], the same calls for every backend.
//!
//! Arguments are views ([`Src`], [`Dst`]) that carry a pointer, an element count and where the
//! memory lives ([`Loc`]). Safe constructors take Rust slices (host memory); GPU buffers and
//! the C ABI make views with the `unsafe` raw constructors. Every op validates everything it
//! can on the host (shapes, lengths, locations, formats, host-side offsets) BEFORE it writes
//! anything, then dispatches to exactly one backend.

use std::marker::PhantomData;

use half::bf16;

use crate::dispatch::CastIo;
use crate::error::{Error, Result};
use crate::format::Fp8Format;
use crate::quant::with_hp;
use crate::reference;

/// Where a view's memory lives.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Loc {
    Host,
    Device,
}

/// Read-only view of `len` elements of `T`.
#[derive(Clone, Copy, Debug)]
pub struct Src<'a, T> {
    ptr: *const T,
    len: usize,
    loc: Loc,
    _p: PhantomData<&'a [T]>,
}

/// Writable view of `len` elements of `T`.
#[derive(Debug)]
pub struct Dst<'a, T> {
    ptr: *mut T,
    len: usize,
    loc: Loc,
    _p: PhantomData<&'a mut [T]>,
}

impl<'a, T> From<&'a [T]> for Src<'a, T> {
    fn from(s: &'a [T]) -> Self {
        Src {
            ptr: s.as_ptr(),
            len: s.len(),
            loc: Loc::Host,
            _p: PhantomData,
        }
    }
}
impl<'a, T> From<&'a Vec<T>> for Src<'a, T> {
    fn from(s: &'a Vec<T>) -> Self {
        s.as_slice().into()
    }
}
impl<'a, T> From<&'a mut [T]> for Dst<'a, T> {
    fn from(s: &'a mut [T]) -> Self {
        Dst {
            ptr: s.as_mut_ptr(),
            len: s.len(),
            loc: Loc::Host,
            _p: PhantomData,
        }
    }
}
impl<'a, T> From<&'a mut Vec<T>> for Dst<'a, T> {
    fn from(s: &'a mut Vec<T>) -> Self {
        s.as_mut_slice().into()
    }
}

impl<'a, T> Src<'a, T> {
    /// # Safety
    /// `ptr` must be valid for reads of `len` elements in memory of kind `loc` for `'a`
    /// (device memory must belong to the context's device), or be null (rejected by ops).
    pub unsafe fn from_raw(ptr: *const T, len: usize, loc: Loc) -> Self {
        Src {
            ptr,
            len,
            loc,
            _p: PhantomData,
        }
    }
    pub fn len(&self) -> usize {
        self.len
    }
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
    pub fn loc(&self) -> Loc {
        self.loc
    }
    pub fn as_ptr(&self) -> *const T {
        self.ptr
    }
    /// The host slice behind a host view. Only called after validation (non-null, Host).
    pub(crate) fn host_slice(&self) -> &'a [T] {
        debug_assert_eq!(self.loc, Loc::Host);
        if self.len == 0 {
            return &[];
        }
        // SAFETY: from_raw's contract (or a borrowed slice) guarantees `len` readable
        // elements for 'a; ops check non-null and Loc::Host before calling this.
        unsafe { std::slice::from_raw_parts(self.ptr, self.len) }
    }
}

impl<'a, T> Dst<'a, T> {
    /// # Safety
    /// `ptr` must be valid for writes of `len` elements in memory of kind `loc` for `'a`, not
    /// aliased by any other view used in the same call, or be null (rejected by ops).
    pub unsafe fn from_raw(ptr: *mut T, len: usize, loc: Loc) -> Self {
        Dst {
            ptr,
            len,
            loc,
            _p: PhantomData,
        }
    }
    pub fn len(&self) -> usize {
        self.len
    }
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
    pub fn loc(&self) -> Loc {
        self.loc
    }
    pub fn as_mut_ptr(&mut self) -> *mut T {
        self.ptr
    }
    /// Reborrow as a shorter-lived view.
    pub fn reborrow(&mut self) -> Dst<'_, T> {
        Dst {
            ptr: self.ptr,
            len: self.len,
            loc: self.loc,
            _p: PhantomData,
        }
    }
    pub(crate) fn host_slice_mut(&mut self) -> &'a mut [T] {
        debug_assert_eq!(self.loc, Loc::Host);
        if self.len == 0 {
            return &mut [];
        }
        // SAFETY: from_raw's contract (or a borrowed slice) guarantees `len` writable,
        // unaliased elements for 'a; ops check non-null and Loc::Host before calling this.
        unsafe { std::slice::from_raw_parts_mut(self.ptr, self.len) }
    }
}

/// High-precision input: bf16 or f32.
#[derive(Clone, Copy, Debug)]
pub enum HpSrc<'a> {
    Bf16(Src<'a, bf16>),
    F32(Src<'a, f32>),
}

impl HpSrc<'_> {
    pub fn len(&self) -> usize {
        match self {
            HpSrc::Bf16(s) => s.len(),
            HpSrc::F32(s) => s.len(),
        }
    }
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
    pub fn loc(&self) -> Loc {
        match self {
            HpSrc::Bf16(s) => s.loc(),
            HpSrc::F32(s) => s.loc(),
        }
    }
    pub fn is_null(&self) -> bool {
        match self {
            HpSrc::Bf16(s) => s.as_ptr().is_null(),
            HpSrc::F32(s) => s.as_ptr().is_null(),
        }
    }
    /// The untyped pointer and dtype id a kernel launcher takes (docs/KERNEL_ABI.md).
    pub fn raw_parts(&self) -> (*const std::ffi::c_void, i32) {
        match self {
            HpSrc::Bf16(s) => (
                s.as_ptr() as *const std::ffi::c_void,
                crate::sys::DTYPE_BF16,
            ),
            HpSrc::F32(s) => (s.as_ptr() as *const std::ffi::c_void, crate::sys::DTYPE_F32),
        }
    }
    pub fn dtype_name(&self) -> &'static str {
        match self {
            HpSrc::Bf16(_) => "bf16",
            HpSrc::F32(_) => "f32",
        }
    }
}

impl<'a> From<&'a [bf16]> for HpSrc<'a> {
    fn from(s: &'a [bf16]) -> Self {
        HpSrc::Bf16(s.into())
    }
}
impl<'a> From<&'a Vec<bf16>> for HpSrc<'a> {
    fn from(s: &'a Vec<bf16>) -> Self {
        HpSrc::Bf16(s.as_slice().into())
    }
}
impl<'a> From<&'a [f32]> for HpSrc<'a> {
    fn from(s: &'a [f32]) -> Self {
        HpSrc::F32(s.into())
    }
}
impl<'a> From<&'a Vec<f32>> for HpSrc<'a> {
    fn from(s: &'a Vec<f32>) -> Self {
        HpSrc::F32(s.as_slice().into())
    }
}

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

/// Memory layout of a matrix argument (row-major: last index contiguous).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Layout {
    RowMajor,
    ColMajor,
}

/// A GPU stream handle (`hipStream_t` / `cudaStream_t`), or the null (default) stream.
/// Ignored by the CPU backend.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StreamRef(pub *mut std::ffi::c_void);

impl StreamRef {
    pub const DEFAULT: StreamRef = StreamRef(std::ptr::null_mut());
}

impl Default for StreamRef {
    fn default() -> Self {
        Self::DEFAULT
    }
}

/// Which backend a context runs on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BackendKind {
    Cpu,
    Gpu,
}

/// Owns the backend choice and the native FP8 flavour. Cheap to create for the CPU.
#[derive(Debug)]
pub struct Context {
    backend: BackendKind,
    /// true when the device's native FP8 is FNUZ (gfx940/941/942).
    native_fnuz: bool,
    /// Human-readable device name.
    device_name: String,
    /// Architecture string ("cpu", "gfx942", "sm_90", ...).
    arch: String,
    /// GPU ordinal for the GPU backend (see `device.rs`), None for the CPU.
    ordinal: Option<usize>,
    /// Device scratch of the GPU kernels that need one (see `workspace.rs`).
    pub(crate) workspace: crate::workspace::WorkspaceCell,
}

impl Context {
    /// The CPU backend; native format OCP.
    pub fn cpu() -> Context {
        Context {
            backend: BackendKind::Cpu,
            native_fnuz: false,
            device_name: format!("host CPU ({} threads)", rayon::current_num_threads()),
            arch: "cpu".into(),
            ordinal: None,
            workspace: Default::default(),
        }
    }

    /// A GPU context; made by `Context::gpu` (src/device.rs) from the device's properties.
    pub(crate) fn new_gpu(
        ordinal: usize,
        device_name: String,
        arch: String,
        native_fnuz: bool,
    ) -> Context {
        let workspace = Default::default();
        Context {
            backend: BackendKind::Gpu,
            native_fnuz,
            device_name,
            arch,
            ordinal: Some(ordinal),
            workspace,
        }
    }

    /// The GPU ordinal of a GPU context.
    pub fn ordinal(&self) -> Option<usize> {
        self.ordinal
    }

    /// The CPU backend pretending to be a device whose native FP8 is FNUZ (for testing
    /// and for preparing data for an MI300 on the host).
    pub fn cpu_with_fnuz_native(fnuz: bool) -> Context {
        Context {
            native_fnuz: fnuz,
            ..Context::cpu()
        }
    }

    pub fn backend(&self) -> BackendKind {
        self.backend
    }
    pub fn device_name(&self) -> &str {
        &self.device_name
    }
    pub fn arch(&self) -> &str {
        &self.arch
    }

    /// The device's native E4M3 flavour.
    pub fn native_format(&self) -> Fp8Format {
        if self.native_fnuz {
            Fp8Format::E4M3FnUz
        } else {
            Fp8Format::E4M3Fn
        }
    }

    /// Resolve a [`FormatChoice`] for this context.
    pub fn resolve(&self, f: FormatChoice) -> Fp8Format {
        match f {
            FormatChoice::Auto => self.native_format(),
            FormatChoice::AutoE5M2 => {
                if self.native_fnuz {
                    Fp8Format::E5M2FnUz
                } else {
                    Fp8Format::E5M2
                }
            }
            FormatChoice::Exact(f) => f,
        }
    }

    /// The memory kind this context's ops take.
    pub fn loc(&self) -> Loc {
        match self.backend {
            BackendKind::Cpu => Loc::Host,
            BackendKind::Gpu => Loc::Device,
        }
    }

    // ---- validation helpers shared by all ops -------------------------------------------

    pub(crate) fn check_src<T>(
        &self,
        what: &'static str,
        s: &Src<'_, T>,
        needed: usize,
    ) -> Result<()> {
        check_view(
            self.loc(),
            what,
            s.as_ptr() as *const u8,
            s.loc(),
            s.len(),
            needed,
            false,
        )
    }
    pub(crate) fn check_hp(&self, what: &'static str, s: &HpSrc<'_>, needed: usize) -> Result<()> {
        match s {
            HpSrc::Bf16(v) => self.check_src(what, v, needed),
            HpSrc::F32(v) => self.check_src(what, v, needed),
        }
    }
    pub(crate) fn check_dst<T>(
        &self,
        what: &'static str,
        d: &mut Dst<'_, T>,
        needed: usize,
    ) -> Result<()> {
        let loc = d.loc();
        let len = d.len();
        check_view(
            self.loc(),
            what,
            d.as_mut_ptr() as *const u8,
            loc,
            len,
            needed,
            true,
        )
    }

    /// Host-side validation of int32 END offsets (CPU backend only: on the GPU they live on
    /// the device, are never read back, and kernels clamp them).
    pub(crate) fn check_offsets(&self, offs: &Src<'_, i32>, extent: usize) -> Result<()> {
        self.check_src("offs", offs, offs.len())?;
        if self.backend() == BackendKind::Cpu {
            crate::ops::validate_offsets(offs.host_slice(), extent)?;
        }
        Ok(())
    }

    // ---- ops -----------------------------------------------------------------------------

    /// Rowwise (axiswise, last dim) scale-and-cast of an (m, k) row-major matrix:
    /// `out[i*k + j] = encode(x[i*k + j] * scales[i])`, `scales[i] = scale(amax(row i))`.
    /// Used for the forward A operand and the dgrad grad_out. Writes m*k bytes and m scales.
    pub fn rowwise_2d(
        &self,
        p: &CastParams,
        m: usize,
        k: usize,
        x: HpSrc<'_>,
        out: Dst<'_, u8>,
        scales: Dst<'_, f32>,
        stream: StreamRef,
    ) -> Result<()> {
        let mk = checked_mul("m*k", m, k)?;
        require_nonzero("k", k)?;
        let io = CastIo::new(x, out, scales, mk, m).gpu_noop_if(mk == 0);
        self.cast_op(
            p,
            io,
            |fmt, h| {
                with_hp!(h.x, |x| reference::rowwise_2d(
                    fmt,
                    p.pow2_scales,
                    m,
                    k,
                    x,
                    h.out,
                    h.scales
                ))
            },
            |fmt, d| {
                // SAFETY: the views were validated by cast_op: device memory of this context's
                // GPU holding m*k inputs, m*k output bytes and m scales; the launcher only
                // queues work on `stream` (docs/KERNEL_ABI.md).
                let st = unsafe {
                    crate::sys::hipfp8_rowwise_2d_launch(
                        d.x,
                        d.out,
                        d.scales,
                        m as i64,
                        k as i64,
                        fmt as i32,
                        p.pow2_scales as i32,
                        d.dtype,
                        stream.0,
                    )
                };
                crate::device::check_status("rowwise_2d", st)
            },
        )
    }
}

/// `a * b` or a SizeOverflow naming the product.
pub fn checked_mul(what: &str, a: usize, b: usize) -> Result<usize> {
    a.checked_mul(b)
        .ok_or_else(|| Error::SizeOverflow(format!("{what} = {a} * {b} overflows")))
}

pub fn require_nonzero(what: &str, v: usize) -> Result<()> {
    if v == 0 {
        Err(Error::InvalidShape(format!("{what} must be > 0")))
    } else {
        Ok(())
    }
}

/// The `*_scaled` ops take the caller's scale as is: power-of-two rounding, which applies to
/// a scale the op derives, is refused rather than silently ignored.
pub fn require_no_pow2(p: &CastParams) -> Result<()> {
    if p.pow2_scales {
        Err(Error::InvalidEnum(
            "pow2_scales does not apply to a given scale (round it before the call)".into(),
        ))
    } else {
        Ok(())
    }
}

fn check_view(
    ctx_loc: Loc,
    what: &'static str,
    ptr: *const u8,
    loc: Loc,
    len: usize,
    needed: usize,
    output: bool,
) -> Result<()> {
    if needed > 0 && ptr.is_null() {
        return Err(Error::NullPointer(what));
    }
    if loc != ctx_loc {
        return Err(Error::WrongLocation(format!(
            "`{what}` is {loc:?} memory but the context runs on {ctx_loc:?} memory"
        )));
    }
    if len < needed {
        return Err(if output {
            Error::OutputTooSmall {
                what,
                needed,
                got: len,
            }
        } else {
            Error::InputTooSmall {
                what,
                needed,
                got: len,
            }
        });
    }
    Ok(())
}

/// Validate int32 END offsets on the host: non-negative, non-decreasing, last <= extent.
/// (Offsets may end before `extent`: trailing rows/columns belong to no group and are not
/// written.) Used by every grouped op on the CPU backend; GPU kernels clamp instead, since
/// offsets live on the device and reading them back would synchronise.
pub fn validate_offsets(offs: &[i32], extent: usize) -> Result<()> {
    let mut prev: i64 = 0;
    for (g, &o) in offs.iter().enumerate() {
        if o < 0 {
            return Err(Error::InvalidOffsets(format!(
                "offs[{g}] = {o} is negative"
            )));
        }
        if (o as i64) < prev {
            return Err(Error::InvalidOffsets(format!(
                "offs[{g}] = {o} < offs[{}] = {prev}: offsets must be non-decreasing",
                g.saturating_sub(1)
            )));
        }
        if o as usize > extent {
            return Err(Error::InvalidOffsets(format!(
                "offs[{g}] = {o} is past the extent {extent}"
            )));
        }
        prev = o as i64;
    }
    Ok(())
}
