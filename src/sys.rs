//! Every foreign declaration of hipfp8, in one place: the runtime shim (`hip/runtime.hip`),
//! the self-test kernels (`hip/selftest.hip`) and every kernel launcher.
//!
//! Each function is declared with [`foreign!`] against its own `cfg(hipfp8_launcher = "NAME")`,
//! which `build.rs` sets for every function a compiled `.hip` file defines with
//! `HIPFP8_EXTERN`. When a symbol is not in the build (CPU-only build, a skipped
//! translation unit, a kernel not written yet) the same name is a Rust stub that returns
//! [`NOT_BUILT`], so callers need no `cfg` of their own and a missing kernel is a clean
//! error, never a link failure.
//!
//! Conventions (docs/KERNEL_ABI.md): every function returns an `int` status: 0 = success,
//! positive = the runtime's error code, negative = `HIPFP8_KSTATUS_*` from
//! `hip/kernel_abi.h`. Streams (`hipStream_t` / `cudaStream_t`) come last. Adding a
//! launcher: one line in a `foreign!` block below.
#![allow(non_camel_case_types)]

use std::ffi::{c_char, c_int, c_void};

/// `hipStream_t` / `cudaStream_t` (null = the default stream).
pub type hipStream_t = *mut c_void;
/// `hipEvent_t` / `cudaEvent_t`.
pub type hipEvent_t = *mut c_void;

// Status values of hip/kernel_abi.h.
pub const KSTATUS_OK: c_int = 0;
pub const KSTATUS_INVALID_ENUM: c_int = -1;
pub const KSTATUS_INVALID_SHAPE: c_int = -2;
pub const KSTATUS_MISALIGNED: c_int = -3;
pub const KSTATUS_UNSUPPORTED: c_int = -4;
pub const KSTATUS_NULL_POINTER: c_int = -5;
/// Returned by the Rust stub of a function that is not compiled into this build.
pub const NOT_BUILT: c_int = -1000;

// Ids of hip/kernel_abi.h (formats are `Fp8Format as u32`).
pub const DTYPE_BF16: c_int = 0;
pub const DTYPE_F32: c_int = 1;
pub const COPY_H2D: c_int = 1;
pub const COPY_D2H: c_int = 2;
pub const COPY_D2D: c_int = 3;

/// Mirror of `struct hipfp8_device_props` in hip/runtime.hip (size checked at run time
/// against `hipfp8_rt_props_size`).
#[repr(C)]
#[derive(Clone, Copy)]
pub struct hipfp8_device_props {
    pub name: [c_char; 256],
    pub arch: [c_char; 256],
    /// 1 = AMD, 2 = NVIDIA.
    pub vendor: i32,
    pub multiprocessor_count: i32,
    pub wavefront_size: i32,
    pub cc_major: i32,
    pub cc_minor: i32,
    pub max_threads_per_block: i32,
    pub total_global_mem: i64,
    pub l2_cache_bytes: i64,
    pub shared_mem_per_block: i64,
    pub shared_mem_per_block_optin: i64,
    pub pci_bus_id: i32,
    pub pci_device_id: i32,
}

impl Default for hipfp8_device_props {
    fn default() -> Self {
        // SAFETY: plain integers and byte arrays: all-zero is a valid value.
        unsafe { std::mem::zeroed() }
    }
}

