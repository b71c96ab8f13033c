//! The one declaration of every op ([`OpDecl`]) and the body every op shares.
//!
//! An op is a `static` [`OpDecl`] in its family's module: its buffers in C argument order
//! (name, role, element type, length as a function of the op's shape), its shape checks, its
//! reference function and its launcher. From it [`Context::run`] derives the validation (sizes,
//! non-zero reduced dimensions, every view's length and location, END offsets), the format
//! resolution and the backend switch; `ffi::args::Views::views` derives the C export's
//! argument unpacking; tests/support/ffi_ops.rs derives the test op table's buffers
//! ([`OpDecl::buffers`]). The public `Context` method and the C export are one-line calls.
//!
//! - [`Context::dispatch`]: the backend switch. CPU: run the reference on host slices. GPU:
//!   nothing when the problem is empty, else refuse pointers that are not memory of this GPU,
//!   make it current and queue the launch.

use std::ffi::{c_int, c_void};

use half::bf16;

use crate::context::{BackendKind, Context};
use crate::error::{Error, Result};
use crate::format::Fp8Format;
use crate::params::{CastParams, MoeCastParams, Scaling};
use crate::runtime::{check_status, require_gpu};
use crate::sys;
use crate::validate::checked_mul;
use crate::view::{Dst, HpSrc, Src, StreamRef};
use crate::workspace::{Kind, Workspace};

/// What an op's parameters resolve to on a context (the error, if any, is reported after the
/// views are checked): the output format of a cast, the two operand formats of a GEMM.
pub trait OpParams {
    type Resolved: Copy;
    fn resolve_on(&self, ctx: &Context) -> Result<Self::Resolved>;
}

impl OpParams for CastParams {
    type Resolved = Fp8Format;
    fn resolve_on(&self, ctx: &Context) -> Result<Fp8Format> {
        Ok(ctx.resolve(self.format))
    }
}

impl OpParams for MoeCastParams {
    type Resolved = Fp8Format;
    fn resolve_on(&self, ctx: &Context) -> Result<Fp8Format> {
        Ok(ctx.resolve(self.format))
    }
}

/// The parameters of an op that has none (`scale_reciprocal`, the MoE combine).
#[derive(Clone, Copy, Debug, Default)]
pub struct NoParams;

impl OpParams for NoParams {
    type Resolved = ();
    fn resolve_on(&self, _: &Context) -> Result<()> {
        Ok(())
    }
}

/// The element type of a buffer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Elem {
    /// High-precision input: bf16 or f32, chosen by the caller (`hipfp8_dtype`).
    Hp,
    /// FP8 codes or E8M0 scales.
    U8,
    I32,
    F32,
    Bf16,
}

impl Elem {
    /// Bytes per element (`None` for [`Elem::Hp`]: the caller's dtype decides).
    pub fn size(self) -> Option<usize> {
        match self {
            Elem::Hp => None,
            Elem::U8 => Some(1),
            Elem::Bf16 => Some(2),
            Elem::I32 | Elem::F32 => Some(4),
        }
    }
}

/// What an op does with a buffer.
pub enum Role<S> {
    /// Read; must hold at least its length.
    In,
    /// int32 END offsets: read, one per group (their count is the group count), checked
    /// against the extent of the grouped dimension on the CPU (kernels clamp them).
    Offsets { extent: fn(&S) -> usize },
    /// Written; must hold at least its length. Nothing is written when the call fails.
    Out,
}

/// Elements a buffer of an op reads or writes, from the shape and the group count.
pub type LenFn<S> = fn(&S, usize) -> Result<usize>;

/// One buffer of an op.
pub struct BufDecl<S> {
    pub name: &'static str,
    pub role: Role<S>,
    pub elem: Elem,
    /// Elements the op reads or writes, from the shape and the group count (an overflow is
    /// `SizeOverflow`, named after the product).
    pub len: LenFn<S>,
    /// A high-precision input that must have the dtype of the earlier high-precision input
    /// named here (its kernel reads both in one dtype): `NotSupported` otherwise, and the C
    /// export gives both the one `hipfp8_dtype` of its descriptor.
    pub dtype_of: Option<&'static str>,
}

