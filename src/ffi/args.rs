//! The one place where C arguments become Rust values: descriptors, enums, out-parameters
//! and the ops' [`Src`]/[`Dst`] views.
//!
//! The C caller's side of the contract (stated in the header): every non-NULL (pointer,
//! count) pair names `count` elements that are valid for the access the op makes (read for
//! inputs, write for outputs), live in the memory kind of the context (host for a CPU
//! context, the context's device for a GPU one), stay valid until the call returns (CPU) or
//! the stream work completes (GPU); descriptors and out-parameters point to an object of their
//! type. What the library checks before relying on that: NULL, alignment to the element type,
//! that the byte count fits `isize` (the `slice::from_raw_parts` precondition), and that no
//! output's address range (pointer, count) overlaps another buffer of the call
//! (OVERLAPPING_BUFFERS; inputs may share memory with each other, they are only read). Everything else about the views
//! (lengths vs shapes, locations) is checked by the ops themselves before anything is written.

use std::cell::RefCell;
use std::ffi::{c_char, c_void};
use std::mem::{align_of, size_of};

use half::bf16;

use super::status::FfiError;
use super::types::{hipfp8_dtype, hipfp8_flag, hipfp8_format};
use crate::context::{Context, VerifiedPointers};
use crate::dispatch::{Elem, OpDecl, OpParams, Role, View};
use crate::error::Error;
use crate::grouped_gemm::params::GemmWorkspace;
use crate::params::{CastParams, FormatChoice, MoeCastParams, ScaleOutput};
use crate::view::{Dst, HpSrc, Loc, Src};

/// A C buffer argument: its pointer and element count.
pub(crate) type Raw = (*const c_void, usize);

/// A C buffer argument of any element type (input or output) as a [`Raw`].
pub(crate) fn raw<T>(p: *const T, len: usize) -> Raw {
    (p.cast(), len)
}

/// A problem descriptor: `#[repr(C)]`, first field `size: usize` (set by the caller to
/// `sizeof` the struct), every field an integer, so any bit pattern is a valid value.
///
/// # Safety
/// Implementors must satisfy exactly that; [`read_desc`] relies on it. Use [`descriptor!`],
/// which also checks the `size` offset at compile time.
pub unsafe trait Descriptor: Copy {
    const NAME: &'static str;
}

/// Implement [`Descriptor`] for `#[repr(C)]` structs whose first field is `size: usize` and
/// whose other fields are integers.
macro_rules! descriptor {
    ($($t:ident),* $(,)?) => {$(
        const _: () = assert!(std::mem::offset_of!($t, size) == 0);
        // SAFETY: the struct is #[repr(C)], starts with `size: usize` (asserted above) and
        // has only integer fields (reviewed where it is declared).
        unsafe impl $crate::ffi::args::Descriptor for $t {
            const NAME: &'static str = stringify!($t);
        }
    )*};
}
pub(crate) use descriptor;

