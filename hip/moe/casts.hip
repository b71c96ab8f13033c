// casts.hip -- the fused MoE casts (docs/OPS.md, "Fused MoE casts"; definitions in
// src/reference/moe.rs): one launch pair per op, a row kernel (scale per row) and a column
// kernel (scale per column of a group, transposed output), both reading their input through a
// source functor that computes the element on the fly:
//   weights_dual   x (E,K,N) column-major = E*N rows of K: rows -> colwise_3d, columns of each
//                  expert's N rows -> rowwise_3d_transpose_rhs
//   act_dual       x (M,K): rows -> rowwise_2d, columns per group -> per_group_colwise
//   swiglu_quant   h = silu(gate) * up computed from gu (M, 2I): the act_dual casts of h; h is
//                  never stored
//   swiglu_bwd     [d_gate | d_up] computed from grad_h and gu: the act_dual casts of it
// Each kernel reduces its group first and casts in a second sweep over the same elements (the
// second sweep of a row is served by the cache; a column group's by L2 for groups that fit), so
// the row and column casts read the input twice each. Every code goes through encode_sw (the
// rule itself), every scale through amax_to_scale: bit-identical to the CPU reference. The
// scale outputs hold the forward scale s (codes = encode(x * s)) or, with `dequant`, the
// grouped GEMMs' dequant scale dequant_scale(s) = 1 / s; the codes are the same either way.
// Grouped launches first clamp the device offsets into the zeroed workspace
// (launch_group_tables), and zero it again after.
#include "../quant/common.h"
#include "launchers.h"
#include "swiglu.h"

namespace hipfp8 {
// hipfp8-emu-begin moe_kernels (tests/moe_emu.rs runs the kernels on the host)
namespace moe {

constexpr int kBlock = 256;
constexpr int kTile = 32;  // columns per column-kernel block, rows per transposed store tile
constexpr int kRowLanes = kBlock / kTile;

template <class In>
struct IsBf16 {
  static constexpr bool value = sizeof(typename In::elem) == 2;
};

// x[r * K + c] as read.
template <class In>
struct PlainSrc {
  const typename In::elem* x;
  int64_t K;
  __device__ float operator()(int64_t r, int64_t c) const { return In::load1(x, r * K + c); }
};

// h[r, c] of gu (rows of 2I): swiglu_h(gate, up).
template <class In>
struct SwigluSrc {
  const typename In::elem* gu;
  int64_t I;
  __device__ float operator()(int64_t r, int64_t c) const {
    const int64_t b = r * 2 * I + c;
    return swiglu_h<IsBf16<In>::value>(In::load1(gu, b), In::load1(gu, b + I));
  }
};

// [d_gate | d_up][r, c] (rows of 2I) from grad_h (rows of I) and gu.
template <class In>
struct SwigluBwdSrc {
  const typename In::elem* dh;
  const typename In::elem* gu;
  int64_t I;
  __device__ float operator()(int64_t r, int64_t c) const {
    const int64_t j = c < I ? c : c - I;
    const int64_t b = r * 2 * I + j;
    float dg, du;
    swiglu_bwd<IsBf16<In>::value>(In::load1(dh, r * I + j), In::load1(gu, b), In::load1(gu, b + I), dg, du);
    return c < I ? dg : du;
  }
};

// Rows r of K elements: scales[r] over the row, out[r * K + c].
template <uint32_t F, class S>
__global__ void __launch_bounds__(kBlock) row_kernel(S src, int64_t rows, int64_t K, uint8_t* out, float* scales,
                                                     int pow2, int dequant) {
  __shared__ uint32_t red[kBlock / HIPFP8_WAVE];
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    uint32_t a = 0;
    for (int64_t c = threadIdx.x; c < K; c += kBlock) a = max(a, abs_bits(src(r, c)));
    a = block_max<kBlock>(a, red);
    const float s = amax_to_scale<F>(a, pow2 != 0);
    if (threadIdx.x == 0) scales[r] = dequant ? dequant_scale(s) : s;
    uint8_t* o = out + r * K;
    for (int64_t c = threadIdx.x; c < K; c += kBlock) o[c] = (uint8_t)encode_sw<F>(src(r, c) * s);
  }
}

// Column groups: group g covers rows [gs, ge) (clamped END offsets, or uniform groups of
// group_rows rows when `clamped` is null); scales[g * K + c] over the group's rows of column
// c; code of (r, c) at out[c * M + r] (out_ld = M > 0) or, per group, out[gs * K + c * (ge - gs)
// + (r - gs)] (out_ld = 0: the 3D transposed layout). Block: 32 columns x 8 row lanes.
template <uint32_t F, class S>
__global__ void __launch_bounds__(kBlock) col_kernel(S src, int64_t K, const int32_t* clamped, int64_t group_rows,
                                                     int64_t G, int64_t out_ld, uint8_t* out, float* scales,
                                                     int pow2, int dequant) {
  __shared__ uint32_t red[kRowLanes][kTile];
  __shared__ float sc[kTile];
  __shared__ uint8_t tile[kTile][kTile + 1];
  const int tx = threadIdx.x % kTile, ty = threadIdx.x / kTile;
  const int64_t c0 = (int64_t)blockIdx.x * kTile;
  const int64_t c = c0 + tx;
  for (int64_t g = blockIdx.y; g < G; g += gridDim.y) {
    int64_t gs, ge;
    if (clamped) {
      gs = g ? clamped[g - 1] : 0;
      ge = clamped[g];
    } else {
      gs = g * group_rows;
      ge = gs + group_rows;
    }
    uint32_t a = 0;
    if (c < K)
      for (int64_t r = gs + ty; r < ge; r += kRowLanes) a = max(a, abs_bits(src(r, c)));
    red[ty][tx] = a;
    __syncthreads();
    if (ty == 0) {
      for (int i = 1; i < kRowLanes; ++i) a = max(a, red[i][tx]);
      const float s = amax_to_scale<F>(a, pow2 != 0);
      sc[tx] = s;
      if (c < K) scales[g * K + c] = dequant ? dequant_scale(s) : s;
    }
    __syncthreads();
    const float s = sc[tx];
    const int64_t ld = out_ld ? out_ld : ge - gs;
    uint8_t* ob = out_ld ? out : out + gs * (K - 1);
    for (int64_t rb = gs; rb < ge; rb += kTile) {
      for (int j = 0; j < kTile / kRowLanes; ++j) {
        const int rr = ty + kRowLanes * j;
        const int64_t r = rb + rr;
        tile[tx][rr] = (c < K && r < ge) ? (uint8_t)encode_sw<F>(src(r, c) * s) : 0;
      }
      __syncthreads();
      for (int j = 0; j < kTile / kRowLanes; ++j) {
        const int cc = ty + kRowLanes * j;
        const int64_t col = c0 + cc;
        const int64_t r = rb + tx;
        if (col < K && r < ge) ob[col * ld + r] = tile[cc][tx];
      }
      __syncthreads();
    }
  }
}

}  // namespace moe
// hipfp8-emu-end moe_kernels

