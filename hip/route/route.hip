// route.hip -- the MoE routing ops (docs/OPS.md, "MoE routing"; definitions in
// src/reference/route.rs):
//   dispatch_dual  gather of the routed tokens through the permutation, padding of each expert
//                  group to a multiple of `align` rows, and both grouped-GEMM casts of the
//                  padded matrix (rowwise; per padded group colwise, transposed), without
//                  storing the gathered matrix; with per-slot weights it is the combine's
//                  backward (row = T(w * dout[token])).
//   combine        out[t] = bf16(sum_j w[s] * y[slot_row[s]]), s = t*topk + j
//   combine_bwd_scores  dw[s] = dot(dout[t], y[slot_row[s]]) in a fixed order
// A table kernel (one block) first writes the clamped END offsets (workspace) and the padded
// END offsets (output); the row and column kernels then find each padded row's source on the
// fly. Every code goes through encode_sw, every scale through amax_to_scale, every f32
// operation is IEEE-rounded without contraction (mul32/add32): bit-identical to the CPU
// reference.
#include "../quant/common.h"
#include "../moe/swiglu.h"
#include "launchers.h"

namespace hipfp8 {
// hipfp8-emu-begin route_kernels (tests/route_emu.rs runs the kernels on the host)
namespace route {

constexpr int kBlock = 256;
constexpr int kTile = 32;  // columns per column-kernel block, rows per transposed store tile
constexpr int kRowLanes = kBlock / kTile;
constexpr int kTablesBlock = 1024;

// clamped[g] = the clamped END offsets over the m slots; pad[g] = their padded END offsets
// (each group's length rounded up to a multiple of align).
__global__ void __launch_bounds__(kTablesBlock) tables_kernel(const int32_t* offs, int G, int64_t m, int64_t align,
                                                              int32_t* clamped, int32_t* pad) {
  load_clamped_offsets<kTablesBlock>(offs, G, m, clamped);
  __shared__ int64_t scan[kTablesBlock];
  int64_t carry = 0;
  for (int base = 0; base < G; base += kTablesBlock) {
    const int i = base + (int)threadIdx.x;
    int64_t v = 0;
    if (i < G) {
      const int64_t len = (int64_t)clamped[i] - (i ? clamped[i - 1] : 0);
      v = (len + align - 1) / align * align;
    }
    scan[threadIdx.x] = v;
    __syncthreads();
    for (int d = 1; d < kTablesBlock; d <<= 1) {
      const int64_t o = threadIdx.x >= (unsigned)d ? scan[threadIdx.x - d] : 0;
      __syncthreads();
      v += o;
      scan[threadIdx.x] = v;
      __syncthreads();
    }
    if (i < G) pad[i] = (int32_t)(carry + v);
    carry += scan[kTablesBlock - 1];
    __syncthreads();
  }
}

// The routing as the kernels read it: a padded row's slot (or -1) and the slot's value.
template <class In, bool W>
struct RouteSrc {
  const typename In::elem* x;
  const float* w;
  const int32_t* perm;
  const int32_t* clamped;
  const int32_t* pad;
  int G;
  int64_t m, k, topk;

