// launchers.h -- the extern "C" launchers of the fused MoE casts (hip/moe/casts.hip): the one
// written prototype of each, included by hip/launchers.h (bindgen: src/sys/launchers.rs).
// `format` = `Fp8Format as u32`, `pow2` = 0/1, `dequant` = 0: the scale outputs hold the
// forward scales s (codes = encode(x * s)), 1: the grouped GEMMs' dequant scales 1 / s (the
// IEEE f32 quotient, NaN -> 0x7FC00000, as hipfp8_scale_reciprocal_launch; the codes are the
// same), `in_dtype` = HIPFP8_DTYPE_* (every input of a call has it); END offsets live on the
// device and are clamped; the stream comes last.
// Semantics: docs/OPS.md ("Fused MoE casts"); the CPU definitions: src/reference/moe.rs.
#pragma once

#include "../kernel_abi.h"
#ifndef HIPFP8_BINDGEN
#include "../port.h"
#endif

/// Zeroed workspace bytes of the grouped MoE casts below for `groups` groups (the clamped
/// offsets); 0 for no groups. Every launch leaves it zero.
HIPFP8_DECL int hipfp8_moe_workspace_bytes(int64_t groups, uint64_t* bytes) HIPFP8_NOEXCEPT;
/// Expert weights x (E,K,N) column-major to both GEMM layouts: out[e*N*K + n*K + k] with
/// scales[e*N + n] (colwise_3d) and out_t[e*N*K + k*N + n] with scales_t[e*K + k]
/// (rowwise_3d_transpose_rhs). k > 0 and n > 0 when e > 0.
HIPFP8_DECL int hipfp8_moe_weights_dual_launch(const void* x, uint8_t* out, float* scales, uint8_t* out_t,
    float* scales_t, int64_t e, int64_t k, int64_t n, int format, int pow2, int dequant, int in_dtype,
    hipStream_t stream) HIPFP8_NOEXCEPT;
/// hipfp8_moe_weights_dual_launch of the weights x0 (E,K,N0) and x1 (E,K,N1) (column-major,
/// one dtype) stacked along n per expert, N = N0 + N1 (rows [0, N0) of expert e's N rows of K
/// from x0, [N0, N) from x1), without the stacked copy: the same outputs, bit for bit.
/// k > 0, n0 > 0 and n1 > 0 when e > 0.
HIPFP8_DECL int hipfp8_moe_weights_dual_pair_launch(const void* x0, const void* x1, uint8_t* out, float* scales,
    uint8_t* out_t, float* scales_t, int64_t e, int64_t k, int64_t n0, int64_t n1, int format, int pow2,
    int dequant, int in_dtype, hipStream_t stream) HIPFP8_NOEXCEPT;
/// Activations x (M,K) row-major with END offsets offs[groups] along M: out[m*K + k] with
/// scales[m] (rowwise_2d) and out_col[k*M + m] with scales_col[g*K + k] (per_group_colwise).
/// With offs_pad not null, out_col is the padded layout (K, m_cap) instead: group g's rows at
/// [offs_pad[g-1], offs_pad[g]) (each group padded to a multiple of 16 rows; offs_pad written,
/// as hipfp8_per_group_colwise_dual_padded), every other byte 0x00; m_cap % 16 == 0 and
/// m_cap >= m + 15*groups. workspace: hipfp8_moe_workspace_bytes(groups) zeroed bytes.
HIPFP8_DECL int hipfp8_moe_act_dual_launch(const void* x, const int32_t* offs, uint8_t* out, float* scales,
    uint8_t* out_col, float* scales_col, int64_t m_cap, int32_t* offs_pad, int64_t m, int64_t k, int64_t groups,
    int format, int pow2, int dequant, int in_dtype, void* workspace, hipStream_t stream) HIPFP8_NOEXCEPT;
/// SwiGLU forward fused with both casts: gu (M, 2I) row-major (gate = columns [0, I), up =
/// [I, 2I)), h = silu(gate) * up (M, I) in the input dtype's arithmetic, cast as
/// hipfp8_moe_act_dual_launch casts x. workspace: as there.
HIPFP8_DECL int hipfp8_moe_swiglu_quant_launch(const void* gu, const int32_t* offs, uint8_t* out, float* scales,
    uint8_t* out_col, float* scales_col, int64_t m_cap, int32_t* offs_pad, int64_t m, int64_t i, int64_t groups,
    int format, int pow2, int dequant, int in_dtype, void* workspace, hipStream_t stream) HIPFP8_NOEXCEPT;
/// SwiGLU backward fused with both casts: from grad_h (M, I) and the forward's gu (M, 2I),
/// d = [d_gate | d_up] (M, 2I), cast as hipfp8_moe_act_dual_launch casts x (K = 2I).
HIPFP8_DECL int hipfp8_moe_swiglu_bwd_quant_launch(const void* grad_h, const void* gu, const int32_t* offs,
    uint8_t* out, float* scales, uint8_t* out_col, float* scales_col, int64_t m_cap, int32_t* offs_pad, int64_t m,
    int64_t i, int64_t groups, int format, int pow2, int dequant, int in_dtype, void* workspace,
    hipStream_t stream) HIPFP8_NOEXCEPT;
/// bf16 rounding self-test: every f32 bit pattern through the SwiGLU kernels' rounding (the
/// hardware conversion where the target has one) and the integer rule; `mismatches` = 2
/// device u64 (count, recorded), `first_bad` = 24 device u32 ((input bits, hw, rule) x 8),
/// `has_hw` = 1 device i32 (does this target round in hardware). All zeroed by the caller.
HIPFP8_DECL int hipfp8_bf16_round_selftest_launch(unsigned long long* mismatches, uint32_t* first_bad, int* has_hw,
    hipStream_t stream) HIPFP8_NOEXCEPT;
