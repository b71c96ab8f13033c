//! The C ABI: `include/hipfp8.h` is generated from this module by cbindgen.
//!
//! # Conventions (the contract every export follows; DESIGN.md section 7)
//! * Every function is an `#[unsafe(no_mangle)] pub extern "C" fn hipfp8_*`. The op exports
//!   are written through [`c_exports!`] (one line of signature each) and the descriptors
//!   through the macros of [`args`]; cbindgen reads the macro-expanded module
//!   (tests/header.rs).
//! * Every function that can fail returns a [`hipfp8_status`] (stable explicit values) and
//!   sets the calling thread's last-error message ([`hipfp8_last_error_message`]): a
//!   sentence naming the function and the argument at fault, or "" after success.
//! * Panics never cross the boundary: each entry point runs under `catch_unwind` and a panic
//!   becomes `HIPFP8_STATUS_INTERNAL_ERROR`.
//! * On failure NOTHING is written: neither the data outputs nor the out-parameters. Every
//!   argument is validated before the first byte is written.
//! * The context ([`hipfp8_context`]) is an opaque handle. Handles are registry keys (the
//!   context's id mixed with a per-process random key), not addresses, and are never reused:
//!   a destroyed or made-up handle is detected and answered with
//!   `HIPFP8_STATUS_INVALID_HANDLE` instead of being dereferenced.
//! * Problem descriptors are `#[repr(C)]` structs whose first field is `size`, which the
//!   caller sets to `sizeof(struct)`; the library reads `size` first and rejects a value it
//!   does not know (`HIPFP8_STATUS_INVALID_DESCRIPTOR`), so descriptors can grow in later
//!   versions without silently misreading old callers. Enum-valued fields are plain
//!   `uint32_t` on the Rust side, so an unknown value is an error, never undefined behaviour.
//! * Buffers are passed as (pointer, element count). The count is the buffer's capacity: it
//!   may exceed what the op writes but not fall short (`*_TOO_SMALL`). Pointers are host
//!   pointers on a CPU context and device pointers on a GPU one (checked there:
//!   `HIPFP8_STATUS_WRONG_LOCATION`); each must be aligned to its
//!   element type (2 bytes for bf16, 4 for f32 and int32; `HIPFP8_STATUS_MISALIGNED`
//!   otherwise); NULL is accepted only with a count of 0 (NULL_POINTER otherwise), and a
//!   buffer the op needs elements from must have them. An output must not overlap any other
//!   buffer of the call (checked: `HIPFP8_STATUS_OVERLAPPING_BUFFERS`); inputs may share memory.
//! * Memory the library allocates (CPU scratch, GPU workspaces) is allocated fallibly: a
//!   failure is `HIPFP8_STATUS_OUT_OF_MEMORY`, nothing is written, the context stays usable.
//! * The stream (`hipStream_t`, or a `cudaStream_t` cast to it on NVIDIA) is the last
//!   argument; NULL is the default stream; the CPU backend ignores it.
//!
//! Layout: [`status`] (status enum, last error, panic guard), [`context`] (handle registry
//! and queries), [`args`] (the one place that turns C pointers into op views), one module
//! per op family.

// Exported names follow the C conventions of the header (hipfp8_context, HIPFP8_STATUS_*).
#![allow(non_camel_case_types)]
// Entry points are safe `extern "C"` functions taking raw pointers: their safety contract is
// the header's (the C caller vouches for each (pointer, count) pair), discharged in `args`.
#![allow(clippy::not_unsafe_ptr_arg_deref)]
// C signatures carry one (pointer, count) pair per buffer.
#![allow(clippy::too_many_arguments)]