  // The slot at padded row p of group g (g < G), -1 for a padding row or an entry of perm
  // outside [0, m).
  __device__ int64_t slot_in(int g, int64_t p) const {
    const int64_t ps = g ? pad[g - 1] : 0;
    const int64_t lo = g ? clamped[g - 1] : 0;
    const int64_t i = p - ps;
    if (i >= (int64_t)clamped[g] - lo) return -1;
    const int64_t s = perm[lo + i];
    return (s >= 0 && s < m) ? s : -1;
  }
  __device__ float value(int64_t s, int64_t c) const {
    if (s < 0) return 0.0f;
    const float v = In::load1(x, (s / topk) * k + c);
    if constexpr (W) {
      return moe::round_to<sizeof(typename In::elem) == 2>(moe::mul32(w[s], v));
    } else {
      return v;
    }
  }
};

// Padded rows p < m_cap: scales[p] over the row, out[p * k + c]; slot_row of every routed
// slot; then slot_row = -1 for the slots at positions past the last group.
template <uint32_t F, class S>
__global__ void __launch_bounds__(kBlock) rows_kernel(S src, int64_t m_cap, int32_t* slot_row, uint8_t* out,
                                                      float* scales, int pow2, int dequant) {
  __shared__ uint32_t red[kBlock / HIPFP8_WAVE];
  const int64_t k = src.k;
  for (int64_t p = blockIdx.x; p < m_cap; p += gridDim.x) {
    const int g = upper_bound_i32(src.pad, src.G, p);
    const int64_t s = g < src.G ? src.slot_in(g, p) : -1;
    if (s >= 0 && threadIdx.x == 0) slot_row[s] = (int32_t)p;
    uint32_t a = 0;
    for (int64_t c = threadIdx.x; c < k; c += kBlock) a = max(a, abs_bits(src.value(s, c)));
    a = block_max<kBlock>(a, red);
    const float sc = amax_to_scale<F>(a, pow2 != 0);
    if (threadIdx.x == 0) scales[p] = dequant ? dequant_scale(sc) : sc;
    uint8_t* o = out + p * k;
    for (int64_t c = threadIdx.x; c < k; c += kBlock) o[c] = (uint8_t)encode_sw<F>(src.value(s, c) * sc);
  }
  const int64_t routed = src.G ? src.clamped[src.G - 1] : 0;
  for (int64_t j = routed + (int64_t)blockIdx.x * kBlock + threadIdx.x; j < src.m; j += (int64_t)gridDim.x * kBlock) {
    const int64_t s = src.perm[j];
    if (s >= 0 && s < src.m) slot_row[s] = -1;
  }
}

// Padded groups g < G (and g = G: the tail rows from pad[G-1] to m_cap, zero codes): the
// column amax over the group's rows into scales_col[g * k + c], codes at out_col[c * m_cap + r].
// Block: 32 columns x 8 row lanes.
template <uint32_t F, class S>
__global__ void __launch_bounds__(kBlock) cols_kernel(S src, int64_t m_cap, uint8_t* out_col, float* scales_col,
                                                      int pow2, int dequant) {
  __shared__ uint32_t red[kRowLanes][kTile];
  __shared__ float sc[kTile];
  __shared__ uint8_t tile[kTile][kTile + 1];
  const int tx = threadIdx.x % kTile, ty = threadIdx.x / kTile;
  const int64_t k = src.k;
  const int64_t c0 = (int64_t)blockIdx.x * kTile;
  const int64_t c = c0 + tx;
  for (int64_t g = blockIdx.y; g <= src.G; g += gridDim.y) {
    const bool group = g < src.G;
    const int64_t gs = g ? src.pad[g - 1] : 0;
    const int64_t ge = group ? src.pad[g] : m_cap;
    if (group) {
      uint32_t a = 0;
      if (c < k)
        for (int64_t r = gs + ty; r < ge; r += kRowLanes) a = max(a, abs_bits(src.value(src.slot_in((int)g, r), c)));
      red[ty][tx] = a;
      __syncthreads();
      if (ty == 0) {
        for (int i = 1; i < kRowLanes; ++i) a = max(a, red[i][tx]);
        const float s = amax_to_scale<F>(a, pow2 != 0);
        sc[tx] = s;
        if (c < k) scales_col[g * k + c] = dequant ? dequant_scale(s) : s;
      }
      __syncthreads();
    }
    const float s = group ? sc[tx] : 0.0f;
    for (int64_t rb = gs; rb < ge; rb += kTile) {
      for (int j = 0; j < kTile / kRowLanes; ++j) {
        const int rr = ty + kRowLanes * j;
        const int64_t r = rb + rr;
        uint8_t code = 0;
        if (group && c < k && r < ge) code = (uint8_t)encode_sw<F>(src.value(src.slot_in((int)g, r), c) * s);
        tile[tx][rr] = code;
      }
      __syncthreads();
      for (int j = 0; j < kTile / kRowLanes; ++j) {
        const int cc = ty + kRowLanes * j;
        const int64_t col = c0 + cc;
        const int64_t r = rb + tx;
        if (col < k && r < ge) out_col[col * m_cap + r] = tile[cc][tx];
      }
      __syncthreads();
    }
    __syncthreads();
  }
}

template <class In>
__global__ void __launch_bounds__(kBlock) combine_kernel(const typename In::elem* y, const int32_t* rows,
                                                         const float* w, uint16_t* out, int64_t t, int64_t k,
                                                         int64_t topk, int64_t m_cap) {
  for (int64_t tok = blockIdx.x; tok < t; tok += gridDim.x) {
    for (int64_t c = threadIdx.x; c < k; c += kBlock) {
      float acc = 0.0f;
      for (int64_t s = tok * topk; s < (tok + 1) * topk; ++s) {
        const int64_t r = rows[s];
        if (r >= 0 && r < m_cap) acc = moe::add32(acc, moe::mul32(w[s], In::load1(y, r * k + c)));
      }
      out[tok * k + c] = acc != acc ? (uint16_t)0x7FC0u : (uint16_t)(f2u(moe::round_to<true>(acc)) >> 16);
    }
  }
}

template <class In>
__global__ void __launch_bounds__(kBlock) scores_kernel(const typename In::elem* dout, const typename In::elem* y,
                                                        const int32_t* rows, float* dw, int64_t t, int64_t k,
                                                        int64_t topk, int64_t m_cap) {
  __shared__ float lanes[kBlock];
  for (int64_t s = blockIdx.x; s < t * topk; s += gridDim.x) {
    const int64_t r = rows[s], tok = s / topk;
    float acc = 0.0f;
    if (r >= 0 && r < m_cap)
      for (int64_t c = threadIdx.x; c < k; c += kBlock)
        acc = moe::add32(acc, moe::mul32(In::load1(dout, tok * k + c), In::load1(y, r * k + c)));
    lanes[threadIdx.x] = acc;
    __syncthreads();
    for (int h = kBlock / 2; h > 0; h >>= 1) {
      if ((int)threadIdx.x < h) lanes[threadIdx.x] = moe::add32(lanes[threadIdx.x], lanes[threadIdx.x + h]);
      __syncthreads();
    }
    if (threadIdx.x == 0) dw[s] = lanes[0] != lanes[0] ? u2f(0x7FC00000u) : lanes[0];
    __syncthreads();
  }
}

}  // namespace route
// hipfp8-emu-end route_kernels

namespace route {

inline unsigned grid_of(int64_t n) { return (unsigned)(n < (1 << 20) ? n : (1 << 20)); }

template <class In, uint32_t F, bool W>
int dispatch(const void* x, const float* w, const int32_t* perm, const int32_t* offs, int32_t* pad,
             int32_t* slot_row, uint8_t* out, float* scales, uint8_t* out_col, float* scales_col, int64_t m,
             int64_t k, int64_t topk, int64_t G, int64_t align, int64_t m_cap, int pow2, int dequant, void* ws,
             hipStream_t st) {
  int32_t* clamped = static_cast<int32_t*>(ws);
  if (G > 0) {
    tables_kernel<<<1, kTablesBlock, 0, st>>>(offs, (int)G, m, align, clamped, pad);
    const hipError_t e = hipGetLastError();
    if (e != hipSuccess) return (int)e;
  }
  const RouteSrc<In, W> src{static_cast<const typename In::elem*>(x), w, perm, clamped, pad, (int)G, m, k, topk};
  int rc = kLaunchOk;
  if (m_cap > 0) {  // m_cap >= m: the rows cover every slot
    rows_kernel<F><<<grid_of(m_cap), kBlock, 0, st>>>(src, m_cap, slot_row, out, scales, pow2, dequant);
    rc = (int)hipGetLastError();
  }
  if (rc == kLaunchOk && (G > 0 || m_cap > 0)) {
    const int64_t tiles = (k + kTile - 1) / kTile;
    const int64_t gy = G + 1 < 65535 ? G + 1 : 65535;
    cols_kernel<F><<<dim3((unsigned)tiles, (unsigned)gy), kBlock, 0, st>>>(src, m_cap, out_col, scales_col, pow2, dequant);
    rc = (int)hipGetLastError();
  }
  const int rc2 = G > 0 ? clear_group_tables(ws, 4 * G, st) : kLaunchOk;
  return rc != kLaunchOk ? rc : rc2;
}

}  // namespace route
}  // namespace hipfp8

