// launchers.h -- the extern "C" launchers of the grouped GEMMs (hip/grouped_gemm/): the one
// written prototype of each, included by every .hip file that defines one so the C++
// compiler checks each definition; src/sys/launchers.rs is generated from it by bindgen.
#pragma once

#include "../kernel_abi.h"
#ifndef HIPFP8_BINDGEN
#include "../port.h"
#endif

// Grouped GEMM (semantics docs/OPS.md). Formats are
// `Fp8Format as u32`; a, b, offs, scales, out and workspace are device pointers. Reference
// kernel: `skip` (may be null) marks groups another backend owns; `max_blocks` caps the grid
// (0 = default). Library launchers: `workspace` of at least the queried size; CUTLASS
// `config`: instance kind and scheduler settings (src/grouped_gemm/rule.rs). 2D x 2D library
// launchers: staged_a (N, mt_pad) / staged_b (K, mt_pad) hold hipfp8_gg_stage_2d2d's copies of
// the groups off a 16-token boundary (read there; every other group in place), or both null
// (no staging: such groups go to the reference kernel); mt_pad % 16 == 0 and
// Mt + 15 * groups <= mt_pad <= INT32_MAX, staged operands 16-byte aligned.
HIPFP8_DECL int hipfp8_gg_ck_gfx942_workspace_size(int groups, uint64_t* bytes) HIPFP8_NOEXCEPT;
HIPFP8_DECL int hipfp8_gg_ck_gfx942_2d3d(const uint8_t* a, int fmt_a, const uint8_t* b, int fmt_b,
    const int32_t* offs, int groups, const float* sa, const float* sb, void* out, int64_t M, int64_t N,
    int64_t K, void* workspace, uint64_t workspace_bytes, hipStream_t stream) HIPFP8_NOEXCEPT;
HIPFP8_DECL int hipfp8_gg_ck_gfx942_2d2d(const uint8_t* a, int fmt_a, const uint8_t* b, int fmt_b,
    const int32_t* offs, int groups, const float* sa, const float* sb, void* out, int64_t N, int64_t Mt,
    int64_t K, const uint8_t* staged_a, const uint8_t* staged_b, int64_t mt_pad, void* workspace,
    uint64_t workspace_bytes, hipStream_t stream) HIPFP8_NOEXCEPT;
HIPFP8_DECL int hipfp8_gg_ck_gfx950_workspace_size(int groups, uint64_t* bytes) HIPFP8_NOEXCEPT;
HIPFP8_DECL int hipfp8_gg_ck_gfx950_2d3d(const uint8_t* a, int fmt_a, const uint8_t* b, int fmt_b,
    const int32_t* offs, int groups, const float* sa, const float* sb, void* out, int64_t M, int64_t N,
    int64_t K, void* workspace, uint64_t workspace_bytes, hipStream_t stream) HIPFP8_NOEXCEPT;
HIPFP8_DECL int hipfp8_gg_ck_gfx950_2d2d(const uint8_t* a, int fmt_a, const uint8_t* b, int fmt_b,
    const int32_t* offs, int groups, const float* sa, const float* sb, void* out, int64_t N, int64_t Mt,
    int64_t K, const uint8_t* staged_a, const uint8_t* staged_b, int64_t mt_pad, void* workspace,
    uint64_t workspace_bytes, hipStream_t stream) HIPFP8_NOEXCEPT;
// The mixed pairs E4M3 x E5M2, E5M2 x E4M3 (workspace: hipfp8_gg_ck_gfx942_workspace_size).
HIPFP8_DECL int hipfp8_gg_ck_gfx942_mixed_2d3d(const uint8_t* a, int fmt_a, const uint8_t* b, int fmt_b,
    const int32_t* offs, int groups, const float* sa, const float* sb, void* out, int64_t M, int64_t N,
    int64_t K, void* workspace, uint64_t workspace_bytes, hipStream_t stream) HIPFP8_NOEXCEPT;
HIPFP8_DECL int hipfp8_gg_ck_gfx942_mixed_2d2d(const uint8_t* a, int fmt_a, const uint8_t* b, int fmt_b,
    const int32_t* offs, int groups, const float* sa, const float* sb, void* out, int64_t N, int64_t Mt,
    int64_t K, const uint8_t* staged_a, const uint8_t* staged_b, int64_t mt_pad, void* workspace,
    uint64_t workspace_bytes, hipStream_t stream) HIPFP8_NOEXCEPT;
