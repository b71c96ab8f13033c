// The MoE routing kernels (hip/route/route.hip, between the `hipfp8-emu-begin route_kernels`
// markers) on the host: tests/emu/quant_port_emu.h runs their blocks as std::threads with
// emulated wavefront shuffles, in the order the launchers of route.hip queue them, with grids
// smaller than the work so the grid-stride loops run too. Reads the inputs tests/route_emu.rs
// wrote, writes the outputs for it to compare with the CPU reference (src/reference/route.rs).
// Usage:
//   route_emu OP FMT POW2 DEQUANT BF16 WEIGHTED T K TOPK G ALIGN M_CAP GRID_X GRID_Y DIR
// OP: 0 dispatch_dual (x.bin, w.bin, perm.bin, offs.bin -> offs_pad.bin, slot_row.bin, out.bin,
// scales.bin, out_col.bin, scales_col.bin), 1 combine (y.bin, rows.bin, w.bin -> comb.bin),
// 2 combine_bwd_scores (dout.bin, y.bin, rows.bin -> dw.bin). Output buffers are pre-filled
// with the sentinels 0xA5 / -12345.5 / -7 (0xA5A5 for bf16).
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <cstring>
#include <vector>

#include "emu_io.h"

#include "quant/common.h"
#include "moe/swiglu.h"

#include "route_kernels.inc"

using namespace hipfp8;
using namespace hipfp8::route;

struct Args {
  int op, pow2, dequant, weighted;
  int64_t t, k, topk, G, align, m_cap;
  unsigned gx, gy;
  std::string dir;
};

// route.hip's `dispatch_vec`: zero scales_col, rows, columns.
template <class In, uint32_t F, bool W, bool VEC>
void dispatch_vec(const Args& a, const RouteSrc<In, W>& src, std::vector<int32_t>& slot_row, std::vector<uint8_t>& out,
                  std::vector<float>& sc, std::vector<uint8_t>& out_col, std::vector<float>& sc_col) {
  const int64_t mc = a.m_cap, k = a.k, G = a.G;
  for (int64_t i = 0; i < G * k; ++i) sc_col[i] = 0.0f;
  uint32_t* am = reinterpret_cast<uint32_t*>(sc_col.data());
  if (mc > 0)
    emu_launch_waves(dim3(a.gx), kBlock, [&] {
      rows_kernel<In, F, W, VEC>(src, mc, slot_row.data(), out.data(), sc.data(), am, a.pow2, a.dequant);
    });
  // The column kernel in both step sizes the launcher has (one pass per step, and four, the
  // built-in): the same bytes, or the harness fails.
  std::vector<uint8_t> out_col1 = out_col;
  std::vector<float> sc_col1 = sc_col;
  const unsigned tiles = (unsigned)((k + kColLanes * In::EPV - 1) / (kColLanes * In::EPV));
  const dim3 grid(a.gy, tiles < a.gx ? tiles : a.gx);  // x: groups, y: column tiles (as the launcher)
  emu_launch_waves(grid, kBlock, [&] {
    cols_kernel<In, F, W, VEC, 4>(src, mc, out_col.data(), sc_col.data(), a.pow2, a.dequant);
  });
  emu_launch_waves(grid, kBlock, [&] {
    cols_kernel<In, F, W, VEC, 1>(src, mc, out_col1.data(), sc_col1.data(), a.pow2, a.dequant);
  });
  if (out_col != out_col1 || memcmp(sc_col.data(), sc_col1.data(), sc_col.size() * sizeof(float)) != 0) {
    fprintf(stderr, "cols_kernel: one pass per step and four differ\n");
    exit(3);
  }
}

