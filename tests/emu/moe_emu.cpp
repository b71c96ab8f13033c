// The fused MoE cast kernels (hip/moe/casts.hip, between the `hipfp8-emu-begin moe_kernels`
// markers) on the host: tests/emu/quant_port_emu.h runs their blocks as std::threads with
// emulated wavefront shuffles, over clamped offsets made by the group-tables kernel (itself
// emulated), with grids smaller than the work so the grid-stride loops run too. Reads the
// inputs tests/moe_emu.rs wrote, writes the four outputs for it to compare with the CPU
// reference. Usage:
//   moe_emu OP FMT POW2 DEQUANT BF16 D0 D1 D2 G GRID_ROWS GRID_GROUPS TINY M_CAP SPLIT RPT DIR
// OP: 0 weights_dual (E=D0, K=D1, N=D2; input x), 1 act_dual (M=D0, K=D1; x, offs),
// 2 swiglu_quant (M=D0, I=D1; gu, offs), 3 swiglu_bwd_quant (M=D0, I=D1; dh, gu, offs),
// 4 weights_dual of x read as two weights stacked along n per expert (each expert's first
// D2/2 rows of K copied to one buffer, the others to another: the pair source).
// TINY 1: the row casts run a 32-thread, one-chunk-per-thread instance (the re-read path of
// rows longer than the registers hold); 0: the launcher's instance (row_cfg).
// M_CAP > 0 (ops 1-3): the column output in the padded layout of M_CAP rows, its padded END
// offsets written to pend.bin. SPLIT > 0: the fused pass (the row kernel merging the column
// amax, col_codes_kernel with SPLIT blocks per group, col_scale_kernel) where the launcher takes
// it (the whole row in the row kernel's registers), as launch_fused runs it, its codes kernel
// with RPT (4, 8 or 16, at most the source's ColRpt) rows per thread; 0: col_kernel.
// DIR holds x.bin / gu.bin / dh.bin / offs.bin and receives out.bin, scales.bin, out2.bin,
// scales2.bin (each output buffer pre-filled with the sentinels 0xA5 / -12345.5).
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "emu_io.h"

#include "quant/common.h"
#include "quant/policy.h"
#include "moe/swiglu.h"
#include "group_tables.inc"
#include "moe_kernels.inc"

using namespace hipfp8;
using namespace hipfp8::moe;

struct Args {
  int op, pow2, dequant, tiny;
  int64_t d0, d1, d2, G, m_cap, split;
  int rpt;
  unsigned grid_rows, grid_groups;
  std::string dir;
};

// The launcher's row kernel instance (row_cfg, vec_ok), or with TINY a 32-thread block holding one
// chunk per thread (rows past 256 source columns take the re-read path); CAM: with the fused
// column amax into ca.
template <uint32_t F, class S, int B, int V, bool CAM>
void rows_inst(const Args& a, const S& src, int64_t n, bool vec, uint8_t* out, float* sc, const ColAmax& ca) {
  emu_launch_waves(a.grid_rows, B, [&] {
    if (vec) row_kernel<F, S, B, V, true, CAM>(src, n, out, sc, a.pow2, a.dequant, ca);
    else row_kernel<F, S, B, V, false, CAM>(src, n, out, sc, a.pow2, a.dequant, ca);
  });
}

template <uint32_t F, class S, bool CAM>
void rows(const Args& a, const S& src, int64_t n, uint8_t* out, float* sc, const ColAmax& ca = ColAmax{}) {
  if (n == 0) return;
  const bool vec = vec_ok(src, out);
  if (a.tiny) return rows_inst<F, S, 32, 1, CAM>(a, src, n, vec, out, sc, ca);
  const int64_t nch = (src.J + kChunk - 1) / kChunk;
  with_index<S::COMPUTED ? 3 : 4>(row_cfg<S>(nch), [&](auto ci) {
    rows_inst<F, S, kRowBlocks[decltype(ci)::value], RowVpt<S>::value, CAM>(a, src, n, vec, out, sc, ca);
  });
}