// The mixed pairs E4M3 x E5M2, E5M2 x E4M3 (workspace: hipfp8_gg_ck_gfx950_workspace_size).
HIPFP8_DECL int hipfp8_gg_ck_gfx950_mixed_2d3d(const uint8_t* a, int fmt_a, const uint8_t* b, int fmt_b,
    const int32_t* offs, int groups, const float* sa, const float* sb, void* out, int64_t M, int64_t N,
    int64_t K, void* workspace, uint64_t workspace_bytes, hipStream_t stream) HIPFP8_NOEXCEPT;
HIPFP8_DECL int hipfp8_gg_ck_gfx950_mixed_2d2d(const uint8_t* a, int fmt_a, const uint8_t* b, int fmt_b,
    const int32_t* offs, int groups, const float* sa, const float* sb, void* out, int64_t N, int64_t Mt,
    int64_t K, const uint8_t* staged_a, const uint8_t* staged_b, int64_t mt_pad, void* workspace,
    uint64_t workspace_bytes, hipStream_t stream) HIPFP8_NOEXCEPT;
// Blockwise-scaled 2D x 3D (docs/OPS.md grouped_gemm_blockwise_2d3d; scales as for
// hipfp8_gg_ref_bw_2d3d below) on CK (ck/ck_grouped_gemm_blockwise.h): the target's E4M3 x E4M3
// only (E4M3FNUZ on gfx942, E4M3FN on gfx950), K % 128 == 0, K >= 384, N % 128 == 0,
// M * K <= INT32_MAX, 2 * M * N <= INT32_MAX, 16-byte aligned a, b, out.
HIPFP8_DECL int hipfp8_gg_ck_gfx942_bw_workspace_size(int groups, uint64_t* bytes) HIPFP8_NOEXCEPT;
HIPFP8_DECL int hipfp8_gg_ck_gfx942_bw_2d3d(const uint8_t* a, int fmt_a, const uint8_t* b, int fmt_b,
    const int32_t* offs, int groups, const float* sa, const float* sb, void* out, int64_t M, int64_t N,
    int64_t K, void* workspace, uint64_t workspace_bytes, hipStream_t stream) HIPFP8_NOEXCEPT;
HIPFP8_DECL int hipfp8_gg_ck_gfx950_bw_workspace_size(int groups, uint64_t* bytes) HIPFP8_NOEXCEPT;
HIPFP8_DECL int hipfp8_gg_ck_gfx950_bw_2d3d(const uint8_t* a, int fmt_a, const uint8_t* b, int fmt_b,
    const int32_t* offs, int groups, const float* sa, const float* sb, void* out, int64_t M, int64_t N,
    int64_t K, void* workspace, uint64_t workspace_bytes, hipStream_t stream) HIPFP8_NOEXCEPT;
HIPFP8_DECL int hipfp8_gg_cutlass_workspace_size(int groups, uint64_t* bytes) HIPFP8_NOEXCEPT;
HIPFP8_DECL int hipfp8_gg_cutlass_available(int* available) HIPFP8_NOEXCEPT;
HIPFP8_DECL int hipfp8_gg_cutlass_has_instance(int kind, int fmt_a, int fmt_b, int* yes) HIPFP8_NOEXCEPT;
HIPFP8_DECL int hipfp8_gg_cutlass_2d3d(const uint8_t* a, int fmt_a, const uint8_t* b, int fmt_b,
    const int32_t* offs, int groups, const float* sa, const float* sb, void* out, int64_t M, int64_t N,
    int64_t K, void* workspace, uint64_t workspace_bytes, int config, hipStream_t stream) HIPFP8_NOEXCEPT;
HIPFP8_DECL int hipfp8_gg_cutlass_2d2d(const uint8_t* a, int fmt_a, const uint8_t* b, int fmt_b,
    const int32_t* offs, int groups, const float* sa, const float* sb, void* out, int64_t N, int64_t Mt,
    int64_t K, const uint8_t* staged_a, const uint8_t* staged_b, int64_t mt_pad, void* workspace,
    uint64_t workspace_bytes, int config, hipStream_t stream) HIPFP8_NOEXCEPT;
HIPFP8_DECL int hipfp8_gg_ref_2d3d(const uint8_t* a, int fmt_a, const uint8_t* b, int fmt_b,
    const int32_t* offs, int groups, const float* sa, const float* sb, void* out, int64_t M, int64_t N,
    int64_t K, const int32_t* skip, int max_blocks, hipStream_t stream) HIPFP8_NOEXCEPT;