/// Declares descriptors, one after another: `NAME { FIELD: TYPE, ... }` (each with its doc
/// comment) becomes the `#[repr(C)]` struct whose first field is `size` (documented
/// `sizeof(NAME)`) followed by the fields, and its [`Descriptor`] impl. Heads shared by a
/// family come before the fields:
/// * `NAME: cast("X", "OUT") { ... }`: a scale-and-cast descriptor, `input_dtype` (the
///   `hipfp8_dtype` of X), `format` (the `hipfp8_format` of OUT) and `flags`, with its
///   [`CastDesc`] impl ([`cast_params`]);
/// * `NAME: cast_dual { ... }`: two inputs x1 and x2 sharing m, `cast("x1", "both outputs")`
///   then `input_dtype2`, `m`, `k1` and `k2`;
/// * `NAME: gemm { ... }`: a grouped GEMM, `a_format`, `b_format` and `backend`.
///
/// Every field must be an integer (the [`Descriptor`] contract).
macro_rules! c_desc {
    () => {};
    ($(#[$doc:meta])* $name:ident: cast($x:literal, $out:literal) { $($body:tt)* } $($rest:tt)*) => {
        $crate::ffi::args::c_desc! {
            $(#[$doc])*
            $name {
                #[doc = concat!(" `hipfp8_dtype` of ", $x, ".")]
                input_dtype: u32,
                #[doc = concat!(" `hipfp8_format` of ", $out, ".")]
                format: u32,
                /// `hipfp8_flag` bits.
                flags: u32,
                $($body)*
            }
        }
        $crate::ffi::args::cast_desc!($name);
        $crate::ffi::args::c_desc! { $($rest)* }
    };
    ($(#[$doc:meta])* $name:ident: cast_dual { $($body:tt)* } $($rest:tt)*) => {
        $crate::ffi::args::c_desc! {
            $(#[$doc])*
            $name: cast("x1", "both outputs") {
                /// `hipfp8_dtype` of x2.
                input_dtype2: u32,
                /// Rows of both inputs (the grouped dimension).
                m: usize,
                /// Columns of x1.
                k1: usize,
                /// Columns of x2.
                k2: usize,
                $($body)*
            }
            $($rest)*
        }
    };
    ($(#[$doc:meta])* $name:ident: gemm { $($body:tt)* } $($rest:tt)*) => {
        $crate::ffi::args::c_desc! {
            $(#[$doc])*
            $name {
                /// `hipfp8_format` of a.
                a_format: u32,
                /// `hipfp8_format` of b.
                b_format: u32,
                /// `hipfp8_gemm_backend`.
                backend: u32,
                $($body)*
            }
            $($rest)*
        }
    };
    ($(#[$doc:meta])* $name:ident { $($(#[$fdoc:meta])* $f:ident: $t:ty,)* } $($rest:tt)*) => {
        $(#[$doc])*
        #[repr(C)]
        #[derive(Clone, Copy, Debug)]
        pub struct $name {
            #[doc = concat!(" `sizeof(", stringify!($name), ")`.")]
            pub size: usize,
            $($(#[$fdoc])* pub $f: $t,)*
        }
        $crate::ffi::args::descriptor!($name);
        $crate::ffi::args::c_desc! { $($rest)* }
    };
}
pub(crate) use c_desc;

/// A scale-and-cast descriptor: the fields that become the op's parameters (format and flags,
/// or format and MX rounding).
pub(crate) trait CastDesc: Descriptor {
    type Params;
    fn params(&self) -> Result<Self::Params, FfiError>;
}

/// Implement [`CastDesc`] for descriptors with `input_dtype`, `format` and `flags` fields
/// (parameters: [`cast_flags`]; the op's own parameters are converted from them).
macro_rules! cast_desc {
    ($($t:ident),* $(,)?) => {$(
        impl $crate::ffi::args::CastDesc for $t {
            type Params = $crate::params::MoeCastParams;
            fn params(&self) -> Result<Self::Params, $crate::ffi::status::FfiError> {
                $crate::ffi::args::cast_flags(self.format, self.flags)
            }
        }
    )*};
}
pub(crate) use cast_desc;

/// A descriptor that says all its op takes: the parameters ([`CastDesc`]), the shape and the
/// dtypes of the high-precision inputs (in declaration order).
pub(crate) trait OpDesc: CastDesc {
    type Shape: 'static;
    type Dtypes: AsRef<[u32]>;
    fn shape(&self) -> Result<Self::Shape, FfiError>;
    fn dtypes(&self) -> Self::Dtypes;
}

/// Implement [`OpDesc`]: `desc: Shape = |d| <shape from d>, [<dtype fields>];`.
macro_rules! op_desc {
    ($($t:ident: $s:ty = |$d:ident| $shape:expr, [$($dt:ident),+];)+) => {$(
        impl $crate::ffi::args::OpDesc for $t {
            type Shape = $s;
            type Dtypes = [u32; [$(stringify!($dt)),+].len()];
            fn shape(&self) -> Result<$s, $crate::ffi::status::FfiError> {
                let $d = self;
                Ok($shape)
            }
            fn dtypes(&self) -> Self::Dtypes {
                [$(self.$dt),+]
            }
        }
    )+};
}
pub(crate) use op_desc;

/// Read a descriptor: NULL, alignment and the `size` field are checked before the rest of
/// the struct is read, so a caller that passes a smaller (or larger) struct is told so rather
/// than read out of bounds.
pub(crate) fn read_desc<D: Descriptor>(p: *const D) -> Result<D, FfiError> {
    if p.is_null() {
        return Err(Error::NullPointer("desc").into());
    }
    check_aligned("desc", p)?;
    // SAFETY: non-null and aligned (checked); the caller passes a descriptor, whose first
    // field is a usize, so at least the first size_of::<usize>() bytes are readable.
    let size = unsafe { p.cast::<usize>().read() };
    if size != size_of::<D>() {
        return Err(FfiError::InvalidDescriptor {
            what: D::NAME,
            expected: size_of::<D>(),
            got: size,
        });
    }
    // SAFETY: `size` says the caller's object is a whole `D`; every field is an integer, so
    // any bytes are a valid value (Descriptor's contract).
    Ok(unsafe { p.read() })
}

/// A checked (non-null, aligned) out-parameter; written only on success.
pub(crate) struct OutParam<T>(*mut T);

impl<T> OutParam<T> {
    pub(crate) fn write(self, v: T) {
        // SAFETY: non-null and aligned (checked in out_param); the caller passes a pointer to
        // an object of type T that it owns for the duration of the call.
        unsafe { self.0.write(v) }
    }
}

pub(crate) fn out_param<T>(what: &'static str, p: *mut T) -> Result<OutParam<T>, FfiError> {
    if p.is_null() {
        return Err(Error::NullPointer(what).into());
    }
    check_aligned(what, p)?;
    Ok(OutParam(p))
}

/// Copy a string into a caller buffer with the two-call protocol of the query functions.
pub(crate) fn copy_str_out(
    s: &str,
    buf: *mut c_char,
    buf_len: usize,
    len: *mut usize,
) -> Result<(), FfiError> {
    if buf.is_null() && len.is_null() {
        return Err(Error::NullPointer("buf and len (at least one is required)").into());
    }
    let len = if len.is_null() {
        None
    } else {
        Some(out_param("len", len)?)
    };
    if !buf.is_null() {
        if buf_len <= s.len() {
            return Err(Error::OutputTooSmall {
                what: "buf",
                needed: s.len() + 1,
                got: buf_len,
            }
            .into());
        }
        // SAFETY: buf is non-null and the caller vouches for buf_len writable bytes;
        // buf_len > s.len() (checked), so s and the NUL fit. `s` is a Rust string and cannot
        // overlap a caller buffer.
        unsafe {
            std::ptr::copy_nonoverlapping(s.as_ptr(), buf.cast::<u8>(), s.len());
            buf.add(s.len()).write(0);
        }
    }
    if let Some(len) = len {
        len.write(s.len());
    }
    Ok(())
}

fn check_aligned<T>(what: &'static str, p: *const T) -> Result<(), FfiError> {
    if p.is_aligned() {
        Ok(())
    } else {
        Err(Error::Misaligned(format!(
            "`{what}` = {p:p} is not {}-byte aligned (required by its element type)",
            align_of::<T>()
        ))
        .into())
    }
}

// ---- enums -------------------------------------------------------------------------------

/// `hipfp8_format` value -> [`FormatChoice`].
pub(crate) fn format_choice(v: u32) -> Result<FormatChoice, FfiError> {
    hipfp8_format::value(v).ok_or_else(|| {
        Error::InvalidEnum(format!(
            "format = {v} is not a hipfp8_format (AUTO = 0 ... E5M2FNUZ = 5)"
        ))
        .into()
    })
}

/// A scale-and-cast descriptor's `format` and `flags` -> [`MoeCastParams`], everything such a
/// descriptor can say (unknown bits: INVALID_ENUM). An op taking [`CastParams`] converts it
/// with `CastParams::try_from` (below), which refuses dequant scales.
pub(crate) fn cast_flags(format: u32, flags: u32) -> Result<MoeCastParams, FfiError> {
    const POW2: u32 = hipfp8_flag::HIPFP8_FLAG_POW2_SCALES as u32;
    const DEQUANT: u32 = hipfp8_flag::HIPFP8_FLAG_DEQUANT_SCALES as u32;
    if flags & !(POW2 | DEQUANT) != 0 {
        return Err(Error::InvalidEnum(format!(
            "flags = {flags:#x} has unknown bits {:#x} (known: HIPFP8_FLAG_POW2_SCALES = \
             {POW2:#x}, HIPFP8_FLAG_DEQUANT_SCALES = {DEQUANT:#x})",
            flags & !(POW2 | DEQUANT)
        ))
        .into());
    }
    let scales = if flags & DEQUANT != 0 {
        ScaleOutput::Dequant
    } else {
        ScaleOutput::Forward
    };
    let p = CastParams::new(format_choice(format)?, flags & POW2 != 0);
    Ok(MoeCastParams::from(p).with_scales(scales))
}

impl TryFrom<MoeCastParams> for CastParams {
    type Error = Error;
    /// The parameters of a cast that writes forward scales: `NotSupported` for dequant ones.
    fn try_from(p: MoeCastParams) -> Result<CastParams, Error> {
        if p.scales == ScaleOutput::Dequant {
            return Err(Error::NotSupported(
                "flags has HIPFP8_FLAG_DEQUANT_SCALES: only the fused MoE casts (hipfp8_moe_*) \
                 write dequant scales"
                    .into(),
            ));
        }
        Ok(CastParams::new(p.format, p.pow2_scales))
    }
}

/// A descriptor's `format` and `flags` -> [`CastParams`] ([`cast_flags`]; dequant scales:
/// NOT_SUPPORTED).
pub(crate) fn cast_params(format: u32, flags: u32) -> Result<CastParams, FfiError> {
    Ok(CastParams::try_from(cast_flags(format, flags)?)?)
}

// ---- views -------------------------------------------------------------------------------

/// Builds op views for one call. A C pointer carries no location, so the context decides:
/// views are Host memory on a CPU context and Device memory on a GPU one. On a GPU context
/// every pointer is also asked of the runtime, so host memory is WRONG_LOCATION rather than
/// a fault inside a kernel: [`Views::views`] asks about all buffers of the op in one shim
/// call, and the pointers that pass are recorded for the rest of the call
/// ([`VerifiedPointers`]) so the op body does not ask again. No heap allocation unless a
/// check fails (the error message) or a call has more than [`INLINE_SPANS`] buffers.
pub(crate) struct Views<'c> {
    ctx: &'c Context,
    loc: Loc,
    /// The address ranges of the call's views so far, to refuse overlaps.
    spans: RefCell<Spans>,
    /// [`VerifiedPointers::mark`] when the views were made: what they record is dropped with
    /// them.
    verified_mark: usize,
}

/// The spans of [`Views`] kept inline (more go to a vector).
pub(crate) const INLINE_SPANS: usize = 16;

#[derive(Default)]
struct Spans {
    n: usize,
    inline: [Span; INLINE_SPANS],
    more: Vec<Span>,
}

impl Spans {
    fn iter(&self) -> impl Iterator<Item = &Span> {
        self.inline[..self.n].iter().chain(&self.more)
    }
    fn push(&mut self, s: Span) {
        if self.n < INLINE_SPANS {
            self.inline[self.n] = s;
            self.n += 1;
        } else {
            self.more.push(s);
        }
    }
}

/// A view's bytes `[start, end)`, and whether the op writes them.
#[derive(Clone, Copy, Default)]
struct Span {
    what: &'static str,
    start: usize,
    end: usize,
    write: bool,
}

impl Drop for Views<'_> {
    fn drop(&mut self) {
        VerifiedPointers::truncate(self.verified_mark);
    }
}

/// The location verdict of one buffer in [`Views::views`]: the error of the first buffer the
/// batched check refused, taken by that buffer.
fn location_at(bad: &mut Option<(usize, Error)>, i: usize) -> Result<(), FfiError> {
    match bad.take_if(|(j, _)| *j == i) {
        Some((_, e)) => Err(e.into()),
        None => Ok(()),
    }
}

impl<'c> Views<'c> {
    pub(crate) fn new(ctx: &'c Context) -> Views<'c> {
        Views {
            ctx,
            loc: ctx.loc(),
            spans: Default::default(),
            verified_mark: VerifiedPointers::mark(),
        }
    }

    /// Record a view's address range, refusing it when it overlaps an earlier view of the
    /// call and one of the two is written. Empty views occupy no memory. (`bytes` fits isize,
    /// checked by `checked_len`, so the end cannot wrap for a real allocation; a range from a
    /// garbage pointer that wraps the address space is SIZE_OVERFLOW.)
    fn claim(
        &self,
        what: &'static str,
        p: *const c_void,
        bytes: usize,
        write: bool,
    ) -> Result<(), FfiError> {
        if bytes == 0 {
            return Ok(());
        }
        let start = p.addr();
        let end = start.checked_add(bytes).ok_or_else(|| {
            Error::SizeOverflow(format!(
                "`{what}` = {p:p} with {bytes} bytes runs past the end of the address space"
            ))
        })?;
        let mut spans = self.spans.borrow_mut();
        if let Some(o) = spans
            .iter()
            .find(|o| (write || o.write) && start < o.end && o.start < end)
        {
            return Err(Error::OverlappingBuffers(format!(
                "`{what}` [{start:#x}, {end:#x}) overlaps `{}` [{:#x}, {:#x}) and {} written",
                o.what,
                o.start,
                o.end,
                if write && o.write {
                    "both are"
                } else {
                    "one is"
                }
            ))
            .into());
        }
        spans.push(Span {
            what,
            start,
            end,
            write,
        });
        Ok(())
    }

    /// On a GPU context, refuse host memory and other devices' memory (WRONG_LOCATION): a
    /// kernel would fault on it. One shim call, no synchronisation. (The CPU backend cannot
    /// tell a device pointer from a host one; the caller's contract covers it.)
    fn check_location<T>(&self, what: &'static str, p: *const T) -> Result<(), FfiError> {
        self.check_locations(&[(what, p.cast())])
            .and_then(|mut bad| location_at(&mut bad, 0))
    }

    /// The location check of several pointers at once (one shim call): the index of the
    /// first refused one with its error, in the order given. The pointers that pass are
    /// recorded as checked for the rest of the call.
    fn check_locations(
        &self,
        ptrs: &[(&'static str, *const c_void)],
    ) -> Result<Option<(usize, Error)>, FfiError> {
        let Some(ordinal) = self.ctx.ordinal().filter(|_| self.loc == Loc::Device) else {
            return Ok(None);
        };
        let bad = crate::runtime::first_bad_pointer(ordinal, ptrs)?;
        let good = bad.as_ref().map_or(ptrs.len(), |b| b.0);
        for &(_, p) in &ptrs[..good] {
            if !p.is_null() {
                VerifiedPointers::record(ordinal, p);
            }
        }
        Ok(bad)
    }

    /// NULL is only accepted with a count of 0 (a buffer the call needs nothing from): a
    /// NULL pointer with a non-zero count is a caller bug, and for offsets (whose count is
    /// the group count) silently reading it as "no groups" would hide it.
    fn checked_len<T>(what: &'static str, p: *const T, len: usize) -> Result<usize, FfiError> {
        if p.is_null() {
            return if len == 0 {
                Ok(0)
            } else {
                Err(Error::NullPointer(what).into())
            };
        }
        check_aligned(what, p)?;
        match len.checked_mul(size_of::<T>()) {
            Some(bytes) if bytes <= isize::MAX as usize => Ok(len),
            _ => Err(Error::SizeOverflow(format!(
                "`{what}`: {len} elements of {} bytes exceed the address space",
                size_of::<T>()
            ))
            .into()),
        }
    }

    pub(crate) fn src<'a, T>(
        &self,
        what: &'static str,
        p: *const T,
        len: usize,
    ) -> Result<Src<'a, T>, FfiError> {
        self.src_with(what, p, len, || self.check_location(what, p))
    }

    /// [`Views::src`] with the location verdict `location` (asked after the length checks).
    fn src_with<'a, T>(
        &self,
        what: &'static str,
        p: *const T,
        len: usize,
        location: impl FnOnce() -> Result<(), FfiError>,
    ) -> Result<Src<'a, T>, FfiError> {
        let len = self.check_view(what, p, len, false, location)?;
        // SAFETY: the module-level contract: `p` is NULL (then len is 0) or valid for reads of
        // `len` elements of memory of kind `self.loc` during the call; it is aligned and its
        // byte size fits isize (checked).
        Ok(unsafe { Src::from_raw(p, len, self.loc) })
    }

    /// The checks of a view before it is made, in order: NULL / alignment / size, the
    /// location verdict `location`, the overlap with the call's other views. The checked
    /// element count.
    fn check_view<T>(
        &self,
        what: &'static str,
        p: *const T,
        len: usize,
        write: bool,
        location: impl FnOnce() -> Result<(), FfiError>,
    ) -> Result<usize, FfiError> {
        let len = Self::checked_len(what, p, len)?;
        location()?;
        self.claim(what, p.cast(), len * size_of::<T>(), write)?;
        Ok(len)
    }

    pub(crate) fn dst<'a, T>(
        &self,
        what: &'static str,
        p: *mut T,
        len: usize,
    ) -> Result<Dst<'a, T>, FfiError> {
        self.dst_with(what, p, len, || self.check_location(what, p.cast_const()))
    }

    /// [`Views::dst`] with the location verdict `location` (asked after the length checks).
    fn dst_with<'a, T>(
        &self,
        what: &'static str,
        p: *mut T,
        len: usize,
        location: impl FnOnce() -> Result<(), FfiError>,
    ) -> Result<Dst<'a, T>, FfiError> {
        let len = self.check_view(what, p.cast_const(), len, true, location)?;
        // SAFETY: as in `src_with`, for writes; no other buffer of the call overlaps it
        // (claimed).
        Ok(unsafe { Dst::from_raw(p, len, self.loc) })
    }

    /// The typed view of buffer `what` of an op: an input ([`Src`]) or, when `out`, an
    /// output ([`Dst`]) of `T`s.
    fn typed<'a, T: 'a>(
        &self,
        what: &'static str,
        (p, len): Raw,
        out: bool,
        location: impl FnOnce() -> Result<(), FfiError>,
    ) -> Result<View<'a>, FfiError>
    where
        View<'a>: From<Src<'a, T>> + From<Dst<'a, T>>,
    {
        let p = p.cast::<T>();
        Ok(if out {
            self.dst_with(what, p.cast_mut(), len, location)?.into()
        } else {
            self.src_with(what, p, len, location)?.into()
        })
    }

    /// A caller's grouped-GEMM workspace: NULL with 0 bytes = none (the library's cached
    /// buffer), else device memory aligned to 256 bytes (what a fresh allocation has; the
    /// libraries carve argument arrays and TMA descriptors out of it).
    pub(crate) fn workspace(
        &self,
        p: *mut c_void,
        bytes: usize,
    ) -> Result<Option<GemmWorkspace>, FfiError> {
        const ALIGN: usize = 256;
        if p.is_null() {
            return if bytes == 0 {
                Ok(None)
            } else {
                Err(Error::NullPointer("workspace").into())
            };
        }
        if p.addr() % ALIGN != 0 {
            return Err(Error::Misaligned(format!(
                "`workspace` = {p:p} is not {ALIGN}-byte aligned"
            ))
            .into());
        }
        self.check_location("workspace", p.cast_const())?;
        self.claim("workspace", p.cast_const(), bytes, true)?;
        // SAFETY: the module-level contract: device memory of the context's GPU valid for
        // `bytes` bytes and not used by other work until the GEMM queued with it has run (the
        // header says so); the GEMM checks `bytes` against what it needs. (The CPU backend
        // never touches it.)
        Ok(Some(unsafe { GemmWorkspace::from_raw(p, bytes) }))
    }

    /// The views of op `decl` from the C arguments `bufs` (pointer, count; one per declared
    /// buffer, in order), made in that order: high-precision inputs take the `hipfp8_dtype`s
    /// of `dtypes` in turn, those declared `hp_like` another the dtype of that one. Per
    /// buffer, in order: dtype, NULL / alignment / size, location, overlap; the first failure
    /// is the call's error. The locations of all buffers are asked of the runtime in one shim
    /// call before the loop (a query, so asking early changes no outcome).
    pub(crate) fn views<'a, P: OpParams, S, const N: usize>(
        &self,
        decl: &OpDecl<P, S>,
        dtypes: &[u32],
        bufs: [Raw; N],
    ) -> Result<[View<'a>; N], FfiError> {
        const { assert!(N <= crate::runtime::MAX_CHECKED) };
        assert_eq!(
            decl.bufs.len(),
            N,
            "{}: one C buffer per declared buffer",
            decl.c_name
        );
        let mut ptrs = [("", std::ptr::null::<c_void>()); N];
        for ((q, b), (p, _)) in ptrs.iter_mut().zip(decl.bufs).zip(bufs) {
            *q = (b.name, p);
        }
        let mut bad = self.check_locations(&ptrs)?;
        let mut dtypes = dtypes.iter();
        let mut hp_dtypes = [("", 0u32); N];
        let mut n_hp = 0;
        let mut views: [Option<View<'a>>; N] = [const { None }; N];
        for (i, ((b, (p, len)), v)) in decl.bufs.iter().zip(bufs).zip(&mut views).enumerate() {
            let what = b.name;
            let out = matches!(b.role, Role::Out);
            let loc = || location_at(&mut bad, i);
            *v = Some(match b.elem {
                Elem::Hp => {
                    let dtype = match b.dtype_of {
                        Some(like) => hp_dtypes[..n_hp]
                            .iter()
                            .find(|(n, _)| *n == like)
                            .map(|d| d.1),
                        None => dtypes.next().copied(),
                    };
                    let dtype = dtype.expect("one dtype per high-precision input");
                    hp_dtypes[n_hp] = (what, dtype);
                    n_hp += 1;
                    View::Hp(self.hp_with(what, dtype, p, len, loc)?)
                }
                Elem::U8 => self.typed::<u8>(what, (p, len), out, loc)?,
                Elem::I32 => self.typed::<i32>(what, (p, len), out, loc)?,
                Elem::F32 => self.typed::<f32>(what, (p, len), out, loc)?,
                Elem::Bf16 if out => self
                    .dst_with(what, p.cast_mut().cast::<bf16>(), len, loc)?
                    .into(),
                Elem::Bf16 => unreachable!("no op reads bf16 through a typed view"),
            });
        }
        Ok(views.map(|v| v.expect("every view made above")))
    }

    /// A high-precision input whose element type is a `hipfp8_dtype`.
    pub(crate) fn hp<'a>(
        &self,
        what: &'static str,
        dtype: u32,
        p: *const c_void,
        len: usize,
    ) -> Result<HpSrc<'a>, FfiError> {
        self.hp_with(what, dtype, p, len, || self.check_location(what, p))
    }

    /// [`Views::hp`] with the location verdict `location`.
    fn hp_with<'a>(
        &self,
        what: &'static str,
        dtype: u32,
        p: *const c_void,
        len: usize,
        location: impl FnOnce() -> Result<(), FfiError>,
    ) -> Result<HpSrc<'a>, FfiError> {
        const BF16: u32 = hipfp8_dtype::HIPFP8_DTYPE_BF16 as u32;
        const F32: u32 = hipfp8_dtype::HIPFP8_DTYPE_F32 as u32;
        match dtype {
            BF16 => self
                .src_with(what, p.cast(), len, location)
                .map(HpSrc::Bf16),
            F32 => self.src_with(what, p.cast(), len, location).map(HpSrc::F32),
            v => Err(Error::InvalidEnum(format!(
                "input dtype = {v} is not a hipfp8_dtype (BF16 = 0, F32 = 1)"
            ))
            .into()),
        }
    }
}