// Both casts of n source rows in G groups (clamped END offsets cl, or uniform groups of
// group_rows rows): with SPLIT > 0 and the row in the row kernel's registers (the launcher's
// fused_cols rule; TINY: 32 chunks), the fused pass as launch_fused runs it (row kernel with the
// column amax, col_codes_kernel with SPLIT blocks per group, col_scale_kernel); else the row
// kernel, then col_kernel.
template <uint32_t F, class S>
void casts(const Args& a, const S& src, int64_t n, const int32_t* cl, int64_t group_rows, int64_t G,
           const int32_t* pend, int64_t out_ld, uint8_t* out, float* sc, uint8_t* out2, float* sc2) {
  const int64_t nch = (src.J + kChunk - 1) / kChunk;
  const int64_t hold = a.tiny ? 32 : row_hold<S>();
  const bool vec = src.J % kChunk == 0 && src.aligned();
  const dim3 grid((unsigned)((src.J + kColTile - 1) / kColTile), a.grid_groups);
  if (a.split > 0 && G > 0 && nch <= hold) {
    const int64_t nsc = G * S::NOUT * src.J;
    std::fill(sc2, sc2 + nsc, 0.0f);
    uint32_t* amax = reinterpret_cast<uint32_t*>(sc2);
    rows<F, S, true>(a, src, n, out, sc, ColAmax{cl, group_rows, G, amax});
    with_codes_rpt<S>(a.rpt, [&](auto ri) {
      constexpr int R = decltype(ri)::value;
      emu_launch(dim3(grid.x, grid.y, (unsigned)a.split), kBlock, [&] {
        if (vec) col_codes_kernel<F, S, true, R>(src, cl, pend, group_rows, G, out_ld, out2, amax, a.pow2);
        else col_codes_kernel<F, S, false, R>(src, cl, pend, group_rows, G, out_ld, out2, amax, a.pow2);
      });
    });
    emu_launch(dim3(2), kBlock, [&] { col_scale_kernel<F>(sc2, nsc, a.pow2, a.dequant); });
    return;
  }
  rows<F, S, false>(a, src, n, out, sc);
  if (G == 0) return;
  emu_launch(grid, kBlock, [&] {
    if (vec) col_kernel<F, S, true>(src, cl, pend, group_rows, G, out_ld, out2, sc2, a.pow2, a.dequant);
    else col_kernel<F, S, false>(src, cl, pend, group_rows, G, out_ld, out2, sc2, a.pow2, a.dequant);
  });
}