impl<S> BufDecl<S> {
    const fn new(name: &'static str, role: Role<S>, elem: Elem, len: LenFn<S>) -> Self {
        BufDecl {
            name,
            role,
            elem,
            len,
            dtype_of: None,
        }
    }
    /// A high-precision input.
    pub const fn hp(name: &'static str, len: LenFn<S>) -> Self {
        Self::new(name, Role::In, Elem::Hp, len)
    }
    /// A high-precision input of the dtype of the earlier high-precision input `like`.
    pub const fn hp_like(name: &'static str, like: &'static str, len: LenFn<S>) -> Self {
        let mut b = Self::hp(name, len);
        b.dtype_of = Some(like);
        b
    }
    pub const fn input(name: &'static str, elem: Elem, len: LenFn<S>) -> Self {
        Self::new(name, Role::In, elem, len)
    }
    /// END offsets along the dimension `extent` returns.
    pub const fn offsets(name: &'static str, extent: fn(&S) -> usize) -> Self {
        Self::new(name, Role::Offsets { extent }, Elem::I32, |_, g| Ok(g))
    }
    pub const fn output(name: &'static str, elem: Elem, len: LenFn<S>) -> Self {
        Self::new(name, Role::Out, elem, len)
    }
}

/// How the GPU arm runs.
pub enum GpuRun<S> {
    /// Through [`Context::dispatch`]: nothing when `noop(shape, groups)` (the CPU reference
    /// still runs), else every buffer's pointer is checked (in declaration order) and the GPU
    /// made current before the launcher runs.
    Checked { noop: fn(&S, usize) -> bool },
    /// The launcher makes its own plan, emptiness and pointer checks (the grouped GEMM).
    Own,
}

/// A dimension of a shape.
pub type Dim<S> = fn(&S) -> usize;
/// A shape check beyond the buffer lengths (parameters, shape, group count).
pub type ShapeCheck<P, S> = fn(&P, &S, usize) -> Result<()>;
/// The GPU arm of an op: context, parameters, resolved parameters, shape, device pointers,
/// stream.
pub(crate) type Launch<P, S> =
    fn(&Context, &P, <P as OpParams>::Resolved, &S, &Dev<'_>, StreamRef) -> Result<()>;

/// The declaration of one op. `P`: its parameters; `S`: its shape (the dimensions of the
/// descriptor, e.g. `(m, k)`).
pub struct OpDecl<P: OpParams + 'static, S: 'static> {
    /// The C export's name (error messages of the C ABI start with it).
    pub c_name: &'static str,
    /// The buffers, in the order of the C arguments (and of the checks).
    pub bufs: &'static [BufDecl<S>],
    /// Reduced dimensions that must be > 0 (`InvalidShape`), checked after the sizes.
    pub nonzero: &'static [(&'static str, Dim<S>)],
    /// Further shape checks (after the sizes and non-zero checks, before the views).
    pub(crate) check: Option<ShapeCheck<P, S>>,
    pub(crate) gpu_run: GpuRun<S>,
    /// The reference (CPU backend) on the validated host slices.
    pub(crate) cpu: fn(&P, P::Resolved, &S, &mut Host<'_>) -> Result<()>,
    /// The launch (GPU backend) on the validated device pointers; only queues work on the
    /// stream.
    pub(crate) gpu: Launch<P, S>,
}

/// A buffer of [`OpDecl::buffers`]: what the C caller passes for a shape.
#[derive(Clone, Debug)]
pub struct BufInfo {
    pub name: &'static str,
    pub elem: Elem,
    pub output: bool,
    pub offsets: bool,
    pub len: usize,
}

