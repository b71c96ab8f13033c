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
// `config`: instance kind and scheduler settings (src/grouped_gemm/rule.rs).
HIPFP8_DECL int hipfp8_gg_ck_gfx942_workspace_size(int groups, uint64_t* bytes) HIPFP8_NOEXCEPT;
HIPFP8_DECL int hipfp8_gg_ck_gfx942_2d3d(const uint8_t* a, int fmt_a, const uint8_t* b, int fmt_b,
    const int32_t* offs, int groups, const float* sa, const float* sb, void* out, int64_t M, int64_t N,
    int64_t K, void* workspace, uint64_t workspace_bytes, hipStream_t stream) HIPFP8_NOEXCEPT;
HIPFP8_DECL int hipfp8_gg_ck_gfx942_2d2d(const uint8_t* a, int fmt_a, const uint8_t* b, int fmt_b,
    const int32_t* offs, int groups, const float* sa, const float* sb, void* out, int64_t N, int64_t Mt,
    int64_t K, void* workspace, uint64_t workspace_bytes, hipStream_t stream) HIPFP8_NOEXCEPT;
HIPFP8_DECL int hipfp8_gg_ck_gfx950_workspace_size(int groups, uint64_t* bytes) HIPFP8_NOEXCEPT;
HIPFP8_DECL int hipfp8_gg_ck_gfx950_2d3d(const uint8_t* a, int fmt_a, const uint8_t* b, int fmt_b,
    const int32_t* offs, int groups, const float* sa, const float* sb, void* out, int64_t M, int64_t N,
    int64_t K, void* workspace, uint64_t workspace_bytes, hipStream_t stream) HIPFP8_NOEXCEPT;
HIPFP8_DECL int hipfp8_gg_ck_gfx950_2d2d(const uint8_t* a, int fmt_a, const uint8_t* b, int fmt_b,
    const int32_t* offs, int groups, const float* sa, const float* sb, void* out, int64_t N, int64_t Mt,
    int64_t K, void* workspace, uint64_t workspace_bytes, hipStream_t stream) HIPFP8_NOEXCEPT;
// The mixed pairs E4M3 x E5M2, E5M2 x E4M3 (workspace: hipfp8_gg_ck_gfx942_workspace_size).
HIPFP8_DECL int hipfp8_gg_ck_gfx942_mixed_2d3d(const uint8_t* a, int fmt_a, const uint8_t* b, int fmt_b,
    const int32_t* offs, int groups, const float* sa, const float* sb, void* out, int64_t M, int64_t N,
    int64_t K, void* workspace, uint64_t workspace_bytes, hipStream_t stream) HIPFP8_NOEXCEPT;
HIPFP8_DECL int hipfp8_gg_ck_gfx942_mixed_2d2d(const uint8_t* a, int fmt_a, const uint8_t* b, int fmt_b,
    const int32_t* offs, int groups, const float* sa, const float* sb, void* out, int64_t N, int64_t Mt,
    int64_t K, void* workspace, uint64_t workspace_bytes, hipStream_t stream) HIPFP8_NOEXCEPT;
// The mixed pairs E4M3 x E5M2, E5M2 x E4M3 (workspace: hipfp8_gg_ck_gfx950_workspace_size).
HIPFP8_DECL int hipfp8_gg_ck_gfx950_mixed_2d3d(const uint8_t* a, int fmt_a, const uint8_t* b, int fmt_b,
    const int32_t* offs, int groups, const float* sa, const float* sb, void* out, int64_t M, int64_t N,
    int64_t K, void* workspace, uint64_t workspace_bytes, hipStream_t stream) HIPFP8_NOEXCEPT;
HIPFP8_DECL int hipfp8_gg_ck_gfx950_mixed_2d2d(const uint8_t* a, int fmt_a, const uint8_t* b, int fmt_b,
    const int32_t* offs, int groups, const float* sa, const float* sb, void* out, int64_t N, int64_t Mt,
    int64_t K, void* workspace, uint64_t workspace_bytes, hipStream_t stream) HIPFP8_NOEXCEPT;
HIPFP8_DECL int hipfp8_gg_cutlass_workspace_size(int groups, uint64_t* bytes) HIPFP8_NOEXCEPT;
HIPFP8_DECL int hipfp8_gg_cutlass_available(int* available) HIPFP8_NOEXCEPT;
HIPFP8_DECL int hipfp8_gg_cutlass_has_instance(int kind, int fmt_a, int fmt_b, int* yes) HIPFP8_NOEXCEPT;
HIPFP8_DECL int hipfp8_gg_cutlass_2d3d(const uint8_t* a, int fmt_a, const uint8_t* b, int fmt_b,
    const int32_t* offs, int groups, const float* sa, const float* sb, void* out, int64_t M, int64_t N,
    int64_t K, void* workspace, uint64_t workspace_bytes, int config, hipStream_t stream) HIPFP8_NOEXCEPT;
HIPFP8_DECL int hipfp8_gg_cutlass_2d2d(const uint8_t* a, int fmt_a, const uint8_t* b, int fmt_b,
    const int32_t* offs, int groups, const float* sa, const float* sb, void* out, int64_t N, int64_t Mt,
    int64_t K, void* workspace, uint64_t workspace_bytes, int config, hipStream_t stream) HIPFP8_NOEXCEPT;
HIPFP8_DECL int hipfp8_gg_ref_2d3d(const uint8_t* a, int fmt_a, const uint8_t* b, int fmt_b,
    const int32_t* offs, int groups, const float* sa, const float* sb, void* out, int64_t M, int64_t N,
    int64_t K, const int32_t* skip, int max_blocks, hipStream_t stream) HIPFP8_NOEXCEPT;
HIPFP8_DECL int hipfp8_gg_ref_2d2d(const uint8_t* a, int fmt_a, const uint8_t* b, int fmt_b,
    const int32_t* offs, int groups, const float* sa, const float* sb, void* out, int64_t N, int64_t Mt,
    int64_t K, const int32_t* skip, int max_blocks, hipStream_t stream) HIPFP8_NOEXCEPT;
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