namespace moe {

inline unsigned row_grid(int64_t rows) { return (unsigned)(rows < (1 << 20) ? rows : (1 << 20)); }

template <uint32_t F, class S>
int launch_rows(const S& src, int64_t rows, int64_t K, uint8_t* out, float* scales, int pow2, int dequant,
                hipStream_t st) {
  if (rows == 0) return kLaunchOk;
  row_kernel<F, S><<<row_grid(rows), kBlock, 0, st>>>(src, rows, K, out, scales, pow2, dequant);
  HIPFP8_RETURN_LAUNCH_STATUS();
}

template <uint32_t F, class S>
int launch_cols(const S& src, int64_t K, const int32_t* clamped, int64_t group_rows, int64_t G, int64_t out_ld,
                uint8_t* out, float* scales, int pow2, int dequant, hipStream_t st) {
  if (G == 0 || K == 0) return kLaunchOk;
  const int64_t tiles = (K + kTile - 1) / kTile;
  if (tiles > 0x7FFFFFFF) return kLaunchUnsupported;
  const dim3 grid((unsigned)tiles, (unsigned)(G < 65535 ? G : 65535));
  col_kernel<F, S><<<grid, kBlock, 0, st>>>(src, K, clamped, group_rows, G, out_ld, out, scales, pow2, dequant);
  HIPFP8_RETURN_LAUNCH_STATUS();
}

// The grouped casts of `src` (m rows of k): rows, then columns per clamped group, with the
// workspace zeroed again at the end.
template <uint32_t F, class S>
int launch_grouped(const S& src, const int32_t* offs, int64_t m, int64_t k, int64_t G, uint8_t* out, float* scales,
                   uint8_t* out_col, float* scales_col, int pow2, int dequant, void* ws, hipStream_t st) {
  int rc = launch_rows<F>(src, m, k, out, scales, pow2, dequant, st);
  if (rc != kLaunchOk || G == 0) return rc;
  int32_t* clamped = static_cast<int32_t*>(ws);
  rc = launch_group_tables(offs, G, m, clamped, nullptr, st);
  if (rc != kLaunchOk) return rc;
  rc = launch_cols<F>(src, k, clamped, 0, G, m, out_col, scales_col, pow2, dequant, st);
  const int rc2 = clear_group_tables(ws, 4 * group_tables_words(G), st);
  return rc != kLaunchOk ? rc : rc2;
}

// Argument checks shared by the grouped launchers; kLaunchOk + 1 = valid, nothing to do.
inline int check_grouped(int64_t m, int64_t k, int64_t G, const void* in, const int32_t* offs, const void* out,
                         const void* scales, const void* out_col, const void* scales_col, const void* ws) {
  if (m < 0 || k <= 0 || G < 0) return kLaunchBadShape;
  if (G > 0x7FFFFFFF) return kLaunchUnsupported;
  if (m == 0 && G == 0) return kLaunchOk + 1;
  if (G > 0 && (!offs || !scales_col || !ws || (m > 0 && !out_col))) return kLaunchNull;
  if (m > 0 && (!in || !out || !scales)) return kLaunchNull;
  return kLaunchOk;
}

}  // namespace moe
}  // namespace hipfp8