impl<P: OpParams, S> OpDecl<P, S> {
    /// The buffers a call of `shape` with `groups` groups takes, with their lengths.
    pub fn buffers(&self, shape: &S, groups: usize) -> Result<Vec<BufInfo>> {
        self.bufs
            .iter()
            .map(|b| {
                Ok(BufInfo {
                    name: b.name,
                    elem: b.elem,
                    output: matches!(b.role, Role::Out),
                    offsets: matches!(b.role, Role::Offsets { .. }),
                    len: (b.len)(shape, groups)?,
                })
            })
            .collect()
    }

    /// The extent the offsets index, for grouped ops.
    pub fn offsets_extent(&self, shape: &S) -> Option<usize> {
        self.bufs.iter().find_map(|b| match b.role {
            Role::Offsets { extent } => Some(extent(shape)),
            _ => None,
        })
    }
}

/// A buffer argument as the op receives it.
pub(crate) enum View<'a> {
    Hp(HpSrc<'a>),
    InU8(Src<'a, u8>),
    InI32(Src<'a, i32>),
    InF32(Src<'a, f32>),
    OutU8(Dst<'a, u8>),
    OutI32(Dst<'a, i32>),
    OutF32(Dst<'a, f32>),
    OutBf16(Dst<'a, bf16>),
}

impl<'a> From<HpSrc<'a>> for View<'a> {
    fn from(v: HpSrc<'a>) -> Self {
        View::Hp(v)
    }
}

/// The element types of typed views: how a [`View`] holds them.
pub(crate) trait ViewElem: Sized + 'static {
    const ELEM: Elem;
    fn src<'a>(v: &View<'a>) -> Option<Src<'a, Self>>;
    fn dst<'a>(v: View<'a>) -> Option<Dst<'a, Self>>;
}

macro_rules! view_elem {
    ($($t:ty: $elem:ident, $src:ident, $dst:ident;)*) => {$(
        impl ViewElem for $t {
            const ELEM: Elem = Elem::$elem;
            fn src<'a>(v: &View<'a>) -> Option<Src<'a, Self>> {
                view_elem!(@src v, $src)
            }
            fn dst<'a>(v: View<'a>) -> Option<Dst<'a, Self>> {
                match v {
                    View::$dst(d) => Some(d),
                    _ => None,
                }
            }
        }
        view_elem!(@from $t, $src, $dst);
    )*};
    (@src $v:ident, none) => {{
        let _ = $v;
        None
    }};
    (@src $v:ident, $src:ident) => {
        match $v {
            View::$src(s) => Some(*s),
            _ => None,
        }
    };
    (@from $t:ty, none, $dst:ident) => {
        impl<'a> From<Dst<'a, $t>> for View<'a> {
            fn from(v: Dst<'a, $t>) -> Self {
                View::$dst(v)
            }
        }
    };
    (@from $t:ty, $src:ident, $dst:ident) => {
        impl<'a> From<Src<'a, $t>> for View<'a> {
            fn from(v: Src<'a, $t>) -> Self {
                View::$src(v)
            }
        }
        view_elem!(@from $t, none, $dst);
    };
}

view_elem! {
    u8: U8, InU8, OutU8;
    i32: I32, InI32, OutI32;
    f32: F32, InF32, OutF32;
    bf16: Bf16, none, OutBf16;
}

