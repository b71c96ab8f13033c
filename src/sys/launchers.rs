// GENERATED from hip/launchers.h by bindgen (tests/sys_bindings.rs): do not edit.
// `BLESS=1 cargo test --test sys_bindings` rewrites this file.
#![allow(non_snake_case)] // parameter names are the C prototypes' (M, N, K)

use std::ffi::{c_char, c_int, c_ulonglong, c_void};

use super::{NOT_BUILT, hipEvent_t, hipStream_t};

/** Fixed-layout device description (its size is checked at run time through
 hipfp8_rt_props_size).*/
#[repr(C)]
#[derive(Debug, Copy, Clone)]
pub struct hipfp8_device_props {
    pub name: [c_char; 256usize],
    pub arch: [c_char; 256usize],
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
#[allow(clippy::unnecessary_operation, clippy::identity_op)]
const _: () = {
    [
        "Size of hipfp8_device_props",
    ][::std::mem::size_of::<hipfp8_device_props>() - 576usize];
    [
        "Alignment of hipfp8_device_props",
    ][::std::mem::align_of::<hipfp8_device_props>() - 8usize];
    [
        "Offset of field: hipfp8_device_props::name",
    ][::std::mem::offset_of!(hipfp8_device_props, name) - 0usize];
    [
        "Offset of field: hipfp8_device_props::arch",
    ][::std::mem::offset_of!(hipfp8_device_props, arch) - 256usize];
    [
        "Offset of field: hipfp8_device_props::vendor",
    ][::std::mem::offset_of!(hipfp8_device_props, vendor) - 512usize];
    [
        "Offset of field: hipfp8_device_props::multiprocessor_count",
    ][::std::mem::offset_of!(hipfp8_device_props, multiprocessor_count) - 516usize];
    [
        "Offset of field: hipfp8_device_props::wavefront_size",
    ][::std::mem::offset_of!(hipfp8_device_props, wavefront_size) - 520usize];
    [
        "Offset of field: hipfp8_device_props::cc_major",
    ][::std::mem::offset_of!(hipfp8_device_props, cc_major) - 524usize];
    [
        "Offset of field: hipfp8_device_props::cc_minor",
    ][::std::mem::offset_of!(hipfp8_device_props, cc_minor) - 528usize];
    [
        "Offset of field: hipfp8_device_props::max_threads_per_block",
    ][::std::mem::offset_of!(hipfp8_device_props, max_threads_per_block) - 532usize];
    [
        "Offset of field: hipfp8_device_props::total_global_mem",
    ][::std::mem::offset_of!(hipfp8_device_props, total_global_mem) - 536usize];
    [
        "Offset of field: hipfp8_device_props::l2_cache_bytes",
    ][::std::mem::offset_of!(hipfp8_device_props, l2_cache_bytes) - 544usize];
    [
        "Offset of field: hipfp8_device_props::shared_mem_per_block",
    ][::std::mem::offset_of!(hipfp8_device_props, shared_mem_per_block) - 552usize];
    [
        "Offset of field: hipfp8_device_props::shared_mem_per_block_optin",
    ][::std::mem::offset_of!(hipfp8_device_props, shared_mem_per_block_optin)
        - 560usize];
    [
        "Offset of field: hipfp8_device_props::pci_bus_id",
    ][::std::mem::offset_of!(hipfp8_device_props, pci_bus_id) - 568usize];
    [
        "Offset of field: hipfp8_device_props::pci_device_id",
    ][::std::mem::offset_of!(hipfp8_device_props, pci_device_id) - 572usize];
};
foreign! {
    "hipfp8_rt_props_size" => pub fn hipfp8_rt_props_size(size: *mut u64) -> c_int;
    "hipfp8_rt_device_count" => pub fn hipfp8_rt_device_count(count: *mut i32) -> c_int;
    "hipfp8_rt_set_device" => pub fn hipfp8_rt_set_device(ordinal: i32) -> c_int;
    "hipfp8_rt_get_device" => pub fn hipfp8_rt_get_device(ordinal: *mut i32) -> c_int;
    "hipfp8_rt_device_props" => pub fn hipfp8_rt_device_props(
        ordinal: i32, out: *mut hipfp8_device_props) -> c_int;
    "hipfp8_rt_mem_info" => pub fn hipfp8_rt_mem_info(
        free_bytes: *mut u64, total_bytes: *mut u64) -> c_int;
    "hipfp8_rt_versions" => pub fn hipfp8_rt_versions(driver: *mut i32, runtime: *mut i32) -> c_int;
    "hipfp8_rt_device_synchronize" => pub fn hipfp8_rt_device_synchronize() -> c_int;
    "hipfp8_rt_get_last_error" => pub fn hipfp8_rt_get_last_error() -> c_int;
    "hipfp8_rt_malloc" => pub fn hipfp8_rt_malloc(ptr: *mut *mut c_void, bytes: u64) -> c_int;
    "hipfp8_rt_free" => pub fn hipfp8_rt_free(ptr: *mut c_void) -> c_int;
    "hipfp8_rt_memcpy" => pub fn hipfp8_rt_memcpy(
        dst: *mut c_void, src: *const c_void, bytes: u64, kind: i32) -> c_int;
    "hipfp8_rt_memcpy_async" => pub fn hipfp8_rt_memcpy_async(
        dst: *mut c_void, src: *const c_void, bytes: u64, kind: i32, stream: hipStream_t) -> c_int;
    "hipfp8_rt_memset" => pub fn hipfp8_rt_memset(
        dst: *mut c_void, value: i32, bytes: u64) -> c_int;
    "hipfp8_rt_memset_async" => pub fn hipfp8_rt_memset_async(
        dst: *mut c_void, value: i32, bytes: u64, stream: hipStream_t) -> c_int;
    "hipfp8_rt_pointer_info" => pub fn hipfp8_rt_pointer_info(
        ptr: *const c_void, is_device: *mut i32, device: *mut i32) -> c_int;
    "hipfp8_rt_stream_create" => pub fn hipfp8_rt_stream_create(
        stream: *mut hipStream_t, non_blocking: i32) -> c_int;
    "hipfp8_rt_stream_destroy" => pub fn hipfp8_rt_stream_destroy(stream: hipStream_t) -> c_int;
    "hipfp8_rt_stream_synchronize" => pub fn hipfp8_rt_stream_synchronize(
        stream: hipStream_t) -> c_int;
    "hipfp8_rt_stream_query" => pub fn hipfp8_rt_stream_query(
        stream: hipStream_t, done: *mut i32) -> c_int;
    "hipfp8_rt_stream_wait_event" => pub fn hipfp8_rt_stream_wait_event(
        stream: hipStream_t, event: hipEvent_t) -> c_int;
    "hipfp8_rt_event_create" => pub fn hipfp8_rt_event_create(
        event: *mut hipEvent_t, timing: i32) -> c_int;
    "hipfp8_rt_event_destroy" => pub fn hipfp8_rt_event_destroy(event: hipEvent_t) -> c_int;
    "hipfp8_rt_event_record" => pub fn hipfp8_rt_event_record(
        event: hipEvent_t, stream: hipStream_t) -> c_int;
    "hipfp8_rt_event_synchronize" => pub fn hipfp8_rt_event_synchronize(event: hipEvent_t) -> c_int;
    "hipfp8_rt_event_elapsed_ms" => pub fn hipfp8_rt_event_elapsed_ms(
        ms: *mut f32, start: hipEvent_t, end: hipEvent_t) -> c_int;
    "hipfp8_rt_error_string" => pub fn hipfp8_rt_error_string(
        code: i32, name: *mut *const c_char, desc: *mut *const c_char) -> c_int;
    /// Whether `stream` is capturing into a graph now (`*capturing` = 1).
    "hipfp8_rt_stream_is_capturing" => pub fn hipfp8_rt_stream_is_capturing(
        stream: hipStream_t, capturing: *mut i32) -> c_int;
    /// Begin capturing `stream` into a graph; mode 0 global, 1 thread-local, 2 relaxed.
    "hipfp8_rt_stream_begin_capture" => pub fn hipfp8_rt_stream_begin_capture(
        stream: hipStream_t, mode: i32) -> c_int;
    /// End the capture of `stream`: `*graph` is the captured graph (destroy it).
    "hipfp8_rt_stream_end_capture" => pub fn hipfp8_rt_stream_end_capture(
        stream: hipStream_t, graph: *mut *mut c_void) -> c_int;
    /// An executable graph of `graph` (destroy it with hipfp8_rt_graph_exec_destroy).
    "hipfp8_rt_graph_instantiate" => pub fn hipfp8_rt_graph_instantiate(
        exec: *mut *mut c_void, graph: *mut c_void) -> c_int;
    /// Launch an executable graph on `stream`.
    "hipfp8_rt_graph_launch" => pub fn hipfp8_rt_graph_launch(
        exec: *mut c_void, stream: hipStream_t) -> c_int;
    "hipfp8_rt_graph_destroy" => pub fn hipfp8_rt_graph_destroy(graph: *mut c_void) -> c_int;
    "hipfp8_rt_graph_exec_destroy" => pub fn hipfp8_rt_graph_exec_destroy(
        exec: *mut c_void) -> c_int;
    /// `out[i] = (in ? in[i] : 0) + mix32(i * 0x9E3779B9 + seed)` for i in 0..n (wrapping).
    "hipfp8_selftest_fill_launch" => pub fn hipfp8_selftest_fill_launch(
        in_: *const u32, out: *mut u32, n: i64, seed: u32, stream: hipStream_t) -> c_int;
    /// `out[0]` = HIPFP8_WAVE as compiled, `out[1]` = the device's warpSize.
    "hipfp8_selftest_wave_launch" => pub fn hipfp8_selftest_wave_launch(
        out: *mut i32, stream: hipStream_t) -> c_int;
    /// Blockwise 1x128 cast: scales (m, ceil(k/128)).
    "hipfp8_blockwise_1x128_launch" => pub fn hipfp8_blockwise_1x128_launch(
        x: *const c_void, out: *mut u8, scales: *mut f32, m: i64, k: i64, format: c_int,
        pow2: c_int, in_dtype: c_int, stream: hipStream_t) -> c_int;
    /// Blockwise 128x128 cast: scales (ceil(m/128), ceil(k/128)).
    "hipfp8_blockwise_128x128_launch" => pub fn hipfp8_blockwise_128x128_launch(
        x: *const c_void, out: *mut u8, scales: *mut f32, m: i64, k: i64, format: c_int,
        pow2: c_int, in_dtype: c_int, stream: hipStream_t) -> c_int;
    /// MXFP8 along rows: E8M0 scales (m, ceil(k/32)); rounding 0 FLOOR, 1 RCEIL; OCP formats.
    "hipfp8_mxfp8_dim0_launch" => pub fn hipfp8_mxfp8_dim0_launch(
        x: *const c_void, out: *mut u8, scales: *mut u8, m: i64, k: i64, format: c_int,
        rounding: c_int, in_dtype: c_int, stream: hipStream_t) -> c_int;
    /// MXFP8 along columns: out (k, m) row-major, E8M0 scales (k, ceil(m/32)).
    "hipfp8_mxfp8_dim1_launch" => pub fn hipfp8_mxfp8_dim1_launch(
        x: *const c_void, out: *mut u8, scales: *mut u8, m: i64, k: i64, format: c_int,
        rounding: c_int, in_dtype: c_int, stream: hipStream_t) -> c_int;
    /// Workspace size of the column-reducing casts below (per_group_colwise(_dual),
    ///rowwise_3d_transpose_rhs) for `groups` groups and row lengths k1, k2 (0 if single).
    ///The workspace must be zero before its first use; every launch leaves it zero.
    "hipfp8_colwise_workspace_bytes" => pub fn hipfp8_colwise_workspace_bytes(
        groups: i64, k1: i64, k2: i64, bytes: *mut u64) -> c_int;
    /// Per-group colwise cast (see `Context::per_group_colwise`): offsets along m, output
    ///column-major `[j*m + i]`, scales `[g*k + j]`; `dequant` = 1: the scales hold the grouped
    ///GEMMs' 1 / s (as hip/moe/launchers.h says), 0: the forward scales.
    "hipfp8_per_group_colwise_launch" => pub fn hipfp8_per_group_colwise_launch(
        x: *const c_void, offs: *const i32, out: *mut u8, scales: *mut f32, m: i64, k: i64,
        groups: i64, format: c_int, pow2: c_int, dequant: c_int, in_dtype: c_int,
        workspace: *mut c_void, stream: hipStream_t) -> c_int;
    /// Two per-group colwise casts sharing m and offsets, one launch; one dtype for both.
    "hipfp8_per_group_colwise_dual_launch" => pub fn hipfp8_per_group_colwise_dual_launch(
        x1: *const c_void, x2: *const c_void, offs: *const i32, out1: *mut u8, scales1: *mut f32,
        out2: *mut u8, scales2: *mut f32, m: i64, k1: i64, k2: i64, groups: i64, format: c_int,
        pow2: c_int, in_dtype: c_int, workspace: *mut c_void, stream: hipStream_t) -> c_int;
    /// The dual colwise cast into the padded layout (see `Context::per_group_colwise_dual_padded`):
    ///out1 (k1, m_cap) / out2 (k2, m_cap) column-major with every group at a 16-row aligned start,
    ///zeros elsewhere; padded END offsets into padded_offs. The caller guarantees
    ///m_cap >= m + 15*groups. Workspace: as for per_group_colwise_dual. `dequant`: as for
    ///per_group_colwise.
    "hipfp8_per_group_colwise_dual_padded_launch" => pub fn hipfp8_per_group_colwise_dual_padded_launch(
        x1: *const c_void, x2: *const c_void, offs: *const i32, out1: *mut u8, scales1: *mut f32,
        out2: *mut u8, scales2: *mut f32, padded_offs: *mut i32, m: i64, k1: i64, k2: i64,
        m_cap: i64, groups: i64, format: c_int, pow2: c_int, dequant: c_int, in_dtype: c_int,
        workspace: *mut c_void, stream: hipStream_t) -> c_int;
    /// Transpose-rowwise cast of (e, k, n) column-major expert weights (see
    ///`Context::rowwise_3d_transpose_rhs`).
    "hipfp8_rowwise_3d_transpose_rhs_launch" => pub fn hipfp8_rowwise_3d_transpose_rhs_launch(
        x: *const c_void, out: *mut u8, scales: *mut f32, e: i64, k: i64, n: i64, format: c_int,
        pow2: c_int, in_dtype: c_int, workspace: *mut c_void, stream: hipStream_t) -> c_int;
    /// rowwise_3d_transpose_rhs of the weights x0 (E,K,N0) and x1 (E,K,N1) stacked along n per
    ///expert (as hipfp8_moe_weights_dual_pair_launch stacks them; x1 null: N1 = 0, one source),
    ///N = N0 + N1 > 0; `dequant`: as for per_group_colwise. Workspace: colwise_workspace(E, K, 0).
    "hipfp8_rowwise_3d_transpose_rhs_pair_launch" => pub fn hipfp8_rowwise_3d_transpose_rhs_pair_launch(
        x0: *const c_void, x1: *const c_void, out: *mut u8, scales: *mut f32, e: i64, k: i64,
        n0: i64, n1: i64, format: c_int, pow2: c_int, dequant: c_int, in_dtype: c_int,
        workspace: *mut c_void, stream: hipStream_t) -> c_int;
    /// Codec self-test: every finite f32 through the hardware-path encoder and the software
    ///rule; `mismatches` = 2 device u64 (count, recorded), `first_bad` = 24 device u32
    ///((input bits, hw, sw) x 8), `has_hw` = 1 device i32 (does this target convert `format`
    ///in hardware). All must be zeroed by the caller.
    "hipfp8_codec_selftest_launch" => pub fn hipfp8_codec_selftest_launch(
        format: c_int, mismatches: *mut c_ulonglong, first_bad: *mut u32, has_hw: *mut c_int,
        stream: hipStream_t) -> c_int;
    /// Rowwise scale-and-cast of an (m, k) row-major matrix (see `Context::rowwise_2d`).
    ///`format` = `Fp8Format as u32`, `pow2` = 0/1, `in_dtype` = DTYPE_BF16 / DTYPE_F32.
    "hipfp8_rowwise_2d_launch" => pub fn hipfp8_rowwise_2d_launch(
        x: *const c_void, out: *mut u8, scales: *mut f32, m: i64, k: i64, format: c_int,
        pow2: c_int, in_dtype: c_int, stream: hipStream_t) -> c_int;
    /// colwise_3d (the rowwise cast of the E*N rows of K) of the weights x0 (E,K,N0) and x1
    ///(E,K,N1) stacked along n per expert (x1 null: N1 = 0, one source; E = 1 and x1 null is
    ///rowwise_2d of an (N0, K) matrix): out[e*N*K + n*K + k], scales[e*N + n]; `dequant`: as for
    ///per_group_colwise.
    "hipfp8_colwise_3d_pair_launch" => pub fn hipfp8_colwise_3d_pair_launch(
        x0: *const c_void, x1: *const c_void, out: *mut u8, scales: *mut f32, e: i64, k: i64,
        n0: i64, n1: i64, format: c_int, pow2: c_int, dequant: c_int, in_dtype: c_int,
        stream: hipStream_t) -> c_int;
    /// Per-group rowwise cast (see `Context::per_group_rowwise`): offsets along k, scales
    ///`[g*m + i]`. `workspace`: `hipfp8_grouped_scratch_bytes(groups)` bytes of the zeroed
    ///context workspace (null when 0).
    "hipfp8_per_group_rowwise_launch" => pub fn hipfp8_per_group_rowwise_launch(
        x: *const c_void, offs: *const i32, out: *mut u8, scales: *mut f32, m: i64, k: i64,
        groups: i64, format: c_int, pow2: c_int, in_dtype: c_int, workspace: *mut c_void,
        stream: hipStream_t) -> c_int;
    /// Device scratch of per_group_rowwise / rowwise_2d_padded for `groups` groups: 0 up to
    ///2048 groups, else the group tables. Zero before use; every launch leaves it zero.
    "hipfp8_grouped_scratch_bytes" => pub fn hipfp8_grouped_scratch_bytes(
        groups: i64, bytes: *mut u64) -> c_int;
    /// Token-group padding fused with the rowwise cast (see `Context::rowwise_2d_padded`).
    "hipfp8_rowwise_2d_padded_launch" => pub fn hipfp8_rowwise_2d_padded_launch(
        x: *const c_void, offs: *const i32, out: *mut u8, scales: *mut f32, padded_offs: *mut i32,
        m: i64, k: i64, groups: i64, format: c_int, pow2: c_int, in_dtype: c_int,
        workspace: *mut c_void, stream: hipStream_t) -> c_int;
    /// Tensorwise cast of n elements (see `Context::tensorwise`): async memset of `amax`,
    ///amax kernel, cast kernel; no host synchronisation.
    "hipfp8_tensorwise_launch" => pub fn hipfp8_tensorwise_launch(
        x: *const c_void, out: *mut u8, scale: *mut f32, amax: *mut f32, n: i64, format: c_int,
        pow2: c_int, in_dtype: c_int, stream: hipStream_t) -> c_int;
    /// Workspace bytes of cast_transpose (scaling 0 tensorwise, 1 rowwise).
    "hipfp8_cast_transpose_workspace_bytes" => pub fn hipfp8_cast_transpose_workspace_bytes(
        m: i64, k: i64, scaling: c_int, bytes: *mut u64) -> c_int;
    /// Cast-transpose (see `Context::cast_transpose`): out (m,k), out_t (k,m), tensorwise or
    ///rowwise scales; workspace zero before, left zero.
    "hipfp8_cast_transpose_launch" => pub fn hipfp8_cast_transpose_launch(
        x: *const c_void, out: *mut u8, out_t: *mut u8, scales: *mut f32, scales_t: *mut f32,
        m: i64, k: i64, scaling: c_int, format: c_int, pow2: c_int, in_dtype: c_int,
        workspace: *mut c_void, stream: hipStream_t) -> c_int;
    /// Tensorwise cast with the caller's scale (device f32), one read; amax out.
    "hipfp8_tensorwise_scaled_launch" => pub fn hipfp8_tensorwise_scaled_launch(
        x: *const c_void, scale: *const f32, out: *mut u8, amax: *mut f32, n: i64, format: c_int,
        in_dtype: c_int, stream: hipStream_t) -> c_int;
    /// Cast-transpose with the caller's scale (device f32), one read; amax out.
    "hipfp8_cast_transpose_scaled_launch" => pub fn hipfp8_cast_transpose_scaled_launch(
        x: *const c_void, scale: *const f32, out: *mut u8, out_t: *mut u8, amax: *mut f32, m: i64,
        k: i64, format: c_int, in_dtype: c_int, stream: hipStream_t) -> c_int;
    "hipfp8_gg_ck_gfx942_workspace_size" => pub fn hipfp8_gg_ck_gfx942_workspace_size(
        groups: c_int, bytes: *mut u64) -> c_int;
    "hipfp8_gg_ck_gfx942_2d3d" => pub fn hipfp8_gg_ck_gfx942_2d3d(
        a: *const u8, fmt_a: c_int, b: *const u8, fmt_b: c_int, offs: *const i32, groups: c_int,
        sa: *const f32, sb: *const f32, out: *mut c_void, M: i64, N: i64, K: i64,
        workspace: *mut c_void, workspace_bytes: u64, stream: hipStream_t) -> c_int;
    "hipfp8_gg_ck_gfx942_2d2d" => pub fn hipfp8_gg_ck_gfx942_2d2d(
        a: *const u8, fmt_a: c_int, b: *const u8, fmt_b: c_int, offs: *const i32, groups: c_int,
        sa: *const f32, sb: *const f32, out: *mut c_void, N: i64, Mt: i64, K: i64,
        staged_a: *const u8, staged_b: *const u8, mt_pad: i64, workspace: *mut c_void,
        workspace_bytes: u64, stream: hipStream_t) -> c_int;
    "hipfp8_gg_ck_gfx950_workspace_size" => pub fn hipfp8_gg_ck_gfx950_workspace_size(
        groups: c_int, bytes: *mut u64) -> c_int;
    "hipfp8_gg_ck_gfx950_2d3d" => pub fn hipfp8_gg_ck_gfx950_2d3d(
        a: *const u8, fmt_a: c_int, b: *const u8, fmt_b: c_int, offs: *const i32, groups: c_int,
        sa: *const f32, sb: *const f32, out: *mut c_void, M: i64, N: i64, K: i64,
        workspace: *mut c_void, workspace_bytes: u64, stream: hipStream_t) -> c_int;
    "hipfp8_gg_ck_gfx950_2d2d" => pub fn hipfp8_gg_ck_gfx950_2d2d(
        a: *const u8, fmt_a: c_int, b: *const u8, fmt_b: c_int, offs: *const i32, groups: c_int,
        sa: *const f32, sb: *const f32, out: *mut c_void, N: i64, Mt: i64, K: i64,
        staged_a: *const u8, staged_b: *const u8, mt_pad: i64, workspace: *mut c_void,
        workspace_bytes: u64, stream: hipStream_t) -> c_int;
    "hipfp8_gg_ck_gfx942_mixed_2d3d" => pub fn hipfp8_gg_ck_gfx942_mixed_2d3d(
        a: *const u8, fmt_a: c_int, b: *const u8, fmt_b: c_int, offs: *const i32, groups: c_int,
        sa: *const f32, sb: *const f32, out: *mut c_void, M: i64, N: i64, K: i64,
        workspace: *mut c_void, workspace_bytes: u64, stream: hipStream_t) -> c_int;
    "hipfp8_gg_ck_gfx942_mixed_2d2d" => pub fn hipfp8_gg_ck_gfx942_mixed_2d2d(
        a: *const u8, fmt_a: c_int, b: *const u8, fmt_b: c_int, offs: *const i32, groups: c_int,
        sa: *const f32, sb: *const f32, out: *mut c_void, N: i64, Mt: i64, K: i64,
        staged_a: *const u8, staged_b: *const u8, mt_pad: i64, workspace: *mut c_void,
        workspace_bytes: u64, stream: hipStream_t) -> c_int;
    "hipfp8_gg_ck_gfx950_mixed_2d3d" => pub fn hipfp8_gg_ck_gfx950_mixed_2d3d(
        a: *const u8, fmt_a: c_int, b: *const u8, fmt_b: c_int, offs: *const i32, groups: c_int,
        sa: *const f32, sb: *const f32, out: *mut c_void, M: i64, N: i64, K: i64,
        workspace: *mut c_void, workspace_bytes: u64, stream: hipStream_t) -> c_int;
    "hipfp8_gg_ck_gfx950_mixed_2d2d" => pub fn hipfp8_gg_ck_gfx950_mixed_2d2d(
        a: *const u8, fmt_a: c_int, b: *const u8, fmt_b: c_int, offs: *const i32, groups: c_int,
        sa: *const f32, sb: *const f32, out: *mut c_void, N: i64, Mt: i64, K: i64,
        staged_a: *const u8, staged_b: *const u8, mt_pad: i64, workspace: *mut c_void,
        workspace_bytes: u64, stream: hipStream_t) -> c_int;
    "hipfp8_gg_ck_gfx942_bw_workspace_size" => pub fn hipfp8_gg_ck_gfx942_bw_workspace_size(
        groups: c_int, bytes: *mut u64) -> c_int;
    "hipfp8_gg_ck_gfx942_bw_2d3d" => pub fn hipfp8_gg_ck_gfx942_bw_2d3d(
        a: *const u8, fmt_a: c_int, b: *const u8, fmt_b: c_int, offs: *const i32, groups: c_int,
        sa: *const f32, sb: *const f32, out: *mut c_void, M: i64, N: i64, K: i64,
        workspace: *mut c_void, workspace_bytes: u64, stream: hipStream_t) -> c_int;
    "hipfp8_gg_ck_gfx950_bw_workspace_size" => pub fn hipfp8_gg_ck_gfx950_bw_workspace_size(
        groups: c_int, bytes: *mut u64) -> c_int;
    "hipfp8_gg_ck_gfx950_bw_2d3d" => pub fn hipfp8_gg_ck_gfx950_bw_2d3d(
        a: *const u8, fmt_a: c_int, b: *const u8, fmt_b: c_int, offs: *const i32, groups: c_int,
        sa: *const f32, sb: *const f32, out: *mut c_void, M: i64, N: i64, K: i64,
        workspace: *mut c_void, workspace_bytes: u64, stream: hipStream_t) -> c_int;
    "hipfp8_gg_cutlass_workspace_size" => pub fn hipfp8_gg_cutlass_workspace_size(
        groups: c_int, bytes: *mut u64) -> c_int;
    "hipfp8_gg_cutlass_available" => pub fn hipfp8_gg_cutlass_available(
        available: *mut c_int) -> c_int;
    "hipfp8_gg_cutlass_has_instance" => pub fn hipfp8_gg_cutlass_has_instance(
        kind: c_int, fmt_a: c_int, fmt_b: c_int, yes: *mut c_int) -> c_int;
    "hipfp8_gg_cutlass_2d3d" => pub fn hipfp8_gg_cutlass_2d3d(
        a: *const u8, fmt_a: c_int, b: *const u8, fmt_b: c_int, offs: *const i32, groups: c_int,
        sa: *const f32, sb: *const f32, out: *mut c_void, M: i64, N: i64, K: i64,
        workspace: *mut c_void, workspace_bytes: u64, config: c_int, stream: hipStream_t) -> c_int;
    "hipfp8_gg_cutlass_2d2d" => pub fn hipfp8_gg_cutlass_2d2d(
        a: *const u8, fmt_a: c_int, b: *const u8, fmt_b: c_int, offs: *const i32, groups: c_int,
        sa: *const f32, sb: *const f32, out: *mut c_void, N: i64, Mt: i64, K: i64,
        staged_a: *const u8, staged_b: *const u8, mt_pad: i64, workspace: *mut c_void,
        workspace_bytes: u64, config: c_int, stream: hipStream_t) -> c_int;
    "hipfp8_gg_ref_2d3d" => pub fn hipfp8_gg_ref_2d3d(
        a: *const u8, fmt_a: c_int, b: *const u8, fmt_b: c_int, offs: *const i32, groups: c_int,
        sa: *const f32, sb: *const f32, out: *mut c_void, M: i64, N: i64, K: i64, skip: *const i32,
        max_blocks: c_int, stream: hipStream_t) -> c_int;
    "hipfp8_gg_ref_2d2d" => pub fn hipfp8_gg_ref_2d2d(
        a: *const u8, fmt_a: c_int, b: *const u8, fmt_b: c_int, offs: *const i32, groups: c_int,
        sa: *const f32, sb: *const f32, out: *mut c_void, N: i64, Mt: i64, K: i64, skip: *const i32,
        max_blocks: c_int, stream: hipStream_t) -> c_int;
    "hipfp8_gg_stage_2d2d" => pub fn hipfp8_gg_stage_2d2d(
        a: *const u8, b: *const u8, offs: *const i32, groups: c_int, N: i64, Mt: i64, K: i64,
        staged_a: *mut u8, staged_b: *mut u8, mt_pad: i64, padded_offs: *mut i32, scratch: *mut i32,
        align_len: c_int, min_len: i64, max_blocks: c_int, stream: hipStream_t) -> c_int;
    "hipfp8_gg_ref_bw_2d3d" => pub fn hipfp8_gg_ref_bw_2d3d(
        a: *const u8, fmt_a: c_int, b: *const u8, fmt_b: c_int, offs: *const i32, groups: c_int,
        sa: *const f32, sb: *const f32, out: *mut c_void, M: i64, N: i64, K: i64, max_blocks: c_int,
        stream: hipStream_t) -> c_int;
    "hipfp8_gg_cutlass_bw_workspace_size" => pub fn hipfp8_gg_cutlass_bw_workspace_size(
        groups: c_int, bytes: *mut u64) -> c_int;
    "hipfp8_gg_cutlass_bw_2d3d" => pub fn hipfp8_gg_cutlass_bw_2d3d(
        a: *const u8, fmt_a: c_int, b: *const u8, fmt_b: c_int, offs: *const i32, groups: c_int,
        sa: *const f32, sb: *const f32, out: *mut c_void, M: i64, N: i64, K: i64,
        workspace: *mut c_void, workspace_bytes: u64, stream: hipStream_t) -> c_int;
    "hipfp8_gg_ref_bw_2d2d" => pub fn hipfp8_gg_ref_bw_2d2d(
        a: *const u8, fmt_a: c_int, b: *const u8, fmt_b: c_int, offs: *const i32, groups: c_int,
        sa: *const f32, sb: *const f32, out: *mut c_void, N: i64, Mt: i64, K: i64, skip: *const i32,
        max_blocks: c_int, stream: hipStream_t) -> c_int;
    "hipfp8_gg_cutlass_bw_2d2d" => pub fn hipfp8_gg_cutlass_bw_2d2d(
        a: *const u8, fmt_a: c_int, b: *const u8, fmt_b: c_int, offs: *const i32, groups: c_int,
        sa: *const f32, sb: *const f32, out: *mut c_void, N: i64, Mt: i64, K: i64,
        workspace: *mut c_void, workspace_bytes: u64, stream: hipStream_t) -> c_int;
    /// Zeroed workspace bytes of the grouped MoE casts below for `groups` groups (the clamped
    ///offsets); 0 for no groups. Every launch leaves it zero.
    "hipfp8_moe_workspace_bytes" => pub fn hipfp8_moe_workspace_bytes(
        groups: i64, bytes: *mut u64) -> c_int;
    /// Expert weights x (E,K,N) column-major to both GEMM layouts: out[e*N*K + n*K + k] with
    ///scales[e*N + n] (colwise_3d) and out_t[e*N*K + k*N + n] with scales_t[e*K + k]
    ///(rowwise_3d_transpose_rhs). k > 0 and n > 0 when e > 0.
    "hipfp8_moe_weights_dual_launch" => pub fn hipfp8_moe_weights_dual_launch(
        x: *const c_void, out: *mut u8, scales: *mut f32, out_t: *mut u8, scales_t: *mut f32,
        e: i64, k: i64, n: i64, format: c_int, pow2: c_int, dequant: c_int, in_dtype: c_int,
        stream: hipStream_t) -> c_int;
    /// hipfp8_moe_weights_dual_launch of the weights x0 (E,K,N0) and x1 (E,K,N1) (column-major,
    ///one dtype) stacked along n per expert, N = N0 + N1 (rows [0, N0) of expert e's N rows of K
    ///from x0, [N0, N) from x1), without the stacked copy: the same outputs, bit for bit.
    ///k > 0, n0 > 0 and n1 > 0 when e > 0.
    "hipfp8_moe_weights_dual_pair_launch" => pub fn hipfp8_moe_weights_dual_pair_launch(
        x0: *const c_void, x1: *const c_void, out: *mut u8, scales: *mut f32, out_t: *mut u8,
        scales_t: *mut f32, e: i64, k: i64, n0: i64, n1: i64, format: c_int, pow2: c_int,
        dequant: c_int, in_dtype: c_int, stream: hipStream_t) -> c_int;
    /// Activations x (M,K) row-major with END offsets offs[groups] along M: out[m*K + k] with
    ///scales[m] (rowwise_2d) and out_col[k*M + m] with scales_col[g*K + k] (per_group_colwise).
    ///With offs_pad not null, out_col is the padded layout (K, m_cap) instead: group g's rows at
    ///[offs_pad[g-1], offs_pad[g]) (each group padded to a multiple of 16 rows; offs_pad written,
    ///as hipfp8_per_group_colwise_dual_padded), every other byte 0x00; m_cap % 16 == 0 and
    ///m_cap >= m + 15*groups. workspace: hipfp8_moe_workspace_bytes(groups) zeroed bytes.
    "hipfp8_moe_act_dual_launch" => pub fn hipfp8_moe_act_dual_launch(
        x: *const c_void, offs: *const i32, out: *mut u8, scales: *mut f32, out_col: *mut u8,
        scales_col: *mut f32, m_cap: i64, offs_pad: *mut i32, m: i64, k: i64, groups: i64,
        format: c_int, pow2: c_int, dequant: c_int, in_dtype: c_int, workspace: *mut c_void,
        stream: hipStream_t) -> c_int;
    /// SwiGLU forward fused with both casts: gu (M, 2I) row-major (gate = columns [0, I), up =
    ///[I, 2I)), h = silu(gate) * up (M, I) in the input dtype's arithmetic, cast as
    ///hipfp8_moe_act_dual_launch casts x. workspace: as there.
    "hipfp8_moe_swiglu_quant_launch" => pub fn hipfp8_moe_swiglu_quant_launch(
        gu: *const c_void, offs: *const i32, out: *mut u8, scales: *mut f32, out_col: *mut u8,
        scales_col: *mut f32, m_cap: i64, offs_pad: *mut i32, m: i64, i: i64, groups: i64,
        format: c_int, pow2: c_int, dequant: c_int, in_dtype: c_int, workspace: *mut c_void,
        stream: hipStream_t) -> c_int;
    /// SwiGLU backward fused with both casts: from grad_h (M, I) and the forward's gu (M, 2I),
    ///d = [d_gate | d_up] (M, 2I), cast as hipfp8_moe_act_dual_launch casts x (K = 2I).
    "hipfp8_moe_swiglu_bwd_quant_launch" => pub fn hipfp8_moe_swiglu_bwd_quant_launch(
        grad_h: *const c_void, gu: *const c_void, offs: *const i32, out: *mut u8, scales: *mut f32,
        out_col: *mut u8, scales_col: *mut f32, m_cap: i64, offs_pad: *mut i32, m: i64, i: i64,
        groups: i64, format: c_int, pow2: c_int, dequant: c_int, in_dtype: c_int,
        workspace: *mut c_void, stream: hipStream_t) -> c_int;
    /// bf16 rounding self-test: every f32 bit pattern through the SwiGLU kernels' rounding (the
    ///hardware conversion where the target has one) and the integer rule; `mismatches` = 2
    ///device u64 (count, recorded), `first_bad` = 24 device u32 ((input bits, hw, rule) x 8),
    ///`has_hw` = 1 device i32 (does this target round in hardware). All zeroed by the caller.
    "hipfp8_bf16_round_selftest_launch" => pub fn hipfp8_bf16_round_selftest_launch(
        mismatches: *mut c_ulonglong, first_bad: *mut u32, has_hw: *mut c_int, stream: hipStream_t) -> c_int;
    /// out[i] = 1 / in[i] for i in [0, n): the IEEE f32 division (computed in f64 and rounded
    ///once, which is the correctly rounded f32 quotient), as torch's Tensor.reciprocal; 1/0 =
    ///+Inf, 1/NaN = the canonical NaN 0x7FC00000. in and out may be the same buffer.
    "hipfp8_scale_reciprocal_launch" => pub fn hipfp8_scale_reciprocal_launch(
        in_: *const f32, out: *mut f32, n: i64, stream: hipStream_t) -> c_int;
    /// out[h*groups*half + g*half + j] = in[g*2*half + h*half + j] for h < 2, g < groups,
    ///j < half: a (groups, 2*half) f32 table as its two column halves, each (groups, half)
    ///row-major (the W13 wgrad of the recipe takes the d_gate and d_up halves of the SwiGLU
    ///gradient's per-group column scales as two GEMMs' scales). in and out must not overlap.
    "hipfp8_scale_halves_launch" => pub fn hipfp8_scale_halves_launch(
        in_: *const f32, out: *mut f32, groups: i64, half: i64, stream: hipStream_t) -> c_int;
    /// Zeroed workspace bytes of hipfp8_moe_dispatch_dual_launch for `groups` groups (the clamped
    ///offsets); 0 for no groups. Every launch leaves it zero.
    "hipfp8_moe_route_workspace_bytes" => pub fn hipfp8_moe_route_workspace_bytes(
        groups: i64, bytes: *mut u64) -> c_int;
    /// Dispatch fused with the padding and both casts: x (t, k) row-major (`weights` null), or the
    ///combine's backward (x = dout, row of slot s = T(weights[s] * dout[s / topk])); perm[t*topk]
    ///the slots in expert order, offs[groups] END offsets over it. Writes offs_pad[groups],
    ///slot_row[t*topk], out[m_cap*k] with scales[m_cap] (rowwise) and out_col[c*m_cap + r] with
    ///scales_col[g*k + c] (per padded group); rows past offs_pad[groups-1] are zero rows.
    ///Scales: forward s, or dequant_scale(s) when `dequant`. m_cap >= t*topk + groups*(align-1); workspace: hipfp8_moe_route_workspace_bytes(groups)
    ///zeroed bytes.
    "hipfp8_moe_dispatch_dual_launch" => pub fn hipfp8_moe_dispatch_dual_launch(
        x: *const c_void, weights: *const f32, perm: *const i32, offs: *const i32,
        offs_pad: *mut i32, slot_row: *mut i32, out: *mut u8, scales: *mut f32, out_col: *mut u8,
        scales_col: *mut f32, t: i64, k: i64, topk: i64, groups: i64, align: i64, m_cap: i64,
        format: c_int, pow2: c_int, dequant: c_int, in_dtype: c_int, workspace: *mut c_void,
        stream: hipStream_t) -> c_int;
    /// Combine: out[t*k] (bf16) = sum over j of weights[t*topk+j] * y[slot_row[t*topk+j]] (y:
    ///m_cap rows of k, in_dtype), f32, rounded once; rows outside [0, m_cap) add nothing.
    "hipfp8_moe_combine_launch" => pub fn hipfp8_moe_combine_launch(
        y: *const c_void, slot_row: *const i32, weights: *const f32, out: *mut u16, t: i64, k: i64,
        topk: i64, m_cap: i64, in_dtype: c_int, stream: hipStream_t) -> c_int;
    /// The combine's weight gradient: dweights[s] = dot(dout[s / topk], y[slot_row[s]]) in f32 (256
    ///lanes, then pairwise), 0 for rows outside [0, m_cap); dout (t, k) and y of in_dtype.
    "hipfp8_moe_combine_bwd_scores_launch" => pub fn hipfp8_moe_combine_bwd_scores_launch(
        dout: *const c_void, y: *const c_void, slot_row: *const i32, dweights: *mut f32, t: i64,
        k: i64, topk: i64, m_cap: i64, in_dtype: c_int, stream: hipStream_t) -> c_int;
}