using namespace hipfp8;
using namespace hipfp8::moe;

HIPFP8_EXTERN int hipfp8_moe_workspace_bytes(int64_t groups, uint64_t* bytes) noexcept {
  if (!bytes) return kLaunchNull;
  if (groups < 0) return kLaunchBadShape;
  *bytes = 4 * (uint64_t)group_tables_words(groups);
  return kLaunchOk;
}

template <class In, uint32_t F>
static int weights_dual(const void* x, uint8_t* out, float* scales, uint8_t* out_t, float* scales_t, int64_t e,
                        int64_t k, int64_t n, int pow2, int dequant, hipStream_t st) {
  const PlainSrc<In> src{static_cast<const typename In::elem*>(x), k};
  const int rc = launch_rows<F>(src, e * n, k, out, scales, pow2, dequant, st);
  if (rc != kLaunchOk) return rc;
  return launch_cols<F>(src, k, nullptr, n, e, 0, out_t, scales_t, pow2, dequant, st);
}

HIPFP8_EXTERN int hipfp8_moe_weights_dual_launch(const void* x, uint8_t* out, float* scales, uint8_t* out_t,
                                                 float* scales_t, int64_t e, int64_t k, int64_t n, int format,
                                                 int pow2, int dequant, int in_dtype, hipStream_t stream) noexcept {
  if (e < 0 || k < 0 || n < 0) return kLaunchBadShape;
  if (e == 0) return kLaunchOk;
  if (k == 0 || n == 0) return kLaunchBadShape;
  if (!x || !out || !scales || !out_t || !scales_t) return kLaunchNull;
  const uint32_t fmt = (uint32_t)format;
  if (in_dtype == HIPFP8_DTYPE_BF16) { HIPFP8_DISPATCH_FMT(fmt, (weights_dual<Bf16In, FMT>(x, out, scales, out_t, scales_t, e, k, n, pow2, dequant, stream))); }
  if (in_dtype == HIPFP8_DTYPE_F32) { HIPFP8_DISPATCH_FMT(fmt, (weights_dual<F32In, FMT>(x, out, scales, out_t, scales_t, e, k, n, pow2, dequant, stream))); }
  return kLaunchBadEnum;
}

template <class In, uint32_t F>
static int act_dual(const void* x, const int32_t* offs, uint8_t* out, float* scales, uint8_t* out_col,
                    float* scales_col, int64_t m, int64_t k, int64_t G, int pow2, int dequant, void* ws,
                    hipStream_t st) {
  const PlainSrc<In> src{static_cast<const typename In::elem*>(x), k};
  return launch_grouped<F>(src, offs, m, k, G, out, scales, out_col, scales_col, pow2, dequant, ws, st);
}