using namespace hipfp8;
using namespace hipfp8::route;

HIPFP8_EXTERN int hipfp8_moe_route_workspace_bytes(int64_t groups, uint64_t* bytes) noexcept {
  if (!bytes) return kLaunchNull;
  if (groups < 0) return kLaunchBadShape;
  *bytes = 4 * (uint64_t)groups;
  return kLaunchOk;
}

HIPFP8_EXTERN int hipfp8_moe_dispatch_dual_launch(const void* x, const float* weights, const int32_t* perm,
                                                  const int32_t* offs, int32_t* offs_pad, int32_t* slot_row,
                                                  uint8_t* out, float* scales, uint8_t* out_col, float* scales_col,
                                                  int64_t t, int64_t k, int64_t topk, int64_t groups, int64_t align,
                                                  int64_t m_cap, int format, int pow2, int dequant, int in_dtype, void* workspace,
                                                  hipStream_t stream) noexcept {
  if (t < 0 || k <= 0 || topk <= 0 || groups < 0 || align <= 0 || m_cap < 0) return kLaunchBadShape;
  if (groups > 0x7FFFFFFF || m_cap > 0x7FFFFFFF || t > 0x7FFFFFFF / topk) return kLaunchUnsupported;
  const int64_t m = t * topk;
  if (m_cap < m + groups * (align - 1)) return kLaunchBadShape;
  if (m_cap == 0 && groups == 0) return kLaunchOk;
  if (groups > 0 && (!offs || !offs_pad || !scales_col || !workspace)) return kLaunchNull;
  if (m > 0 && (!x || !perm || !slot_row)) return kLaunchNull;
  if (m_cap > 0 && (!out || !scales || !out_col)) return kLaunchNull;
  if (in_dtype == HIPFP8_DTYPE_BF16) {
    if (weights) { HIPFP8_DISPATCH_FMT(format, (dispatch<Bf16In, FMT, true>(x, weights, perm, offs, offs_pad, slot_row, out, scales, out_col, scales_col, m, k, topk, groups, align, m_cap, pow2, dequant, workspace, stream))); }
    HIPFP8_DISPATCH_FMT(format, (dispatch<Bf16In, FMT, false>(x, nullptr, perm, offs, offs_pad, slot_row, out, scales, out_col, scales_col, m, k, topk, groups, align, m_cap, pow2, dequant, workspace, stream)));
  }
  if (in_dtype == HIPFP8_DTYPE_F32) {
    if (weights) { HIPFP8_DISPATCH_FMT(format, (dispatch<F32In, FMT, true>(x, weights, perm, offs, offs_pad, slot_row, out, scales, out_col, scales_col, m, k, topk, groups, align, m_cap, pow2, dequant, workspace, stream))); }
    HIPFP8_DISPATCH_FMT(format, (dispatch<F32In, FMT, false>(x, nullptr, perm, offs, offs_pad, slot_row, out, scales, out_col, scales_col, m, k, topk, groups, align, m_cap, pow2, dequant, workspace, stream)));
  }
  return kLaunchBadEnum;
}