/// Declares foreign functions that exist only when `build.rs` found their definition.
/// `"symbol" => pub fn symbol(args) -> c_int;` (the string must equal the name: it is the
/// `cfg` value).
macro_rules! foreign {
    ($( $(#[$m:meta])* $sym:literal => pub fn $name:ident($($arg:ident : $ty:ty),* $(,)?) -> c_int; )*) => {$(
        #[cfg(hipfp8_launcher = $sym)]
        unsafe extern "C" {
            $(#[$m])*
            pub fn $name($($arg: $ty),*) -> c_int;
        }
        $(#[$m])*
        /// (Not in this build: returns [`NOT_BUILT`].)
        ///
        /// # Safety
        /// Always safe; unsafe only to match the real declaration.
        #[cfg(not(hipfp8_launcher = $sym))]
        #[allow(unused_variables, clippy::too_many_arguments)]
        pub unsafe fn $name($($arg: $ty),*) -> c_int { NOT_BUILT }
    )*};
}

// Runtime shim (hip/runtime.hip). Pointers are raw runtime handles or device pointers.
foreign! {
    "hipfp8_rt_props_size" => pub fn hipfp8_rt_props_size(size: *mut u64) -> c_int;
    "hipfp8_rt_device_count" => pub fn hipfp8_rt_device_count(count: *mut i32) -> c_int;
    "hipfp8_rt_set_device" => pub fn hipfp8_rt_set_device(ordinal: i32) -> c_int;
    "hipfp8_rt_get_device" => pub fn hipfp8_rt_get_device(ordinal: *mut i32) -> c_int;
    "hipfp8_rt_device_props" => pub fn hipfp8_rt_device_props(ordinal: i32, out: *mut hipfp8_device_props) -> c_int;
    "hipfp8_rt_mem_info" => pub fn hipfp8_rt_mem_info(free: *mut u64, total: *mut u64) -> c_int;
    "hipfp8_rt_versions" => pub fn hipfp8_rt_versions(driver: *mut i32, runtime: *mut i32) -> c_int;
    "hipfp8_rt_device_synchronize" => pub fn hipfp8_rt_device_synchronize() -> c_int;
    "hipfp8_rt_get_last_error" => pub fn hipfp8_rt_get_last_error() -> c_int;
    "hipfp8_rt_malloc" => pub fn hipfp8_rt_malloc(ptr: *mut *mut c_void, bytes: u64) -> c_int;
    "hipfp8_rt_free" => pub fn hipfp8_rt_free(ptr: *mut c_void) -> c_int;
    "hipfp8_rt_memcpy" => pub fn hipfp8_rt_memcpy(dst: *mut c_void, src: *const c_void, bytes: u64, kind: i32) -> c_int;
    "hipfp8_rt_memcpy_async" => pub fn hipfp8_rt_memcpy_async(
        dst: *mut c_void, src: *const c_void, bytes: u64, kind: i32, stream: hipStream_t) -> c_int;
    "hipfp8_rt_memset" => pub fn hipfp8_rt_memset(dst: *mut c_void, value: i32, bytes: u64) -> c_int;
    "hipfp8_rt_memset_async" => pub fn hipfp8_rt_memset_async(
        dst: *mut c_void, value: i32, bytes: u64, stream: hipStream_t) -> c_int;
    "hipfp8_rt_pointer_info" => pub fn hipfp8_rt_pointer_info(
        ptr: *const c_void, is_device: *mut i32, device: *mut i32) -> c_int;
    "hipfp8_rt_stream_create" => pub fn hipfp8_rt_stream_create(stream: *mut hipStream_t, non_blocking: i32) -> c_int;
    "hipfp8_rt_stream_destroy" => pub fn hipfp8_rt_stream_destroy(stream: hipStream_t) -> c_int;
    "hipfp8_rt_stream_synchronize" => pub fn hipfp8_rt_stream_synchronize(stream: hipStream_t) -> c_int;
    "hipfp8_rt_stream_query" => pub fn hipfp8_rt_stream_query(stream: hipStream_t, done: *mut i32) -> c_int;
    "hipfp8_rt_stream_wait_event" => pub fn hipfp8_rt_stream_wait_event(stream: hipStream_t, event: hipEvent_t) -> c_int;
    "hipfp8_rt_event_create" => pub fn hipfp8_rt_event_create(event: *mut hipEvent_t, timing: i32) -> c_int;
    "hipfp8_rt_event_destroy" => pub fn hipfp8_rt_event_destroy(event: hipEvent_t) -> c_int;
    "hipfp8_rt_event_record" => pub fn hipfp8_rt_event_record(event: hipEvent_t, stream: hipStream_t) -> c_int;
    "hipfp8_rt_event_synchronize" => pub fn hipfp8_rt_event_synchronize(event: hipEvent_t) -> c_int;
    "hipfp8_rt_event_elapsed_ms" => pub fn hipfp8_rt_event_elapsed_ms(
        ms: *mut f32, start: hipEvent_t, end: hipEvent_t) -> c_int;
    "hipfp8_rt_error_string" => pub fn hipfp8_rt_error_string(
        code: i32, name: *mut *const c_char, desc: *mut *const c_char) -> c_int;
}

// Self-test kernels (hip/selftest.hip).
foreign! {
    /// `out[i] = (in ? in[i] : 0) + mix32(i * 0x9E3779B9 + seed)` for i in 0..n (wrapping).
    "hipfp8_selftest_fill_launch" => pub fn hipfp8_selftest_fill_launch(
        input: *const u32, out: *mut u32, n: i64, seed: u32, stream: hipStream_t) -> c_int;
    /// `out[0]` = HIPFP8_WAVE as compiled, `out[1]` = the device's warpSize.
    "hipfp8_selftest_wave_launch" => pub fn hipfp8_selftest_wave_launch(out: *mut i32, stream: hipStream_t) -> c_int;
}

// Quantization kernels (hip/quant/, engineer "kernels"). Signatures: docs/KERNEL_ABI.md.
foreign! {
    /// Rowwise scale-and-cast of an (m, k) row-major matrix (see `Context::rowwise_2d`).
    /// `format` = `Fp8Format as u32`, `pow2` = 0/1, `in_dtype` = DTYPE_BF16 / DTYPE_F32.
    "hipfp8_rowwise_2d_launch" => pub fn hipfp8_rowwise_2d_launch(
        x: *const c_void, out: *mut u8, scales: *mut f32, m: i64, k: i64,
        format: i32, pow2: i32, in_dtype: i32, stream: hipStream_t) -> c_int;
    /// Per-group rowwise cast (see `Context::per_group_rowwise`): offsets along k, scales
    /// `[g*m + i]`. `workspace`: `hipfp8_grouped_scratch_bytes(groups)` bytes of the zeroed
    /// context workspace (null when 0).
    "hipfp8_per_group_rowwise_launch" => pub fn hipfp8_per_group_rowwise_launch(
        x: *const c_void, offs: *const i32, out: *mut u8, scales: *mut f32, m: i64, k: i64, groups: i64,
        format: i32, pow2: i32, in_dtype: i32, workspace: *mut c_void, stream: hipStream_t) -> c_int;
    /// Device scratch of per_group_rowwise / rowwise_2d_padded for `groups` groups: 0 up to
    /// 2048 groups, else the group tables. Zero before use; every launch leaves it zero.
    "hipfp8_grouped_scratch_bytes" => pub fn hipfp8_grouped_scratch_bytes(
        groups: i64, bytes: *mut u64) -> c_int;
    /// Workspace size of the column-reducing casts below (per_group_colwise(_dual),
    /// rowwise_3d_transpose_rhs) for `groups` groups and row lengths k1, k2 (0 if single).
    /// The workspace must be zero before its first use; every launch leaves it zero.
    "hipfp8_colwise_workspace_bytes" => pub fn hipfp8_colwise_workspace_bytes(
        groups: i64, k1: i64, k2: i64, bytes: *mut u64) -> c_int;
    /// Per-group colwise cast (see `Context::per_group_colwise`): offsets along m, output
    /// column-major `[j*m + i]`, scales `[g*k + j]`.
    "hipfp8_per_group_colwise_launch" => pub fn hipfp8_per_group_colwise_launch(
        x: *const c_void, offs: *const i32, out: *mut u8, scales: *mut f32, m: i64, k: i64, groups: i64,
        format: i32, pow2: i32, in_dtype: i32, workspace: *mut c_void, stream: hipStream_t) -> c_int;
    /// Two per-group colwise casts sharing m and offsets, one launch; one dtype for both.
    "hipfp8_per_group_colwise_dual_launch" => pub fn hipfp8_per_group_colwise_dual_launch(
        x1: *const c_void, x2: *const c_void, offs: *const i32, out1: *mut u8, scales1: *mut f32,
        out2: *mut u8, scales2: *mut f32, m: i64, k1: i64, k2: i64, groups: i64,
        format: i32, pow2: i32, in_dtype: i32, workspace: *mut c_void, stream: hipStream_t) -> c_int;
    /// Transpose-rowwise cast of (e, k, n) column-major expert weights (see
    /// `Context::rowwise_3d_transpose_rhs`).
    "hipfp8_rowwise_3d_transpose_rhs_launch" => pub fn hipfp8_rowwise_3d_transpose_rhs_launch(
        x: *const c_void, out: *mut u8, scales: *mut f32, e: i64, k: i64, n: i64,
        format: i32, pow2: i32, in_dtype: i32, workspace: *mut c_void, stream: hipStream_t) -> c_int;
    /// Tensorwise cast of n elements (see `Context::tensorwise`): async memset of `amax`,
    /// amax kernel, cast kernel; no host synchronisation.
    "hipfp8_tensorwise_launch" => pub fn hipfp8_tensorwise_launch(
        x: *const c_void, out: *mut u8, scale: *mut f32, amax: *mut f32, n: i64,
        format: i32, pow2: i32, in_dtype: i32, stream: hipStream_t) -> c_int;
    /// Tensorwise cast with the caller's scale (device f32), one read; amax out.
    "hipfp8_tensorwise_scaled_launch" => pub fn hipfp8_tensorwise_scaled_launch(
        x: *const c_void, scale: *const f32, out: *mut u8, amax: *mut f32, n: i64,
        format: i32, in_dtype: i32, stream: hipStream_t) -> c_int;
    /// Blockwise 1x128 cast: scales (m, ceil(k/128)).
    "hipfp8_blockwise_1x128_launch" => pub fn hipfp8_blockwise_1x128_launch(
        x: *const c_void, out: *mut u8, scales: *mut f32, m: i64, k: i64,
        format: i32, pow2: i32, in_dtype: i32, stream: hipStream_t) -> c_int;
    /// Blockwise 128x128 cast: scales (ceil(m/128), ceil(k/128)).
    "hipfp8_blockwise_128x128_launch" => pub fn hipfp8_blockwise_128x128_launch(
        x: *const c_void, out: *mut u8, scales: *mut f32, m: i64, k: i64,
        format: i32, pow2: i32, in_dtype: i32, stream: hipStream_t) -> c_int;
    /// Token-group padding fused with the rowwise cast (see `Context::rowwise_2d_padded`).
    "hipfp8_rowwise_2d_padded_launch" => pub fn hipfp8_rowwise_2d_padded_launch(
        x: *const c_void, offs: *const i32, out: *mut u8, scales: *mut f32, padded_offs: *mut i32,
        m: i64, k: i64, groups: i64, format: i32, pow2: i32, in_dtype: i32, workspace: *mut c_void,
        stream: hipStream_t) -> c_int;
    /// MXFP8 along rows: E8M0 scales (m, ceil(k/32)); rounding 0 FLOOR, 1 RCEIL; OCP formats.
    "hipfp8_mxfp8_dim0_launch" => pub fn hipfp8_mxfp8_dim0_launch(
        x: *const c_void, out: *mut u8, scales: *mut u8, m: i64, k: i64,
        format: i32, rounding: i32, in_dtype: i32, stream: hipStream_t) -> c_int;
    /// MXFP8 along columns: out (k, m) row-major, E8M0 scales (k, ceil(m/32)).
    "hipfp8_mxfp8_dim1_launch" => pub fn hipfp8_mxfp8_dim1_launch(
        x: *const c_void, out: *mut u8, scales: *mut u8, m: i64, k: i64,
        format: i32, rounding: i32, in_dtype: i32, stream: hipStream_t) -> c_int;
    /// Workspace bytes of cast_transpose (scaling 0 tensorwise, 1 rowwise).
    "hipfp8_cast_transpose_workspace_bytes" => pub fn hipfp8_cast_transpose_workspace_bytes(
        m: i64, k: i64, scaling: i32, bytes: *mut u64) -> c_int;
    /// Cast-transpose (see `Context::cast_transpose`): out (m,k), out_t (k,m), tensorwise or
    /// rowwise scales; workspace zero before, left zero.
    "hipfp8_cast_transpose_launch" => pub fn hipfp8_cast_transpose_launch(
        x: *const c_void, out: *mut u8, out_t: *mut u8, scales: *mut f32, scales_t: *mut f32,
        m: i64, k: i64, scaling: i32, format: i32, pow2: i32, in_dtype: i32,
        workspace: *mut c_void, stream: hipStream_t) -> c_int;
    /// Cast-transpose with the caller's scale (device f32), one read; amax out.
    "hipfp8_cast_transpose_scaled_launch" => pub fn hipfp8_cast_transpose_scaled_launch(
        x: *const c_void, scale: *const f32, out: *mut u8, out_t: *mut u8, amax: *mut f32,
        m: i64, k: i64, format: i32, in_dtype: i32, stream: hipStream_t) -> c_int;
    /// Codec self-test: every finite f32 through the hardware-path encoder and the software
    /// rule; `mismatches` = 2 device u64 (count, recorded), `first_bad` = 24 device u32
    /// ((input bits, hw, sw) x 8), `has_hw` = 1 device i32 (does this target convert `format`
    /// in hardware). All must be zeroed by the caller.
    "hipfp8_codec_selftest_launch" => pub fn hipfp8_codec_selftest_launch(
        format: i32, mismatches: *mut u64, first_bad: *mut u32, has_hw: *mut i32, stream: hipStream_t) -> c_int;
}

// Grouped GEMM (hip/grouped_gemm/, engineer "gemm"; semantics docs/OPS.md). Formats are
// `Fp8Format as u32`; a, b, offs, scales, out and workspace are device pointers. Reference
// kernel: `skip` (may be null) marks groups another backend owns; `max_blocks` caps the grid
// (0 = default). Library launchers: `workspace` of at least the queried size; CUTLASS
// `config`: instance kind and scheduler settings (src/grouped_gemm_rule.rs).
foreign! {
    "hipfp8_gg_ref_2d3d" => pub fn hipfp8_gg_ref_2d3d(
        a: *const u8, fmt_a: i32, b: *const u8, fmt_b: i32, offs: *const i32, groups: i32,
        sa: *const f32, sb: *const f32, out: *mut c_void, m: i64, n: i64, k: i64,
        skip: *const i32, max_blocks: i32, stream: hipStream_t) -> c_int;
    "hipfp8_gg_ref_2d2d" => pub fn hipfp8_gg_ref_2d2d(
        a: *const u8, fmt_a: i32, b: *const u8, fmt_b: i32, offs: *const i32, groups: i32,
        sa: *const f32, sb: *const f32, out: *mut c_void, n: i64, mt: i64, k: i64,
        skip: *const i32, max_blocks: i32, stream: hipStream_t) -> c_int;
    "hipfp8_gg_cutlass_available" => pub fn hipfp8_gg_cutlass_available(available: *mut i32) -> c_int;
    "hipfp8_gg_cutlass_has_instance" => pub fn hipfp8_gg_cutlass_has_instance(kind: i32, fmt_a: i32, fmt_b: i32, yes: *mut i32) -> c_int;
    "hipfp8_gg_cutlass_workspace_size" => pub fn hipfp8_gg_cutlass_workspace_size(groups: i32, bytes: *mut u64) -> c_int;
    "hipfp8_gg_cutlass_2d3d" => pub fn hipfp8_gg_cutlass_2d3d(
        a: *const u8, fmt_a: i32, b: *const u8, fmt_b: i32, offs: *const i32, groups: i32,
        sa: *const f32, sb: *const f32, out: *mut c_void, m: i64, n: i64, k: i64,
        workspace: *mut c_void, workspace_bytes: u64, config: i32, stream: hipStream_t) -> c_int;
    "hipfp8_gg_cutlass_2d2d" => pub fn hipfp8_gg_cutlass_2d2d(
        a: *const u8, fmt_a: i32, b: *const u8, fmt_b: i32, offs: *const i32, groups: i32,
        sa: *const f32, sb: *const f32, out: *mut c_void, n: i64, mt: i64, k: i64,
        workspace: *mut c_void, workspace_bytes: u64, config: i32, stream: hipStream_t) -> c_int;
    "hipfp8_gg_ck_gfx942_workspace_size" => pub fn hipfp8_gg_ck_gfx942_workspace_size(groups: i32, bytes: *mut u64) -> c_int;
    "hipfp8_gg_ck_gfx942_2d3d" => pub fn hipfp8_gg_ck_gfx942_2d3d(
        a: *const u8, fmt_a: i32, b: *const u8, fmt_b: i32, offs: *const i32, groups: i32,
        sa: *const f32, sb: *const f32, out: *mut c_void, m: i64, n: i64, k: i64,
        workspace: *mut c_void, workspace_bytes: u64, stream: hipStream_t) -> c_int;
    "hipfp8_gg_ck_gfx942_2d2d" => pub fn hipfp8_gg_ck_gfx942_2d2d(
        a: *const u8, fmt_a: i32, b: *const u8, fmt_b: i32, offs: *const i32, groups: i32,
        sa: *const f32, sb: *const f32, out: *mut c_void, n: i64, mt: i64, k: i64,
        workspace: *mut c_void, workspace_bytes: u64, stream: hipStream_t) -> c_int;
    "hipfp8_gg_ck_gfx950_workspace_size" => pub fn hipfp8_gg_ck_gfx950_workspace_size(groups: i32, bytes: *mut u64) -> c_int;
    "hipfp8_gg_ck_gfx950_2d3d" => pub fn hipfp8_gg_ck_gfx950_2d3d(
        a: *const u8, fmt_a: i32, b: *const u8, fmt_b: i32, offs: *const i32, groups: i32,
        sa: *const f32, sb: *const f32, out: *mut c_void, m: i64, n: i64, k: i64,
        workspace: *mut c_void, workspace_bytes: u64, stream: hipStream_t) -> c_int;
    "hipfp8_gg_ck_gfx950_2d2d" => pub fn hipfp8_gg_ck_gfx950_2d2d(
        a: *const u8, fmt_a: i32, b: *const u8, fmt_b: i32, offs: *const i32, groups: i32,
        sa: *const f32, sb: *const f32, out: *mut c_void, n: i64, mt: i64, k: i64,
        workspace: *mut c_void, workspace_bytes: u64, stream: hipStream_t) -> c_int;
}