HIPFP8_EXTERN int hipfp8_moe_act_dual_launch(const void* x, const int32_t* offs, uint8_t* out, float* scales,
                                             uint8_t* out_col, float* scales_col, int64_t m, int64_t k, int64_t groups,
                                             int format, int pow2, int dequant, int in_dtype, void* workspace,
                                             hipStream_t stream) noexcept {
  const int chk = check_grouped(m, k, groups, x, offs, out, scales, out_col, scales_col, workspace);
  if (chk != kLaunchOk) return chk == kLaunchOk + 1 ? kLaunchOk : chk;
  const uint32_t fmt = (uint32_t)format;
  if (in_dtype == HIPFP8_DTYPE_BF16) { HIPFP8_DISPATCH_FMT(fmt, (act_dual<Bf16In, FMT>(x, offs, out, scales, out_col, scales_col, m, k, groups, pow2, dequant, workspace, stream))); }
  if (in_dtype == HIPFP8_DTYPE_F32) { HIPFP8_DISPATCH_FMT(fmt, (act_dual<F32In, FMT>(x, offs, out, scales, out_col, scales_col, m, k, groups, pow2, dequant, workspace, stream))); }
  return kLaunchBadEnum;
}

template <class In, uint32_t F>
static int swiglu_quant(const void* gu, const int32_t* offs, uint8_t* out, float* scales, uint8_t* out_col,
                        float* scales_col, int64_t m, int64_t i, int64_t G, int pow2, int dequant, void* ws,
                        hipStream_t st) {
  const SwigluSrc<In> src{static_cast<const typename In::elem*>(gu), i};
  return launch_grouped<F>(src, offs, m, i, G, out, scales, out_col, scales_col, pow2, dequant, ws, st);
}

HIPFP8_EXTERN int hipfp8_moe_swiglu_quant_launch(const void* gu, const int32_t* offs, uint8_t* out, float* scales,
                                                 uint8_t* out_col, float* scales_col, int64_t m, int64_t i,
                                                 int64_t groups, int format, int pow2, int dequant, int in_dtype,
                                                 void* workspace, hipStream_t stream) noexcept {
  const int chk = check_grouped(m, i, groups, gu, offs, out, scales, out_col, scales_col, workspace);
  if (chk != kLaunchOk) return chk == kLaunchOk + 1 ? kLaunchOk : chk;
  const uint32_t fmt = (uint32_t)format;
  if (in_dtype == HIPFP8_DTYPE_BF16) { HIPFP8_DISPATCH_FMT(fmt, (swiglu_quant<Bf16In, FMT>(gu, offs, out, scales, out_col, scales_col, m, i, groups, pow2, dequant, workspace, stream))); }
  if (in_dtype == HIPFP8_DTYPE_F32) { HIPFP8_DISPATCH_FMT(fmt, (swiglu_quant<F32In, FMT>(gu, offs, out, scales, out_col, scales_col, m, i, groups, pow2, dequant, workspace, stream))); }
  return kLaunchBadEnum;
}

template <class In, uint32_t F>
static int swiglu_bwd_quant(const void* dh, const void* gu, const int32_t* offs, uint8_t* out, float* scales,
                            uint8_t* out_col, float* scales_col, int64_t m, int64_t i, int64_t G, int pow2,
                            int dequant, void* ws, hipStream_t st) {
  typedef typename In::elem E;
  const SwigluBwdSrc<In> src{static_cast<const E*>(dh), static_cast<const E*>(gu), i};
  return launch_grouped<F>(src, offs, m, 2 * i, G, out, scales, out_col, scales_col, pow2, dequant, ws, st);
}

HIPFP8_EXTERN int hipfp8_moe_swiglu_bwd_quant_launch(const void* grad_h, const void* gu, const int32_t* offs,
                                                     uint8_t* out, float* scales, uint8_t* out_col, float* scales_col,
                                                     int64_t m, int64_t i, int64_t groups, int format, int pow2,
                                                     int dequant, int in_dtype, void* workspace,
                                                     hipStream_t stream) noexcept {
  if (i > (int64_t(1) << 61)) return kLaunchBadShape;
  const int chk = check_grouped(m, 2 * i, groups, gu, offs, out, scales, out_col, scales_col, workspace);
  if (chk != kLaunchOk) return chk == kLaunchOk + 1 ? kLaunchOk : chk;
  if (m > 0 && !grad_h) return kLaunchNull;
  const uint32_t fmt = (uint32_t)format;
  if (in_dtype == HIPFP8_DTYPE_BF16) { HIPFP8_DISPATCH_FMT(fmt, (swiglu_bwd_quant<Bf16In, FMT>(grad_h, gu, offs, out, scales, out_col, scales_col, m, i, groups, pow2, dequant, workspace, stream))); }
  if (in_dtype == HIPFP8_DTYPE_F32) { HIPFP8_DISPATCH_FMT(fmt, (swiglu_bwd_quant<F32In, FMT>(grad_h, gu, offs, out, scales, out_col, scales_col, m, i, groups, pow2, dequant, workspace, stream))); }
  return kLaunchBadEnum;
}