template <class In, uint32_t F>
int run(const Args& a) {
  typedef typename In::elem E;
  const std::vector<E> x = read_file<E>(a.dir + "/x.bin"), gu = read_file<E>(a.dir + "/gu.bin"),
                       dh = read_file<E>(a.dir + "/dh.bin");
  const std::vector<int32_t> offs = read_file<int32_t>(a.dir + "/offs.bin");
  std::vector<int32_t> cl(offs.size() + 1), pend(offs.size() + 1, -7);
  int32_t* pd = a.m_cap ? pend.data() : nullptr;
  const int64_t ld = a.m_cap ? a.m_cap : a.d0;
  if (a.op != 0 && a.G > 0)
    emu_launch(dim3(1), kTablesBlock, [&] { group_tables_kernel(offs.data(), a.G, a.d0, cl.data(), pd); });
  int64_t n_out, n_sc, n_out2, n_sc2;
  if (a.op == 0 || a.op == 4) {
    n_out = n_out2 = a.d0 * a.d1 * a.d2;
    n_sc = a.d0 * a.d2;
    n_sc2 = a.d0 * a.d1;
  } else {
    const int64_t w = a.op == 3 ? 2 * a.d1 : a.d1;
    n_out = a.d0 * w;
    n_out2 = ld * w;
    n_sc = a.d0;
    n_sc2 = a.G * w;
  }
  std::vector<uint8_t> out(n_out + 7, 0xA5), out2(n_out2 + 7, 0xA5);
  std::vector<float> sc(n_sc + 7, -12345.5f), sc2(n_sc2 + 7, -12345.5f);
  switch (a.op) {
    case 0: {
      const PlainSrc<In> s{x.data(), a.d1};
      casts<F>(a, s, a.d0 * a.d2, nullptr, a.d2, a.d0, nullptr, 0, out.data(), sc.data(), out2.data(), sc2.data());
      break;
    }
    case 1: {
      const PlainSrc<In> s{x.data(), a.d1};
      casts<F>(a, s, a.d0, cl.data(), 0, a.G, pd, ld, out.data(), sc.data(), out2.data(), sc2.data());
      break;
    }
    case 2: {
      const SwigluSrc<In> s{gu.data(), a.d1};
      casts<F>(a, s, a.d0, cl.data(), 0, a.G, pd, ld, out.data(), sc.data(), out2.data(), sc2.data());
      break;
    }
    case 3: {
      const SwigluBwdSrc<In> s{dh.data(), gu.data(), a.d1};
      casts<F>(a, s, a.d0, cl.data(), 0, a.G, pd, ld, out.data(), sc.data(), out2.data(), sc2.data());
      break;
    }
    case 4: {
      const int64_t n0 = a.d2 / 2, n1 = a.d2 - n0;
      std::vector<E> x0, x1;
      for (int64_t e = 0; e < a.d0; ++e) {
        const E* w = x.data() + e * a.d2 * a.d1;
        x0.insert(x0.end(), w, w + n0 * a.d1);
        x1.insert(x1.end(), w + n0 * a.d1, w + a.d2 * a.d1);
      }
      const PlainSrc<In> s{x0.data(), a.d1, x1.data(), n0, n1};
      casts<F>(a, s, a.d0 * a.d2, nullptr, a.d2, a.d0, nullptr, 0, out.data(), sc.data(), out2.data(), sc2.data());
      break;
    }
    default:
      return 2;
  }
  write_file(a.dir + "/out.bin", out);
  write_file(a.dir + "/scales.bin", sc);
  write_file(a.dir + "/out2.bin", out2);
  write_file(a.dir + "/scales2.bin", sc2);
  if (pd) write_file(a.dir + "/pend.bin", std::vector<int32_t>(pend.begin(), pend.begin() + a.G));
  return 0;
}

template <class In>
int run_fmt(const Args& a, int fmt) {
  switch (fmt) {
    case 0: return run<In, kE4M3Fn>(a);
    case 1: return run<In, kE5M2>(a);
    case 2: return run<In, kE4M3FnUz>(a);
    case 3: return run<In, kE5M2FnUz>(a);
  }
  return 2;
}

int main(int argc, char** argv) {
  if (argc != 17) {
    std::fprintf(stderr,
                 "usage: moe_emu OP FMT POW2 DEQUANT BF16 D0 D1 D2 G GRID_ROWS GRID_GROUPS TINY M_CAP SPLIT RPT DIR\n");
    return 2;
  }
  Args a;
  a.op = std::atoi(argv[1]);
  const int fmt = std::atoi(argv[2]);
  a.pow2 = std::atoi(argv[3]);
  a.dequant = std::atoi(argv[4]);
  const bool bf16 = std::atoi(argv[5]) != 0;
  a.d0 = std::atoll(argv[6]);
  a.d1 = std::atoll(argv[7]);
  a.d2 = std::atoll(argv[8]);
  a.G = std::atoll(argv[9]);
  a.grid_rows = (unsigned)std::atoi(argv[10]);
  a.grid_groups = (unsigned)std::atoi(argv[11]);
  a.tiny = std::atoi(argv[12]);
  a.m_cap = std::atoll(argv[13]);
  a.split = std::atoll(argv[14]);
  a.rpt = std::atoi(argv[15]);
  a.dir = argv[16];
  return bf16 ? run_fmt<Bf16In>(a, fmt) : run_fmt<F32In>(a, fmt);
}