HIPFP8_DECL int hipfp8_gg_ref_2d2d(const uint8_t* a, int fmt_a, const uint8_t* b, int fmt_b,
    const int32_t* offs, int groups, const float* sa, const float* sb, void* out, int64_t N, int64_t Mt,
    int64_t K, const int32_t* skip, int max_blocks, hipStream_t stream) HIPFP8_NOEXCEPT;
// 2D x 2D operand staging (stage.hip; docs/OPS.md grouped_gemm_2d2d "Any group start"): copy
// the groups hipfp8_gg::stage_2d2d(lo, hi, align_len, min_len) selects (group_args.h: those a
// library can't read in place) from a (N, Mt) and b (K x Mt) to staged_a (N, mt_pad) /
// staged_b (K, mt_pad) at sum_{h<g} round_up(len_h, 16), zero bytes to each copied group's
// padded end, and write the padded END offsets padded_offs[groups]; offsets clamped on the
// device; other columns untouched. Needs Mt % 16 == 0, mt_pad % 16 == 0,
// Mt + 15 * groups <= mt_pad <= INT32_MAX, 16-byte aligned a, b, staged_a, staged_b,
// align_len >= 1, min_len >= 1; scratch: `groups` int32. `max_blocks` caps each grid
// dimension (0 = default).
HIPFP8_DECL int hipfp8_gg_stage_2d2d(const uint8_t* a, const uint8_t* b, const int32_t* offs,
    int groups, int64_t N, int64_t Mt, int64_t K, uint8_t* staged_a, uint8_t* staged_b,
    int64_t mt_pad, int32_t* padded_offs, int32_t* scratch, int align_len, int64_t min_len,
    int max_blocks, hipStream_t stream) HIPFP8_NOEXCEPT;
// Blockwise-scaled 2D x 3D (docs/OPS.md grouped_gemm_blockwise_2d3d): sa (M, ceil(K/128)),
// sb (E, ceil(N/128), ceil(K/128)), both row-major DEQUANT scales. The reference kernel
// (every format pair and shape) and the CUTLASS sm_90 instance (E4M3FN x E4M3FN,
// K % 128 == 0, N % 128 == 0, 16-byte aligned a, b, out).
HIPFP8_DECL int hipfp8_gg_ref_bw_2d3d(const uint8_t* a, int fmt_a, const uint8_t* b, int fmt_b,
    const int32_t* offs, int groups, const float* sa, const float* sb, void* out, int64_t M, int64_t N,
    int64_t K, int max_blocks, hipStream_t stream) HIPFP8_NOEXCEPT;
HIPFP8_DECL int hipfp8_gg_cutlass_bw_workspace_size(int groups, uint64_t* bytes) HIPFP8_NOEXCEPT;
HIPFP8_DECL int hipfp8_gg_cutlass_bw_2d3d(const uint8_t* a, int fmt_a, const uint8_t* b, int fmt_b,
    const int32_t* offs, int groups, const float* sa, const float* sb, void* out, int64_t M, int64_t N,
    int64_t K, void* workspace, uint64_t workspace_bytes, hipStream_t stream) HIPFP8_NOEXCEPT;
// Blockwise-scaled 2D x 2D (docs/OPS.md grouped_gemm_blockwise_2d2d): a (N, Mt), b (K x Mt),
// sa (ceil(Mt/128), N), sb (ceil(Mt/128), K), row-major DEQUANT scales of absolute 128-token
// blocks (block-major: one row per token block); out (G, N, K). The reference kernel (every format pair and shape; `skip` as for
// hipfp8_gg_ref_2d2d) and the CUTLASS sm_90 instance (E4M3FN x E4M3FN, Mt % 16 == 0,
// K % 8 == 0, 16-byte aligned a, b, out), which takes the non-empty groups starting on a
// 128-token boundary and runs the reference kernel on the others (decided on the device).
HIPFP8_DECL int hipfp8_gg_ref_bw_2d2d(const uint8_t* a, int fmt_a, const uint8_t* b, int fmt_b,
    const int32_t* offs, int groups, const float* sa, const float* sb, void* out, int64_t N, int64_t Mt,
    int64_t K, const int32_t* skip, int max_blocks, hipStream_t stream) HIPFP8_NOEXCEPT;
HIPFP8_DECL int hipfp8_gg_cutlass_bw_2d2d(const uint8_t* a, int fmt_a, const uint8_t* b, int fmt_b,
    const int32_t* offs, int groups, const float* sa, const float* sb, void* out, int64_t N, int64_t Mt,
    int64_t K, void* workspace, uint64_t workspace_bytes, hipStream_t stream) HIPFP8_NOEXCEPT;