impl View<'_> {
    fn elem(&self) -> Elem {
        match self {
            View::Hp(_) => Elem::Hp,
            View::InU8(_) | View::OutU8(_) => Elem::U8,
            View::InI32(_) | View::OutI32(_) => Elem::I32,
            View::InF32(_) | View::OutF32(_) => Elem::F32,
            View::OutBf16(_) => Elem::Bf16,
        }
    }
    fn is_output(&self) -> bool {
        matches!(
            self,
            View::OutU8(_) | View::OutI32(_) | View::OutF32(_) | View::OutBf16(_)
        )
    }
    fn len(&self) -> usize {
        match self {
            View::Hp(v) => v.len(),
            View::InU8(v) => v.len(),
            View::InI32(v) => v.len(),
            View::InF32(v) => v.len(),
            View::OutU8(v) => v.len(),
            View::OutI32(v) => v.len(),
            View::OutF32(v) => v.len(),
            View::OutBf16(v) => v.len(),
        }
    }
    /// The device pointer and dtype id (hp inputs; -1 otherwise) a launcher takes.
    fn raw(&mut self) -> (*const c_void, i32) {
        let p = |p: *const c_void| (p, -1);
        match self {
            View::Hp(v) => v.raw_parts(),
            View::InU8(v) => p(v.as_ptr().cast()),
            View::InI32(v) => p(v.as_ptr().cast()),
            View::InF32(v) => p(v.as_ptr().cast()),
            View::OutU8(v) => p(v.as_mut_ptr().cast_const().cast()),
            View::OutI32(v) => p(v.as_mut_ptr().cast_const().cast()),
            View::OutF32(v) => p(v.as_mut_ptr().cast_const().cast()),
            View::OutBf16(v) => p(v.as_mut_ptr().cast_const().cast()),
        }
    }
}

/// The most buffers an op declares (checked at compile time by [`Context::run`]): the
/// views of a call live in fixed arrays of this size, not on the heap.
pub(crate) const MAX_BUFS: usize = crate::runtime::MAX_CHECKED;

/// An op's validated views as its reference takes them, by buffer name.
pub(crate) struct Host<'a> {
    names: &'a [&'static str],
    views: [Option<View<'a>>; MAX_BUFS],
}

impl<'a> Host<'a> {
    fn at(&self, name: &str) -> usize {
        self.names
            .iter()
            .position(|n| *n == name)
            .unwrap_or_else(|| panic!("op has no buffer `{name}`"))
    }
    /// A high-precision input (use with `with_hp!`).
    pub(crate) fn hp(&self, name: &str) -> HpSrc<'a> {
        match &self.views[self.at(name)] {
            Some(View::Hp(v)) => *v,
            _ => panic!("`{name}` is not a high-precision input"),
        }
    }
    /// A typed input's host slice.
    pub(crate) fn src<T: ViewElem>(&self, name: &str) -> &'a [T] {
        let v = self.views[self.at(name)].as_ref();
        v.and_then(T::src)
            .unwrap_or_else(|| panic!("`{name}` is not an input of {:?}", T::ELEM))
            .host_slice()
    }
    /// An output's host slice (each output is taken once).
    pub(crate) fn dst<T: ViewElem>(&mut self, name: &str) -> &'a mut [T] {
        let i = self.at(name);
        self.views[i]
            .take()
            .and_then(T::dst)
            .unwrap_or_else(|| {
                panic!(
                    "`{name}` is not an output of {:?} (or taken twice)",
                    T::ELEM
                )
            })
            .host_slice_mut()
    }
}

/// An op's validated views as its launcher takes them, by buffer name.
pub(crate) struct Dev<'n> {
    names: &'n [&'static str],
    ptrs: [(*const c_void, i32); MAX_BUFS],
    groups: usize,
}

impl Dev<'_> {
    fn at(&self, name: &str) -> (*const c_void, i32) {
        let i = self.names.iter().position(|n| *n == name);
        self.ptrs[i.unwrap_or_else(|| panic!("op has no buffer `{name}`"))]
    }
    /// A buffer's device pointer (null for an absent one).
    pub(crate) fn ptr<T>(&self, name: &str) -> *mut T {
        self.at(name).0.cast_mut().cast()
    }
    /// The `HIPFP8_DTYPE_*` id of a high-precision input.
    pub(crate) fn dtype(&self, name: &str) -> i32 {
        self.at(name).1
    }
    /// The group count (the offsets' count; 0 for an ungrouped op).
    pub(crate) fn groups(&self) -> usize {
        self.groups
    }
}

/// The name of a `HIPFP8_DTYPE_*` id.
pub(crate) fn dtype_name(id: i32) -> &'static str {
    match id {
        sys::DTYPE_BF16 => "bf16",
        sys::DTYPE_F32 => "f32",
        _ => "unknown",
    }
}