// hipfp8_moe_dispatch_dual_launch's sequence (route.hip's `dispatch`).
template <class In, uint32_t F, bool W>
int dispatch_emu(const Args& a) {
  typedef typename In::elem E;
  const int64_t m = a.t * a.topk, mc = a.m_cap, k = a.k, G = a.G;
  const std::vector<E> x = read_file<E>(a.dir + "/x.bin");
  const std::vector<float> w = read_file<float>(a.dir + "/w.bin");
  const std::vector<int32_t> perm = read_file<int32_t>(a.dir + "/perm.bin"), offs = read_file<int32_t>(a.dir + "/offs.bin");
  std::vector<int32_t> ws(G + 1, 0), pad(G + 7, -7), slot_row(m + 7, -7);
  std::vector<uint8_t> out(mc * k + 7, 0xA5), out_col(mc * k + 7, 0xA5);
  std::vector<float> sc(mc + 7, -12345.5f), sc_col(G * k + 7, -12345.5f);
  if (G > 0) emu_launch_waves(dim3(1), kTablesBlock, [&] { tables_kernel(offs.data(), (int)G, m, a.align, ws.data(), pad.data()); });
  const RouteSrc<In, W> src{x.data(), W ? w.data() : nullptr, perm.data(), ws.data(), pad.data(), (int)G, m, k, a.topk};
  if (k % In::EPV == 0) {
    dispatch_vec<In, F, W, true>(a, src, slot_row, out, sc, out_col, sc_col);
  } else {
    dispatch_vec<In, F, W, false>(a, src, slot_row, out, sc, out_col, sc_col);
  }
  write_file(a.dir + "/offs_pad.bin", pad);
  write_file(a.dir + "/slot_row.bin", slot_row);
  write_file(a.dir + "/out.bin", out);
  write_file(a.dir + "/scales.bin", sc);
  write_file(a.dir + "/out_col.bin", out_col);
  write_file(a.dir + "/scales_col.bin", sc_col);
  return 0;
}

template <class In>
int combine_emu(const Args& a) {
  typedef typename In::elem E;
  const std::vector<E> y = read_file<E>(a.dir + "/y.bin");
  const std::vector<int32_t> rows = read_file<int32_t>(a.dir + "/rows.bin");
  const std::vector<float> w = read_file<float>(a.dir + "/w.bin");
  std::vector<uint16_t> out(a.t * a.k + 7, 0xA5A5);
  if (a.t > 0 && a.k > 0)
    emu_launch_waves(dim3(a.gx), kBlock, [&] {
      if (a.k % In::EPV == 0)
        combine_kernel<In, true>(y.data(), rows.data(), w.data(), out.data(), a.t, a.k, a.topk, a.m_cap);
      else
        combine_kernel<In, false>(y.data(), rows.data(), w.data(), out.data(), a.t, a.k, a.topk, a.m_cap);
    });
  write_file(a.dir + "/comb.bin", out);
  return 0;
}

template <class In>
int scores_emu(const Args& a) {
  typedef typename In::elem E;
  const std::vector<E> dout = read_file<E>(a.dir + "/dout.bin"), y = read_file<E>(a.dir + "/y.bin");
  const std::vector<int32_t> rows = read_file<int32_t>(a.dir + "/rows.bin");
  std::vector<float> dw(a.t * a.topk + 7, -12345.5f);
  if (a.t * a.topk > 0)
    emu_launch_waves(dim3(a.gx), kBlock, [&] {
      if (a.k % In::EPV == 0)
        scores_kernel<In, true>(dout.data(), y.data(), rows.data(), dw.data(), a.t, a.k, a.topk, a.m_cap);
      else
        scores_kernel<In, false>(dout.data(), y.data(), rows.data(), dw.data(), a.t, a.k, a.topk, a.m_cap);
    });
  write_file(a.dir + "/dw.bin", dw);
  return 0;
}

template <class In, uint32_t F>
int run(const Args& a) {
  switch (a.op) {
    case 0: return a.weighted ? dispatch_emu<In, F, true>(a) : dispatch_emu<In, F, false>(a);
    case 1: return combine_emu<In>(a);
    case 2: return scores_emu<In>(a);
  }
  return 2;
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
  if (argc != 16) {
    std::fprintf(stderr, "usage: route_emu OP FMT POW2 DEQUANT BF16 WEIGHTED T K TOPK G ALIGN M_CAP GRID_X GRID_Y DIR\n");
    return 2;
  }
  Args a;
  a.op = std::atoi(argv[1]);
  const int fmt = std::atoi(argv[2]);
  a.pow2 = std::atoi(argv[3]);
  a.dequant = std::atoi(argv[4]);
  const bool bf16 = std::atoi(argv[5]) != 0;
  a.weighted = std::atoi(argv[6]);
  a.t = std::atoll(argv[7]);
  a.k = std::atoll(argv[8]);
  a.topk = std::atoll(argv[9]);
  a.G = std::atoll(argv[10]);
  a.align = std::atoll(argv[11]);
  a.m_cap = std::atoll(argv[12]);
  a.gx = (unsigned)std::atoi(argv[13]);
  a.gy = (unsigned)std::atoi(argv[14]);
  a.dir = argv[15];
  return bf16 ? run_fmt<Bf16In>(a, fmt) : run_fmt<F32In>(a, fmt);
}