HIPFP8_EXTERN int hipfp8_moe_combine_launch(const void* y, const int32_t* slot_row, const float* weights,
                                            uint16_t* out, int64_t t, int64_t k, int64_t topk, int64_t m_cap,
                                            int in_dtype, hipStream_t stream) noexcept {
  if (t < 0 || k < 0 || topk < 0 || m_cap < 0) return kLaunchBadShape;
  if (topk > 0 && t > INT64_MAX / topk) return kLaunchUnsupported;
  if (t == 0 || k == 0) return kLaunchOk;
  if (!out || (topk > 0 && (!slot_row || !weights)) || (m_cap > 0 && !y)) return kLaunchNull;
  if (in_dtype == HIPFP8_DTYPE_BF16) {
    combine_kernel<Bf16In><<<grid_of(t), kBlock, 0, stream>>>(static_cast<const typename Bf16In::elem*>(y), slot_row, weights, out, t, k, topk, m_cap);
  } else if (in_dtype == HIPFP8_DTYPE_F32) {
    combine_kernel<F32In><<<grid_of(t), kBlock, 0, stream>>>(static_cast<const float*>(y), slot_row, weights, out, t, k, topk, m_cap);
  } else {
    return kLaunchBadEnum;
  }
  HIPFP8_RETURN_LAUNCH_STATUS();
}

HIPFP8_EXTERN int hipfp8_moe_combine_bwd_scores_launch(const void* dout, const void* y, const int32_t* slot_row,
                                                       float* dweights, int64_t t, int64_t k, int64_t topk,
                                                       int64_t m_cap, int in_dtype, hipStream_t stream) noexcept {
  if (t < 0 || k < 0 || topk < 0 || m_cap < 0) return kLaunchBadShape;
  if (topk > 0 && t > INT64_MAX / topk) return kLaunchUnsupported;
  const int64_t n = t * topk;
  if (n == 0) return kLaunchOk;
  if (!dweights || !slot_row || (k > 0 && (!dout || (m_cap > 0 && !y)))) return kLaunchNull;
  if (in_dtype == HIPFP8_DTYPE_BF16) {
    scores_kernel<Bf16In><<<grid_of(n), kBlock, 0, stream>>>(static_cast<const typename Bf16In::elem*>(dout), static_cast<const typename Bf16In::elem*>(y), slot_row, dweights, t, k, topk, m_cap);
  } else if (in_dtype == HIPFP8_DTYPE_F32) {
    scores_kernel<F32In><<<grid_of(n), kBlock, 0, stream>>>(static_cast<const float*>(dout), static_cast<const float*>(y), slot_row, dweights, t, k, topk, m_cap);
  } else {
    return kLaunchBadEnum;
  }
  HIPFP8_RETURN_LAUNCH_STATUS();
}
