// group_args.h -- the per-group arguments of hipfp8's grouped GEMMs, as pure functions.
//
// Plain C++ (no runtime calls, no vendor types): the CK and CUTLASS argument-building
// kernels call these on the device, one thread per group, and tests/emu/group_args_test.cpp
// calls them on the host (run by `cargo test`, tests/grouped_gemm_args.rs). So the
// arithmetic that turns device offsets into per-group problems is tested on any machine.
//
// Both ops are K-major ("TN") products per group (docs/OPS.md):
//   2D x 3D: group g = rows [lo, hi) of a (M,K) and out (M,N); B = b[g] (N x K):
//            rows = hi - lo, cols = N, red = K.
//   2D x 2D: group g = reduction range [lo, hi) of a (N,Mt) and b (K x Mt); out[g] (N x K):
//            rows = N, cols = K, red = hi - lo.
// Offsets are clamped exactly as OPS.md says: o[g] = min(max(o[g], o[g-1]), extent).
#pragma once

#include <stdint.h>

#if defined(__CUDACC__) || defined(__HIPCC__)
#define HIPFP8_HD __host__ __device__
#else
#define HIPFP8_HD
#endif

namespace hipfp8_gg {

// One group's problem: element offsets from the operands' base pointers, leading dimensions
// (elements), extents, and whether a vendor library (TMA / vector loads) can take it.
struct Group {
  int64_t rows, cols, red;
  int64_t a_off, b_off, out_off;  // element offsets into a, b, out
  int64_t sa_off, sb_off;         // element offsets into scale_a, scale_b
  int64_t lda, ldb, ldo;
  int32_t vendor_ok;              // 1: give it to CK/CUTLASS; 0: the reference kernel does it
  int32_t staged;                 // 1: a_off / b_off index the staged copies (ld = mt_pad)
};

// Clamped [lo, hi) of group g (walks offs[0..=g]; groups number in the tens).
HIPFP8_HD inline void clamped_range(const int32_t* offs, int g, int64_t extent, int64_t* lo,
                                    int64_t* hi) {
  int64_t a = 0, b = 0;
  for (int h = 0; h <= g; ++h) {
    a = b;
    int64_t o = (int64_t)offs[h];
    o = o < a ? a : o;
    b = o > extent ? extent : o;
  }
  *lo = a;
  *hi = b;
}

// 2D x 3D group g over rows [lo, hi). Vendor kernels take every group here: the host checks
// the whole-call alignment rules (K % 16, N % 8) once, and row starts lo*K stay aligned.
HIPFP8_HD inline Group group_2d3d(int g, int64_t lo, int64_t hi, int64_t N, int64_t K) {
  Group r;
  r.rows = hi - lo;
  r.cols = N;
  r.red = K;
  r.a_off = lo * K;
  r.b_off = (int64_t)g * N * K;
  r.out_off = lo * N;
  r.sa_off = lo;
  r.sb_off = (int64_t)g * N;
  r.lda = K;
  r.ldb = K;
  r.ldo = N;
  r.vendor_ok = 1;
  r.staged = 0;
  return r;
}

// Blockwise-scaled 2D x 3D group g (docs/OPS.md grouped_gemm_blockwise_2d3d): group_2d3d's
// operands with the scale grids of the group: sa (M, K/128) row-major from row lo, sb
// (E, N/128, K/128) row-major from expert g (N % 128 == 0 and K % 128 == 0: the vendor
// launchers' rule; the offsets then index whole rows of each grid).
HIPFP8_HD inline Group group_bw_2d3d(int g, int64_t lo, int64_t hi, int64_t N, int64_t K) {
  Group r = group_2d3d(g, lo, hi, N, K);
  r.sa_off = lo * (K / 128);
  r.sb_off = (int64_t)g * (N / 128) * (K / 128);
  return r;
}

// 2D x 2D group g over the reduction range [lo, hi). A vendor kernel may take the group when
// the range is not empty (CK and CUTLASS would see K = 0 and skip it, leaving garbage where
// OPS.md wants zeros), its start is a multiple of `align_start` elements (CK's 16-byte vector
// loads; CUTLASS's TMA needs a 16-byte aligned base, so 16 there too), its length a multiple of `align_len` (CK's
// vector loads along K; CUTLASS's TMA zero-fills the tail, so 1 there) and at least
// `min_len` (CK's pipeline needs more K blocks than it prefetches).
HIPFP8_HD inline Group group_2d2d(int g, int64_t lo, int64_t hi, int64_t N, int64_t Mt,
                                  int64_t K, int64_t align_start, int64_t align_len,
                                  int64_t min_len = 1) {
  Group r;
  r.rows = N;
  r.cols = K;
  r.red = hi - lo;
  r.a_off = lo;
  r.b_off = lo;
  r.out_off = (int64_t)g * N * K;
  r.sa_off = (int64_t)g * N;
  r.sb_off = (int64_t)g * K;
  r.lda = Mt;
  r.ldb = Mt;
  r.ldo = K;
  r.vendor_ok =
      (r.red > 0 && r.red >= min_len && lo % align_start == 0 && r.red % align_len == 0) ? 1 : 0;
  r.staged = 0;
  return r;
}

// ---- 2D x 2D groups off a 16-token boundary: staged copies (docs/OPS.md "Any group start") --
//
// The staged layout keeps the padded position of EVERY group (the layout of `pad_wgrad`):
// group g's staged copy starts at ps_g = sum_{h<g} round_up(len_h, 16) of a staging area of
// mt_pad >= Mt + 15 * groups columns, but only the groups `stage_2d2d` selects are copied
// (hip/grouped_gemm/stage.hip); every other group is read in place or by the reference kernel.
// The staging kernel and the argument builders both decide per group with `stage_2d2d`, from
// the same clamped offsets, so a builder points at a staged copy exactly when it was written.

// Token alignment of a group start a library reads in place (and of every staged start).
constexpr int64_t kStageAlign = 16;

HIPFP8_HD inline int64_t padded_len(int64_t len) {
  return (len + kStageAlign - 1) / kStageAlign * kStageAlign;
}

// Clamped [lo, hi) of group g, as clamped_range, and its padded start
// ps = sum_{h<g} round_up(len_h, 16) over the clamped lengths (one walk).
HIPFP8_HD inline void clamped_padded_range(const int32_t* offs, int g, int64_t extent,
                                           int64_t* lo, int64_t* hi, int64_t* ps) {
  int64_t a = 0, b = 0, p = 0;
  for (int h = 0; h <= g; ++h) {
    p += padded_len(b - a);
    a = b;
    int64_t o = (int64_t)offs[h];
    o = o < a ? a : o;
    b = o > extent ? extent : o;
  }
  *lo = a;
  *hi = b;
  *ps = p;
}

// Whether the library reads 2D x 2D group [lo, hi) from its staged copy: the group is not
// empty, a library can't take it in place (start off a 16-token boundary, or a length the
// library's loads can't take: `align_len`) and can take its padded copy (padded length a
// multiple of align_len, at least `min_len`). align_len, min_len as for group_2d2d with
// align_start = 16: CUTLASS (1, 1), CK (16, its pipeline minimum). Groups it rejects cost the
// staging kernel nothing but the offsets.
HIPFP8_HD inline bool stage_2d2d(int64_t lo, int64_t hi, int64_t align_len, int64_t min_len) {
  const int64_t len = hi - lo;
  if (len <= 0) return false;
  const bool in_place = len >= min_len && lo % kStageAlign == 0 && len % align_len == 0;
  const int64_t p = padded_len(len);
  return !in_place && p >= min_len && p % align_len == 0;
}

// The 2D x 2D library launchers' check of their staging arguments (host side): none (both
// pointers null), or both 16-byte aligned with mt_pad % 16 == 0 and
// Mt + 15 * groups <= mt_pad <= INT32_MAX (room for every group's padded position).
inline bool staging_args_ok(const void* staged_a, const void* staged_b, int64_t Mt,
                            int64_t mt_pad, int groups) {
  if (staged_a == nullptr && staged_b == nullptr) return true;
  const bool aligned = ((uintptr_t)staged_a & 15) == 0 && ((uintptr_t)staged_b & 15) == 0;
  return staged_a != nullptr && staged_b != nullptr && aligned && mt_pad % 16 == 0 &&
         groups >= 0 && Mt >= 0 && Mt + 15 * (int64_t)groups <= mt_pad && mt_pad <= INT32_MAX;
}

// group_2d2d with staging: a group `stage_2d2d` selects reads its staged copy (offsets
// ps into staged_a (N, mt_pad) / staged_b (K, mt_pad), reduction length round_up(len, 16): the
// padded layout's group, whose tail is zeros), every other group is group_2d2d's
// (align_start = 16): in place, or the reference kernel's. `ps` from clamped_padded_range.
HIPFP8_HD inline Group group_2d2d_staged(int g, int64_t lo, int64_t hi, int64_t ps, int64_t N,
                                         int64_t Mt, int64_t K, int64_t mt_pad,
                                         int64_t align_len, int64_t min_len = 1) {
  Group r = group_2d2d(g, lo, hi, N, Mt, K, kStageAlign, align_len, min_len);
  if (stage_2d2d(lo, hi, align_len, min_len)) {
    r.red = padded_len(hi - lo);
    r.a_off = ps;
    r.b_off = ps;
    r.lda = mt_pad;
    r.ldb = mt_pad;
    r.vendor_ok = 1;
    r.staged = 1;
  }
  return r;
}

// Composable Kernel's device-side argument of one group
// (ck::tensor_operation::device::GroupedGemmKernelArgument<2>, header
// device_grouped_gemm.hpp); the CK translation units static_assert that the layouts agree.
// Ds: D0 = per-column scale (scale_b), layout Row with stride 0; D1 = per-row scale
// (scale_a), layout Col with stride 0. E = c * d0 * d1 (MultiplyMultiply).
struct CkArg {
  const void* p_a;
  const void* p_b;
  const void* p_ds[2];
  void* p_e;
  int32_t M, N, K;
  int32_t stride_a, stride_b;
  int32_t stride_ds[2];
  int32_t stride_e;
};

// CK argument of a group; a group the vendor kernel must not take gets M = 0, which CK's
// tile loop skips (no tiles). A staged group reads staged_a / staged_b (group_2d2d_staged).
HIPFP8_HD inline CkArg ck_arg(const Group& gr, const uint8_t* a, const uint8_t* b,
                              const float* sa, const float* sb, uint16_t* out,
                              const uint8_t* staged_a = nullptr,
                              const uint8_t* staged_b = nullptr) {
  CkArg r;
  r.p_a = (gr.staged ? staged_a : a) + gr.a_off;
  r.p_b = (gr.staged ? staged_b : b) + gr.b_off;
  r.p_ds[0] = sb + gr.sb_off;
  r.p_ds[1] = sa + gr.sa_off;
  r.p_e = out + gr.out_off;
  r.M = gr.vendor_ok ? (int32_t)gr.rows : 0;
  r.N = (int32_t)gr.cols;
  r.K = (int32_t)gr.red;
  r.stride_a = (int32_t)gr.lda;
  r.stride_b = (int32_t)gr.ldb;
  r.stride_ds[0] = 0;
  r.stride_ds[1] = 0;
  r.stride_e = (int32_t)gr.ldo;
  return r;
}

}  // namespace hipfp8_gg
