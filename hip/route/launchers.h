// launchers.h -- the extern "C" launchers of the MoE routing ops (hip/route/route.hip): the one
// written prototype of each, included by hip/launchers.h (bindgen: src/sys/launchers.rs).
// `format` = `Fp8Format as u32`, `pow2` = 0/1, `in_dtype` = HIPFP8_DTYPE_* (every
// high-precision input of a call has it); END offsets, permutations and slot rows live on the
// device and are clamped or skipped; the stream comes last. Semantics: docs/OPS.md ("MoE
// routing"); the CPU definitions: src/reference/route.rs.
#pragma once

#include "../kernel_abi.h"
#ifndef HIPFP8_BINDGEN
#include "../port.h"
#endif

/// Zeroed workspace bytes of hipfp8_moe_dispatch_dual_launch for `groups` groups (the clamped
/// offsets); 0 for no groups. Every launch leaves it zero.
HIPFP8_DECL int hipfp8_moe_route_workspace_bytes(int64_t groups, uint64_t* bytes) HIPFP8_NOEXCEPT;
/// Dispatch fused with the padding and both casts: x (t, k) row-major (`weights` null), or the
/// combine's backward (x = dout, row of slot s = T(weights[s] * dout[s / topk])); perm[t*topk]
/// the slots in expert order, offs[groups] END offsets over it. Writes offs_pad[groups],
/// slot_row[t*topk], out[m_cap*k] with scales[m_cap] (rowwise) and out_col[c*m_cap + r] with
/// scales_col[g*k + c] (per padded group); rows past offs_pad[groups-1] are zero rows.
/// Scales: forward s, or dequant_scale(s) when `dequant`. m_cap >= t*topk + groups*(align-1); workspace: hipfp8_moe_route_workspace_bytes(groups)
/// zeroed bytes.
HIPFP8_DECL int hipfp8_moe_dispatch_dual_launch(const void* x, const float* weights, const int32_t* perm,
    const int32_t* offs, int32_t* offs_pad, int32_t* slot_row, uint8_t* out, float* scales, uint8_t* out_col,
    float* scales_col, int64_t t, int64_t k, int64_t topk, int64_t groups, int64_t align, int64_t m_cap,
    int format, int pow2, int dequant, int in_dtype, void* workspace, hipStream_t stream) HIPFP8_NOEXCEPT;
/// Combine: out[t*k] (bf16) = sum over j of weights[t*topk+j] * y[slot_row[t*topk+j]] (y:
/// m_cap rows of k, in_dtype), f32, rounded once; rows outside [0, m_cap) add nothing.
HIPFP8_DECL int hipfp8_moe_combine_launch(const void* y, const int32_t* slot_row, const float* weights,
    uint16_t* out, int64_t t, int64_t k, int64_t topk, int64_t m_cap, int in_dtype,
    hipStream_t stream) HIPFP8_NOEXCEPT;
/// The combine's weight gradient: dweights[s] = dot(dout[s / topk], y[slot_row[s]]) in f32 (256
/// lanes, then pairwise), 0 for rows outside [0, m_cap); dout (t, k) and y of in_dtype.
HIPFP8_DECL int hipfp8_moe_combine_bwd_scores_launch(const void* dout, const void* y, const int32_t* slot_row,
    float* dweights, int64_t t, int64_t k, int64_t topk, int64_t m_cap, int in_dtype,
    hipStream_t stream) HIPFP8_NOEXCEPT;
