// launchers.h -- the extern "C" launchers of the quantization kernels (hip/quant/*.hip): the
// one written prototype of each, included by every .hip file of hip/quant/ so the C++
// compiler checks each definition; src/sys/launchers.rs is generated from it by bindgen.
// `format` = `Fp8Format as u32` (HIPFP8_FMT_*), `pow2` = 0/1, `in_dtype` = HIPFP8_DTYPE_*;
// the stream comes last. Semantics: docs/OPS.md; conventions: docs/KERNEL_ABI.md.
#pragma once

#include "../kernel_abi.h"
#ifndef HIPFP8_BINDGEN
#include "../port.h"
#endif

/// Blockwise 1x128 cast: scales (m, ceil(k/128)).
HIPFP8_DECL int hipfp8_blockwise_1x128_launch(const void* x, uint8_t* out, float* scales, int64_t m,
    int64_t k, int format, int pow2, int in_dtype, hipStream_t stream) HIPFP8_NOEXCEPT;
/// Blockwise 128x128 cast: scales (ceil(m/128), ceil(k/128)).
HIPFP8_DECL int hipfp8_blockwise_128x128_launch(const void* x, uint8_t* out, float* scales, int64_t m,
    int64_t k, int format, int pow2, int in_dtype, hipStream_t stream) HIPFP8_NOEXCEPT;
/// MXFP8 along rows: E8M0 scales (m, ceil(k/32)); rounding 0 FLOOR, 1 RCEIL; OCP formats.
HIPFP8_DECL int hipfp8_mxfp8_dim0_launch(const void* x, uint8_t* out, uint8_t* scales, int64_t m, int64_t k,
    int format, int rounding, int in_dtype, hipStream_t stream) HIPFP8_NOEXCEPT;
/// MXFP8 along columns: out (k, m) row-major, E8M0 scales (k, ceil(m/32)).
HIPFP8_DECL int hipfp8_mxfp8_dim1_launch(const void* x, uint8_t* out, uint8_t* scales, int64_t m, int64_t k,
    int format, int rounding, int in_dtype, hipStream_t stream) HIPFP8_NOEXCEPT;
/// Workspace size of the column-reducing casts below (per_group_colwise(_dual),
/// rowwise_3d_transpose_rhs) for `groups` groups and row lengths k1, k2 (0 if single).
/// The workspace must be zero before its first use; every launch leaves it zero.
HIPFP8_DECL int hipfp8_colwise_workspace_bytes(int64_t groups, int64_t k1, int64_t k2,
    uint64_t* bytes) HIPFP8_NOEXCEPT;
/// Per-group colwise cast (see `Context::per_group_colwise`): offsets along m, output
/// column-major `[j*m + i]`, scales `[g*k + j]`; `dequant` = 1: the scales hold the grouped
/// GEMMs' 1 / s (as hip/moe/launchers.h says), 0: the forward scales.
HIPFP8_DECL int hipfp8_per_group_colwise_launch(const void* x, const int32_t* offs, uint8_t* out,
    float* scales, int64_t m, int64_t k, int64_t groups, int format, int pow2, int dequant, int in_dtype,
    void* workspace, hipStream_t stream) HIPFP8_NOEXCEPT;
/// Two per-group colwise casts sharing m and offsets, one launch; one dtype for both.
HIPFP8_DECL int hipfp8_per_group_colwise_dual_launch(const void* x1, const void* x2, const int32_t* offs,
    uint8_t* out1, float* scales1, uint8_t* out2, float* scales2, int64_t m, int64_t k1, int64_t k2,
    int64_t groups, int format, int pow2, int in_dtype, void* workspace, hipStream_t stream) HIPFP8_NOEXCEPT;
/// The dual colwise cast into the padded layout (see `Context::per_group_colwise_dual_padded`):
/// out1 (k1, m_cap) / out2 (k2, m_cap) column-major with every group at a 16-row aligned start,
/// zeros elsewhere; padded END offsets into padded_offs. The caller guarantees
/// m_cap >= m + 15*groups. Workspace: as for per_group_colwise_dual. `dequant`: as for
/// per_group_colwise.
HIPFP8_DECL int hipfp8_per_group_colwise_dual_padded_launch(const void* x1, const void* x2, const int32_t* offs,
    uint8_t* out1, float* scales1, uint8_t* out2, float* scales2, int32_t* padded_offs, int64_t m, int64_t k1,
    int64_t k2, int64_t m_cap, int64_t groups, int format, int pow2, int dequant, int in_dtype, void* workspace,
    hipStream_t stream) HIPFP8_NOEXCEPT;
/// Transpose-rowwise cast of (e, k, n) column-major expert weights (see
/// `Context::rowwise_3d_transpose_rhs`).
HIPFP8_DECL int hipfp8_rowwise_3d_transpose_rhs_launch(const void* x, uint8_t* out, float* scales, int64_t e,
    int64_t k, int64_t n, int format, int pow2, int in_dtype, void* workspace,
    hipStream_t stream) HIPFP8_NOEXCEPT;