/// What a CPU reference returns: nothing, or a `Result` (the ones that allocate scratch, which
/// may fail with OUT_OF_MEMORY before anything is written).
pub(crate) trait CpuOutcome {
    fn into_result(self) -> Result<()>;
}

impl CpuOutcome for () {
    fn into_result(self) -> Result<()> {
        Ok(())
    }
}

impl CpuOutcome for Result<()> {
    fn into_result(self) -> Result<()> {
        self
    }
}

impl Context {
    /// Run an op whose views are validated and whose format is resolved: on the CPU `cpu`;
    /// on the GPU nothing when `gpu_noop` (nothing to launch), else check that every pointer
    /// of `ptrs` is memory of this GPU (the first bad one in this order is reported), make
    /// the GPU current and run `gpu`, which queues the launch on the op's stream.
    pub(crate) fn dispatch<R: CpuOutcome>(
        &self,
        gpu_noop: bool,
        ptrs: &[(&'static str, *const c_void)],
        cpu: impl FnOnce() -> R,
        gpu: impl FnOnce() -> Result<()>,
    ) -> Result<()> {
        match self.backend() {
            BackendKind::Cpu => cpu().into_result(),
            BackendKind::Gpu => {
                if gpu_noop {
                    return Ok(());
                }
                self.check_device_pointers(ptrs)?;
                let _dev = self.activate()?;
                gpu()
            }
        }
    }

    /// Run the op `decl` on `views` (one per declared buffer, in order): the sizes of every
    /// buffer (overflow), the non-zero reduced dimensions, the op's shape checks, each view
    /// against its length and this context's memory kind, the END offsets (CPU), the
    /// parameters; then exactly one backend. Nothing is written when any check fails.
    pub(crate) fn run<'a, P: OpParams, S, const N: usize>(
        &self,
        decl: &OpDecl<P, S>,
        p: &P,
        shape: S,
        views: [View<'a>; N],
        stream: StreamRef,
    ) -> Result<()> {
        const { assert!(N <= MAX_BUFS) };
        assert_eq!(
            N,
            decl.bufs.len(),
            "{}: one view per declared buffer",
            decl.c_name
        );
        let groups = decl
            .bufs
            .iter()
            .zip(&views)
            .find(|(b, _)| matches!(b.role, Role::Offsets { .. }))
            .map_or(0, |(_, v)| v.len());
        let mut lens = [0usize; N];
        for (len, b) in lens.iter_mut().zip(decl.bufs) {
            *len = (b.len)(&shape, groups)?;
        }
        for (name, dim) in decl.nonzero {
            crate::validate::require_nonzero(name, dim(&shape))?;
        }
        if let Some(check) = decl.check {
            check(p, &shape, groups)?;
        }
        let mut views = views;
        for ((b, v), &len) in decl.bufs.iter().zip(views.iter_mut()).zip(&lens) {
            debug_assert!(
                v.elem() == b.elem && v.is_output() == matches!(b.role, Role::Out),
                "{}: `{}` is not declared as given",
                decl.c_name,
                b.name
            );
            self.check_view_of(b.name, v, len)?;
        }
        check_one_dtype(decl, &views)?;
        for (b, v) in decl.bufs.iter().zip(&views) {
            if let (Role::Offsets { extent }, View::InI32(offs)) = (&b.role, v) {
                if self.backend() == BackendKind::Cpu {
                    crate::validate::validate_offsets(offs.host_slice(), extent(&shape))?;
                }
            }
        }
        let r = p.resolve_on(self)?;
        let mut names = [""; N];
        for (n, b) in names.iter_mut().zip(decl.bufs) {
            *n = b.name;
        }
        let mut dev = Dev {
            names: &names,
            ptrs: [(std::ptr::null(), -1); MAX_BUFS],
            groups,
        };
        // A null pointer (an absent buffer) is skipped by the pointer check, and so is a
        // buffer the op needs no element of (an empty allocation may be any address).
        let mut ptrs = [("", std::ptr::null()); MAX_BUFS];
        let mut n_ptrs = 0;
        for (i, (v, &len)) in views.iter_mut().zip(&lens).enumerate() {
            dev.ptrs[i] = v.raw();
            if len > 0 {
                ptrs[n_ptrs] = (names[i], dev.ptrs[i].0);
                n_ptrs += 1;
            }
        }
        let mut host = Host {
            names: &names,
            views: [const { None }; MAX_BUFS],
        };
        for (h, v) in host.views.iter_mut().zip(views) {
            *h = Some(v);
        }
        let shape = &shape;
        let cpu = move || {
            let mut host = host;
            (decl.cpu)(p, r, shape, &mut host)
        };
        let gpu = || (decl.gpu)(self, p, r, shape, &dev, stream);
        match decl.gpu_run {
            GpuRun::Checked { noop } => {
                self.dispatch(noop(shape, groups), &ptrs[..n_ptrs], cpu, gpu)
            }
            GpuRun::Own => match self.backend() {
                BackendKind::Cpu => cpu(),
                BackendKind::Gpu => gpu(),
            },
        }
    }

    /// A view against the elements its op needs and this context's memory kind.
    fn check_view_of(&self, what: &'static str, v: &mut View<'_>, needed: usize) -> Result<()> {
        match v {
            View::Hp(s) => self.check_hp(what, s, needed),
            View::InU8(s) => self.check_src(what, s, needed),
            View::InI32(s) => self.check_src(what, s, needed),
            View::InF32(s) => self.check_src(what, s, needed),
            View::OutU8(d) => self.check_dst(what, d, needed),
            View::OutI32(d) => self.check_dst(what, d, needed),
            View::OutF32(d) => self.check_dst(what, d, needed),
            View::OutBf16(d) => self.check_dst(what, d, needed),
        }
    }
}

/// The high-precision inputs declared with [`BufDecl::hp_like`] against the input they name.
fn check_one_dtype<P: OpParams, S>(decl: &OpDecl<P, S>, views: &[View<'_>]) -> Result<()> {
    let hp = |name: &str| {
        let i = decl.bufs.iter().position(|b| b.name == name);
        match i.map(|i| &views[i]) {
            Some(View::Hp(v)) => v,
            _ => panic!("{}: `{name}` is not a high-precision input", decl.c_name),
        }
    };
    for b in decl.bufs {
        if let Some(like) = b.dtype_of {
            let (x, y) = (hp(b.name), hp(like));
            if x.raw_parts().1 != y.raw_parts().1 {
                return Err(Error::NotSupported(format!(
                    "{} takes one dtype for `{like}` and `{}` (got {} and {})",
                    decl.c_name,
                    b.name,
                    y.dtype_name(),
                    x.dtype_name()
                )));
            }
        }
    }
    Ok(())
}

/// The public [`Context`] method of each op, from one line per op: `fn name(p: &P, <dims>;
/// <views, in declaration order>) = DECL shape;` makes `pub fn name(&self, p, <dims>, <views>,
/// stream: StreamRef) -> Result<()>`, which runs `DECL` on `shape` (the doc comment goes with it).
macro_rules! op_methods {
    ($(
        $(#[$doc:meta])*
        fn $name:ident(p: &$p:ty, $($dim:ident: $dt:ty),+; $($view:ident: $vt:ty),+ $(,)?)
            = $decl:ident $shape:expr;
    )+) => {
        impl $crate::context::Context {$(
            $(#[$doc])*
            pub fn $name(
                &self,
                p: &$p,
                $($dim: $dt,)+
                $($view: $vt,)+
                stream: $crate::view::StreamRef,
            ) -> $crate::error::Result<()> {
                self.run(&$decl, p, $shape, [$($view.into()),+], stream)
            }
        )+}
    };
}
pub(crate) use op_methods;

/// The CPU arm of a cast with one high-precision input `x`, FP8 `out` and `scales`:
/// `$f($rule(fmt, p.$param), shape, x, Scaled(out, scales))` (a reference that returns
/// nothing), or with `offs`, `$f($rule(fmt, p.$param), Grouped { m, k, x, offs },
/// Scaled(out, scales))` (a reference that checks the offsets).
macro_rules! cast_cpu {
    ($f:path, $rule:path, $param:ident) => {
        |p, fmt, &shape, h| {
            let out = $crate::reference::Scaled::new(h.dst("out"), h.dst("scales"));
            let rule = $rule(fmt, p.$param);
            $crate::view::with_hp!(h.hp("x"), |x| $f(rule, shape, x, out));
            Ok(())
        }
    };
    ($f:path, $rule:path, $param:ident, offs) => {
        |p, fmt, &(m, k), h| {
            let offs = h.src("offs");
            let out = $crate::reference::Scaled::new(h.dst("out"), h.dst("scales"));
            let rule = $rule(fmt, p.$param);
            $crate::view::with_hp!(h.hp("x"), |x| {
                $f(rule, $crate::reference::Grouped { m, k, x, offs }, out)
            })
        }
    };
}
pub(crate) use cast_cpu;

/// The GPU arm of a cast with one high-precision input `x`, FP8 `out` and `scales` of an
/// (m, k) shape: queue `$launcher(x, out, scales, m, k, format, $flag, dtype of x, stream)`
/// (`$flag`: pow2, or the MX rounding); its status is `$op`'s.
macro_rules! launch_cast {
    ($launcher:path, $op:expr, $flag:expr, $fmt:expr, $shape:expr, $d:expr, $stream:expr) => {{
        let d: &$crate::dispatch::Dev = $d;
        let (m, k): (usize, usize) = $shape;
        let (x, o, s, dt) = (d.ptr("x"), d.ptr("out"), d.ptr("scales"), d.dtype("x"));
        let (m, k, f, flag) = (m as i64, k as i64, $fmt as i32, $flag as i32);
        // SAFETY: validated by Context::run: device memory of this context's GPU holding m*k
        // inputs, m*k output bytes and the scales the op's declaration sized; the launchers
        // only queue work on the stream (docs/KERNEL_ABI.md).
        let st = unsafe { $launcher(x, o, s, m, k, f, flag, dt, $stream.0) };
        $crate::runtime::check_status($op, st)
    }};
}
pub(crate) use launch_cast;

/// The byte count a launcher's size query (`what`, for the error) writes through its
/// out-pointer.
pub(crate) fn device_bytes(what: &str, query: impl FnOnce(&mut u64) -> c_int) -> Result<usize> {
    let mut bytes = 0u64;
    check_status(what, query(&mut bytes))?;
    Ok(bytes as usize)
}

/// The length `m*k` of an (m, k) shape (the inputs and FP8 outputs of 2D casts).
pub(crate) fn len_mk(&(m, k): &(usize, usize), _: usize) -> Result<usize> {
    checked_mul("m*k", m, k)
}

/// `m` of an (m, k) shape (one scale per row).
pub(crate) fn len_m(&(m, _): &(usize, usize), _: usize) -> Result<usize> {
    Ok(m)
}

/// One element (a tensor scale or amax).
pub(crate) fn len_one<S>(_: &S, _: usize) -> Result<usize> {
    Ok(1)
}

/// `m == 0 || k == 0`: an empty (m, k) problem (nothing to launch).
pub(crate) fn empty_mk(&(m, k): &(usize, usize), _: usize) -> bool {
    m == 0 || k == 0
}

/// The GPU arm of an op that always launches (an empty tensor still writes its amax).
pub(crate) fn never_noop<S>(_: &S, _: usize) -> bool {
    false
}

impl Context {
    /// Run `f` with `stream`'s zeroed workspace of `bytes` bytes, or with null without
    /// touching the workspace when `bytes` is 0 (the grouped scratch of
    /// [`Context::grouped_scratch_size`] up to 2048 groups, the MoE workspace).
    pub(crate) fn with_zeroed_or_null<R>(
        &self,
        bytes: usize,
        stream: StreamRef,
        f: impl FnOnce(*mut c_void) -> Result<R>,
    ) -> Result<R> {
        if bytes == 0 {
            return f(std::ptr::null_mut());
        }
        self.workspace
            .with(self, Kind::Zeroed, bytes, stream, |ws, _| f(ws))
    }

    /// Device bytes of zeroed workspace per_group_rowwise and rowwise_2d_padded need for
    /// `groups` groups (0 up to 2048 groups).
    pub fn grouped_scratch_size(&self, groups: usize) -> Result<usize> {
        // SAFETY: plain arithmetic on the argument, writes the out-pointer only.
        device_bytes("grouped scratch size", |b| unsafe {
            sys::hipfp8_grouped_scratch_bytes(groups as i64, b)
        })
    }

    /// Run `f` with `stream`'s zeroed workspace sized for the column-reducing casts
    /// (per_group_colwise(_dual), rowwise_3d_transpose_rhs) of `groups` groups and row
    /// lengths `k1`, `k2` (0 when single).
    pub(crate) fn with_colwise_workspace<R>(
        &self,
        groups: usize,
        k1: usize,
        k2: usize,
        stream: StreamRef,
        f: impl FnOnce(*mut c_void) -> Result<R>,
    ) -> Result<R> {
        let bytes = self.colwise_workspace_size(groups, k1, k2)?;
        self.workspace
            .with(self, Kind::Zeroed, bytes, stream, |ws, _| f(ws))
    }

    /// Device bytes of zeroed workspace the column-reducing casts (per_group_colwise with
    /// `k1` columns, per_group_colwise_dual with `k1` and `k2`, rowwise_3d_transpose_rhs with
    /// `groups` = E and `k1` = K) need for `groups` groups.
    pub fn colwise_workspace_size(&self, groups: usize, k1: usize, k2: usize) -> Result<usize> {
        // SAFETY: plain arithmetic on the arguments, writes the out-pointer only.
        device_bytes("colwise workspace size", |b| unsafe {
            sys::hipfp8_colwise_workspace_bytes(groups as i64, k1 as i64, k2 as i64, b)
        })
    }

    /// Device bytes of zeroed workspace cast_transpose of an (m, k) matrix needs.
    pub fn cast_transpose_workspace_size(
        &self,
        m: usize,
        k: usize,
        scaling: Scaling,
    ) -> Result<usize> {
        // SAFETY: arithmetic on the arguments; writes the out-pointer only.
        device_bytes("cast_transpose workspace size", |b| unsafe {
            sys::hipfp8_cast_transpose_workspace_bytes(m as i64, k as i64, scaling as i32, b)
        })
    }

    /// Give `stream` a caller-provided zeroed workspace for the casts that need one
    /// (column-reducing casts, cast_transpose): at least the largest size of
    /// [`Context::colwise_workspace_size`] / [`Context::cast_transpose_workspace_size`] over
    /// the calls it will serve (a call that needs more fails with `OutputTooSmall`). Without
    /// one, each stream gets its own cached buffer (src/workspace.rs).
    ///
    /// # Safety
    /// `ws` must be device memory of this context's GPU, all zero, not used by anything else
    /// and kept alive until [`Context::unbind_stream_workspace`] and the end of the work queued
    /// with it (the kernels leave it zero).
    pub unsafe fn bind_stream_workspace(&self, stream: StreamRef, ws: Workspace) -> Result<()> {
        require_gpu(self, "a workspace")?;
        self.check_device_pointers(&[("workspace", ws.as_ptr() as *const c_void)])?;
        self.workspace.bind(stream, ws.as_ptr(), ws.len());
        Ok(())
    }

    /// Drop a binding of [`Context::bind_stream_workspace`]; the stream's next call that needs
    /// scratch allocates its own.
    pub fn unbind_stream_workspace(&self, stream: StreamRef) {
        self.workspace.unbind(stream)
    }
}