/// Declares a C enum: `NAME { VARIANT = VALUE, ... }` (each with its doc comment) becomes the
/// `#[repr(u32)]` enum. `NAME => T { VARIANT = VALUE => EXPR, ... }` also gives
/// `NAME::from_u32` (the variant of a value) and `NAME::value` (its EXPR, a `T`): what a
/// `uint32_t` field or parameter holding a value of the enum means.
macro_rules! c_enum {
    ($(#[$doc:meta])* $name:ident { $($(#[$vdoc:meta])* $v:ident = $n:literal,)+ }) => {
        $(#[$doc])*
        #[repr(u32)]
        #[derive(Clone, Copy, Debug, PartialEq, Eq)]
        pub enum $name {
            $($(#[$vdoc])* $v = $n,)+
        }
    };
    ($(#[$doc:meta])* $name:ident => $t:ty {
        $($(#[$vdoc:meta])* $v:ident = $n:literal => $val:expr,)+
    }) => {
        c_enum! { $(#[$doc])* $name { $($(#[$vdoc])* $v = $n,)+ } }
        impl $name {
            /// The variant whose value is `v`.
            pub(crate) const fn from_u32(v: u32) -> Option<Self> {
                $(if v == $n {
                    return Some(Self::$v);
                })+
                None
            }
            /// What the value `v` means.
            pub(crate) fn value(v: u32) -> Option<$t> {
                Some(match Self::from_u32(v)? {
                    $(Self::$v => $val,)+
                })
            }
        }
    };
}

/// Writes op exports. An export is its doc comment and `fn NAME(DESC) = BODY(DECL)`; a
/// group of consecutive exports with the same buffers is written
/// `fn ..., fn ...: (buf[count]: POINTER, ...);` (a grouped GEMM adds
/// `; workspace[workspace_bytes]: *mut c_void` after its buffers). Each export becomes
///
/// ```text
/// #[unsafe(no_mangle)]
/// pub extern "C" fn NAME(ctx: *const hipfp8_context, desc: *const DESC,
///     buf: POINTER, count: usize, ..., [workspace, workspace_bytes,] stream: hipStream_t)
///     -> hipfp8_status
/// ```
///
/// whose body is `BODY(ctx, desc, &DECL, [raw(buf, count), ...], [(workspace,
/// workspace_bytes),] stream)`: [`run_op`] (or the grouped GEMMs' `gemm_call`), which runs
/// under the panic guard of [`status`]. The buffers are the op declaration's, in its order.
macro_rules! c_exports {
    ($($($(#[$doc:meta])* fn $name:ident($desc:ty) = $body:ident($decl:path)),+: $bufs:tt;)+) => {
        $($(c_exports!(@one $(#[$doc])* $name($desc) = $body($decl) $bufs);)+)+
    };
    (@one $(#[$doc:meta])* $name:ident($desc:ty) = $body:ident($decl:path)
        ($($buf:ident[$len:ident]: $p:ty),+ $(; $ws:ident[$ws_len:ident]: $ws_p:ty)?)) => {
        $(#[$doc])*
        #[unsafe(no_mangle)]
        pub extern "C" fn $name(
            ctx: *const $crate::ffi::hipfp8_context,
            desc: *const $desc,
            $($buf: $p, $len: usize,)+
            $($ws: $ws_p, $ws_len: usize,)?
            stream: $crate::ffi::hipStream_t,
        ) -> $crate::ffi::hipfp8_status {
            let bufs = [$($crate::ffi::args::raw($buf, $len)),+];
            $body(ctx, desc, &$decl, bufs, $(($ws, $ws_len),)? stream)
        }
    };
}

/// Writes exports that are one call of a helper: `(PARAMS) { fn NAME = HELPER(ARGS); ... }`
/// (`fn NAME(desc: DESC) = ...` for an export whose second parameter is `desc: *const DESC`;
/// the exports of a group share PARAMS) becomes
///
/// ```text
/// #[unsafe(no_mangle)]
/// pub extern "C" fn NAME(ctx: *const hipfp8_context, [desc: *const DESC,] PARAMS)
///     -> hipfp8_status
/// ```
///
/// returning `HELPER("NAME", ctx, [desc,] ARGS)`. Every helper runs its body under the panic
/// guard of [`status`].
macro_rules! c_fns {
    ($($params:tt {
        $($(#[$doc:meta])* fn $name:ident$(($d:ident: $desc:ty))? = $helper:ident($($arg:expr),*);)+
    })+) => {
        $($(c_fns!(@one $(#[$doc])* $name$(($d: $desc))? = $helper($($arg),*) $params);)+)+
    };
    (@one $(#[$doc:meta])* $name:ident$(($d:ident: $desc:ty))? = $helper:ident($($arg:expr),*)
        ($($p:ident: $pt:ty),*)) => {
        $(#[$doc])*
        #[unsafe(no_mangle)]
        pub extern "C" fn $name(
            ctx: *const $crate::ffi::hipfp8_context,
            $($d: *const $desc,)?
            $($p: $pt),*
        ) -> $crate::ffi::hipfp8_status {
            $helper(stringify!($name), ctx, $($d,)? $($arg),*)
        }
    };
}

// cbindgen emits items in module order, so this order is the header's: status and errors,
// shared enums, the context, then the op families as docs/OPS.md lists them (the blank lines
// keep rustfmt from sorting the declarations).
pub mod status;
pub mod types;

pub mod context;

pub mod workspace;

pub mod quant;

pub mod cast_transpose;

pub mod mx;

pub mod grouped_gemm;

pub mod moe;

pub mod route;

pub mod recipe;

pub mod args;

pub use cast_transpose::*;
pub use context::*;
pub use grouped_gemm::*;
pub use moe::*;
pub use mx::*;
pub use quant::*;
pub use recipe::*;
pub use route::*;
pub use status::*;
pub use types::*;
pub use workspace::*;

/// Major version of the library (the crate version in Cargo.toml; checked by tests).
pub const HIPFP8_VERSION_MAJOR: u32 = 0;
/// Minor version of the library.
pub const HIPFP8_VERSION_MINOR: u32 = 1;
/// Patch version of the library.
pub const HIPFP8_VERSION_PATCH: u32 = 0;
/// `MAJOR * 10000 + MINOR * 100 + PATCH`, for `#if` comparisons.
pub const HIPFP8_VERSION: u32 = 100;
/// Version of the C ABI this header describes. Bumped on any incompatible change to an
/// existing function, descriptor or enum value; additions do not bump it (tests/abi.rs guards
/// this). 2: the grouped-GEMM descriptors gained `backend`, the calls a workspace. 3:
/// `hipfp8_moe_experts_backward(_precast)` write dW13 as (2, e, i, d) = [dW1; dW3] (was
/// (e, 2i, d)).
pub const HIPFP8_ABI_VERSION: u32 = 3;

/// The ABI version of the library actually linked (compare with `HIPFP8_ABI_VERSION` from
/// the header the program was compiled against).
#[unsafe(no_mangle)]
pub extern "C" fn hipfp8_abi_version() -> u32 {
    HIPFP8_ABI_VERSION
}

/// The version of the library actually linked, as `MAJOR * 10000 + MINOR * 100 + PATCH`.
#[unsafe(no_mangle)]
pub extern "C" fn hipfp8_version() -> u32 {
    HIPFP8_VERSION
}

/// The body shared by every op export: resolve the handle, read the descriptor, then run
/// `f` with views that know the context's memory kind — all under the panic guard.
pub(crate) fn op_entry<D: args::Descriptor>(
    func: &'static str,
    ctx: *const hipfp8_context,
    desc: *const D,
    f: impl FnOnce(&crate::context::Context, D, &args::Views) -> Result<(), FfiError>,
) -> hipfp8_status {
    status::guard(func, || {
        let c = context::lookup(ctx)?;
        let d = args::read_desc(desc)?;
        f(&c, d, &args::Views::new(&c))
    })
}

/// The body of an op export whose arguments are all derived from its descriptor
/// ([`args::OpDesc`]: parameters, shape, input dtypes), [`args::Views::views`] makes the views
/// of `bufs`, [`Context::run`](crate::context::Context) runs `decl`. The op's parameters `P`
/// are the descriptor's, converted (`TryFrom`: a cast descriptor says more than most casts
/// take, e.g. dequant scales, which they refuse).
pub(crate) fn run_op<D, P, const N: usize>(
    ctx: *const hipfp8_context,
    desc: *const D,
    decl: &'static crate::dispatch::OpDecl<P, D::Shape>,
    bufs: [args::Raw; N],
    stream: hipStream_t,
) -> hipfp8_status
where
    D: args::OpDesc,
    P: crate::dispatch::OpParams + TryFrom<D::Params> + 'static,
    FfiError: From<P::Error>,
{
    op_entry(decl.c_name, ctx, desc, |c, d, v| {
        let (p, shape) = (P::try_from(d.params()?)?, d.shape()?);
        let views = v.views(decl, d.dtypes().as_ref(), bufs)?;
        let stream = crate::view::StreamRef(stream.cast());
        Ok(c.run(decl, &p, shape, views, stream)?)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn version_constants_match_cargo_toml() {
        let p = |s: &str| s.parse::<u32>().unwrap();
        assert_eq!(HIPFP8_VERSION_MAJOR, p(env!("CARGO_PKG_VERSION_MAJOR")));
        assert_eq!(HIPFP8_VERSION_MINOR, p(env!("CARGO_PKG_VERSION_MINOR")));
        assert_eq!(HIPFP8_VERSION_PATCH, p(env!("CARGO_PKG_VERSION_PATCH")));
        assert_eq!(
            HIPFP8_VERSION,
            HIPFP8_VERSION_MAJOR * 10000 + HIPFP8_VERSION_MINOR * 100 + HIPFP8_VERSION_PATCH
        );
        assert_eq!(hipfp8_version(), HIPFP8_VERSION);
        assert_eq!(hipfp8_abi_version(), HIPFP8_ABI_VERSION);
    }
}