/// rowwise_3d_transpose_rhs of the weights x0 (E,K,N0) and x1 (E,K,N1) stacked along n per
/// expert (as hipfp8_moe_weights_dual_pair_launch stacks them; x1 null: N1 = 0, one source),
/// N = N0 + N1 > 0; `dequant`: as for per_group_colwise. Workspace: colwise_workspace(E, K, 0).
HIPFP8_DECL int hipfp8_rowwise_3d_transpose_rhs_pair_launch(const void* x0, const void* x1, uint8_t* out,
    float* scales, int64_t e, int64_t k, int64_t n0, int64_t n1, int format, int pow2, int dequant, int in_dtype,
    void* workspace, hipStream_t stream) HIPFP8_NOEXCEPT;
/// Codec self-test: every finite f32 through the hardware-path encoder and the software
/// rule; `mismatches` = 2 device u64 (count, recorded), `first_bad` = 24 device u32
/// ((input bits, hw, sw) x 8), `has_hw` = 1 device i32 (does this target convert `format`
/// in hardware). All must be zeroed by the caller.
HIPFP8_DECL int hipfp8_codec_selftest_launch(int format, unsigned long long* mismatches, uint32_t* first_bad,
    int* has_hw, hipStream_t stream) HIPFP8_NOEXCEPT;
/// Rowwise scale-and-cast of an (m, k) row-major matrix (see `Context::rowwise_2d`).
/// `format` = `Fp8Format as u32`, `pow2` = 0/1, `in_dtype` = DTYPE_BF16 / DTYPE_F32.
HIPFP8_DECL int hipfp8_rowwise_2d_launch(const void* x, uint8_t* out, float* scales, int64_t m, int64_t k,
    int format, int pow2, int in_dtype, hipStream_t stream) HIPFP8_NOEXCEPT;
/// colwise_3d (the rowwise cast of the E*N rows of K) of the weights x0 (E,K,N0) and x1
/// (E,K,N1) stacked along n per expert (x1 null: N1 = 0, one source; E = 1 and x1 null is
/// rowwise_2d of an (N0, K) matrix): out[e*N*K + n*K + k], scales[e*N + n]; `dequant`: as for
/// per_group_colwise.
HIPFP8_DECL int hipfp8_colwise_3d_pair_launch(const void* x0, const void* x1, uint8_t* out, float* scales,
    int64_t e, int64_t k, int64_t n0, int64_t n1, int format, int pow2, int dequant, int in_dtype,
    hipStream_t stream) HIPFP8_NOEXCEPT;
/// Per-group rowwise cast (see `Context::per_group_rowwise`): offsets along k, scales
/// `[g*m + i]`. `workspace`: `hipfp8_grouped_scratch_bytes(groups)` bytes of the zeroed
/// context workspace (null when 0).
HIPFP8_DECL int hipfp8_per_group_rowwise_launch(const void* x, const int32_t* offs, uint8_t* out,
    float* scales, int64_t m, int64_t k, int64_t groups, int format, int pow2, int in_dtype, void* workspace,
    hipStream_t stream) HIPFP8_NOEXCEPT;
/// Device scratch of per_group_rowwise / rowwise_2d_padded for `groups` groups: 0 up to
/// 2048 groups, else the group tables. Zero before use; every launch leaves it zero.
HIPFP8_DECL int hipfp8_grouped_scratch_bytes(int64_t groups, uint64_t* bytes) HIPFP8_NOEXCEPT;
/// Token-group padding fused with the rowwise cast (see `Context::rowwise_2d_padded`).
HIPFP8_DECL int hipfp8_rowwise_2d_padded_launch(const void* x, const int32_t* offs, uint8_t* out,
    float* scales, int32_t* padded_offs, int64_t m, int64_t k, int64_t groups, int format, int pow2,
    int in_dtype, void* workspace, hipStream_t stream) HIPFP8_NOEXCEPT;
/// Tensorwise cast of n elements (see `Context::tensorwise`): async memset of `amax`,
/// amax kernel, cast kernel; no host synchronisation.
HIPFP8_DECL int hipfp8_tensorwise_launch(const void* x, uint8_t* out, float* scale, float* amax, int64_t n,
    int format, int pow2, int in_dtype, hipStream_t stream) HIPFP8_NOEXCEPT;
/// Workspace bytes of cast_transpose (scaling 0 tensorwise, 1 rowwise).
HIPFP8_DECL int hipfp8_cast_transpose_workspace_bytes(int64_t m, int64_t k, int scaling,
    uint64_t* bytes) HIPFP8_NOEXCEPT;
/// Cast-transpose (see `Context::cast_transpose`): out (m,k), out_t (k,m), tensorwise or
/// rowwise scales; workspace zero before, left zero.
HIPFP8_DECL int hipfp8_cast_transpose_launch(const void* x, uint8_t* out, uint8_t* out_t, float* scales,
    float* scales_t, int64_t m, int64_t k, int scaling, int format, int pow2, int in_dtype, void* workspace,
    hipStream_t stream) HIPFP8_NOEXCEPT;
/// Tensorwise cast with the caller's scale (device f32), one read; amax out.
HIPFP8_DECL int hipfp8_tensorwise_scaled_launch(const void* x, const float* scale, uint8_t* out, float* amax,
    int64_t n, int format, int in_dtype, hipStream_t stream) HIPFP8_NOEXCEPT;
/// Cast-transpose with the caller's scale (device f32), one read; amax out.
HIPFP8_DECL int hipfp8_cast_transpose_scaled_launch(const void* x, const float* scale, uint8_t* out,
    uint8_t* out_t, float* amax, int64_t m, int64_t k, int format, int in_dtype,
    hipStream_t stream) HIPFP8_NOEXCEPT;
