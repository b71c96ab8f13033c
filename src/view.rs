//! Views of op arguments: a pointer, an element count and where the memory lives ([`Loc`]).
//! Safe constructors take Rust slices (host memory); GPU buffers and the C ABI make views
//! with the `unsafe` raw constructors. Also the stream handle ops take ([`StreamRef`]).

use std::marker::PhantomData;

use half::bf16;

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

/// What both view types have: the private constructor `at` and `len`, `is_empty`, `loc`.
macro_rules! view_common {
    ($($view:ident: $ptr:ty),+) => {$(
        impl<'a, T> $view<'a, T> {
            const fn at(ptr: $ptr, len: usize, loc: Loc) -> Self {
                $view { ptr, len, loc, _p: PhantomData }
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
        }
    )+};
}
view_common!(Src: *const T, Dst: *mut T);

/// The element pointer `mid` past `ptr`, or null for a null `ptr` (a null view stays null
/// when split, so ops still reject it).
fn offset<P>(ptr: *mut P, mid: usize) -> *mut P {
    if ptr.is_null() {
        ptr
    } else {
        ptr.wrapping_add(mid)
    }
}

impl<'a, T> Src<'a, T> {
    /// The views of elements `[0, mid)` and `[mid, len)` (`mid` clamped to `len`).
    pub fn split_at(self, mid: usize) -> (Self, Self) {
        let mid = mid.min(self.len);
        let rest = offset(self.ptr.cast_mut(), mid).cast_const();
        (
            Src::at(self.ptr, mid, self.loc),
            Src::at(rest, self.len - mid, self.loc),
        )
    }
}

impl<'a, T> Dst<'a, T> {
    /// The views of elements `[0, mid)` and `[mid, len)` (`mid` clamped to `len`).
    pub fn split_at(self, mid: usize) -> (Self, Self) {
        let mid = mid.min(self.len);
        let rest = offset(self.ptr, mid);
        (
            Dst::at(self.ptr, mid, self.loc),
            Dst::at(rest, self.len - mid, self.loc),
        )
    }
}

impl<'a, T> From<&'a [T]> for Src<'a, T> {
    fn from(s: &'a [T]) -> Self {
        Src::at(s.as_ptr(), s.len(), Loc::Host)
    }
}
impl<'a, T> From<&'a Vec<T>> for Src<'a, T> {
    fn from(s: &'a Vec<T>) -> Self {
        s.as_slice().into()
    }
}
impl<'a, T> From<&'a mut [T]> for Dst<'a, T> {
    fn from(s: &'a mut [T]) -> Self {
        Dst::at(s.as_mut_ptr(), s.len(), Loc::Host)
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
        Src::at(ptr, len, loc)
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
        Dst::at(ptr, len, loc)
    }
    pub fn as_mut_ptr(&mut self) -> *mut T {
        self.ptr
    }
    /// Reborrow as a shorter-lived view.
    pub fn reborrow(&mut self) -> Dst<'_, T> {
        Dst::at(self.ptr, self.len, self.loc)
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

/// `HpSrc` from host slices and vectors of each element type.
macro_rules! hp_from {
    ($($t:ty => $v:ident),+) => {$(
        impl<'a> From<&'a [$t]> for HpSrc<'a> {
            fn from(s: &'a [$t]) -> Self {
                HpSrc::$v(s.into())
            }
        }
        impl<'a> From<&'a Vec<$t>> for HpSrc<'a> {
            fn from(s: &'a Vec<$t>) -> Self {
                HpSrc::$v(s.as_slice().into())
            }
        }
    )+};
}
hp_from!(bf16 => Bf16, f32 => F32);

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

/// Run `$body` with `$s` bound to the host slice of an [`HpSrc`] (bf16 or f32), so the
/// generic reference function is instantiated for both element types.
macro_rules! with_hp {
    ($x:expr, |$s:ident| $body:expr) => {
        match $x {
            $crate::view::HpSrc::Bf16(v) => {
                let $s = v.host_slice();
                $body
            }
            $crate::view::HpSrc::F32(v) => {
                let $s = v.host_slice();
                $body
            }
        }
    };
}
pub(crate) use with_hp;
