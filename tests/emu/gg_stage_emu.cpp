// Checks hip/grouped_gemm/stage.hip (the 2D x 2D operand staging) on the host through
// port_emu.h against its definition written here from docs/OPS.md: the clamped offsets
// (o[g] = min(max(o[g], o[g-1]), Mt), one group at a time), the padded layout (group g at
// sum_{h<g} round_up(len_h, 16)), and which groups are copied, written here too: CUTLASS's
// rule (align_len 1, min_len 1) copies a non-empty group exactly when its start is off a
// 16-token boundary; CK's (16, min) also one of a length not a multiple of 16, never one whose
// padded length is under the minimum. A copied group's columns of a and b land at its padded
// start with zero bytes up to its padded end; EVERY other column (aligned groups' padded
// positions included) stays untouched, so an aligned group costs no store; the padded END
// offsets are written for every group (and agree with group_args.h clamped_padded_range, what
// the argument builders use). Cases: every group start residue mod 16, empty and 1-token
// groups, clamped offsets, all groups aligned (nothing copied), more groups than a block's
// threads, grids smaller than the work (grid-stride in x and y). Built and run by
// `scripts/emu-gg-ref.sh stage`.
#include "gen/grouped_gemm/stage.hip"
#include <cstdio>
#include <cstdlib>
#include <random>
#include <set>
#include <string>

static int fails = 0;

struct Buf {  // 16-byte aligned host bytes
  uint8_t* p;
  size_t n;
  explicit Buf(size_t n_, uint8_t fill) : n(n_) {
    p = (uint8_t*)std::aligned_alloc(16, (n_ + 15) / 16 * 16 + 16);
    std::memset(p, fill, (n_ + 15) / 16 * 16 + 16);
  }
  ~Buf() { std::free(p); }
};

// One case: offsets (as given, possibly bad), extents, max_blocks.
static void run_case(const std::string& name, const std::vector<int32_t>& offs, int64_t N,
                     int64_t Mt, int64_t K, int max_blocks, bool need_all_residues,
                     int align_len = 1, int64_t min_len = 1, int want_copied = -1) {
  const int G = (int)offs.size();
  const int64_t mt_pad = (Mt + 15 * (int64_t)G + 15) / 16 * 16;
  std::mt19937 rng(G * 7 + (int)Mt);
  Buf a(N * Mt, 0), b(K * Mt, 0);
  for (size_t i = 0; i < a.n; ++i) a.p[i] = (uint8_t)(rng() % 255 + 1);  // no zero source bytes
  for (size_t i = 0; i < b.n; ++i) b.p[i] = (uint8_t)(rng() % 255 + 1);
  const uint8_t sentinel = 0xA5;
  Buf sa(N * mt_pad, sentinel), sb(K * mt_pad, sentinel);
  std::vector<int32_t> pad(G, -7), scratch(G, -7);

  // The definition.
  std::vector<int64_t> lo(G), hi(G), ps(G), pe(G);
  std::vector<bool> copy(G);
  int copied = 0;
  int64_t prev = 0, acc = 0;
  std::set<int> residues;
  bool empty = false, one = false;
  for (int g = 0; g < G; ++g) {
    int64_t o = offs[g];
    o = o < prev ? prev : o;
    o = o > Mt ? Mt : o;
    lo[g] = prev;
    hi[g] = o;
    prev = o;
    ps[g] = acc;
    acc += (hi[g] - lo[g] + 15) / 16 * 16;
    pe[g] = acc;
    const int64_t len = hi[g] - lo[g], plen = (len + 15) / 16 * 16;
    const bool in_place = len >= min_len && lo[g] % 16 == 0 && len % align_len == 0;
    copy[g] = len > 0 && !in_place && plen >= min_len && plen % align_len == 0;
    copied += copy[g];
    int64_t glo, ghi, gps;  // what the argument builders compute
    hipfp8_gg::clamped_padded_range(offs.data(), g, Mt, &glo, &ghi, &gps);
    if (glo != lo[g] || ghi != hi[g] || gps != ps[g] ||
        hipfp8_gg::stage_2d2d(glo, ghi, align_len, min_len) != copy[g]) {
      printf("  %s: group %d: group_args.h disagrees\n", name.c_str(), g);
      ++fails;
    }
    if (hi[g] > lo[g]) residues.insert((int)(lo[g] % 16));
    empty |= hi[g] == lo[g];
    one |= hi[g] - lo[g] == 1;
  }
  if (need_all_residues && (residues.size() != 16 || !empty || !one)) {
    printf("%s: case does not cover every start residue, an empty and a 1-token group\n",
           name.c_str());
    ++fails;
    return;
  }
  if (want_copied >= 0 && copied != want_copied) {
    printf("%s: the case copies %d groups, meant %d\n", name.c_str(), copied, want_copied);
    ++fails;
    return;
  }
  const int rc = hipfp8_gg_stage_2d2d(a.p, b.p, offs.data(), G, N, Mt, K, sa.p, sb.p, mt_pad,
                                      pad.data(), scratch.data(), align_len, min_len,
                                      max_blocks, nullptr);
  if (rc) {
    printf("%s: rc %d\n", name.c_str(), rc);
    ++fails;
    return;
  }
  int bad = 0;
  for (int g = 0; g < G; ++g)
    if (pad[g] != pe[g] && bad++ < 5) printf("  %s: padded_offs[%d] = %d, want %lld\n", name.c_str(), g, pad[g], (long long)pe[g]);
  auto check_rows = [&](const char* which, const Buf& src, const Buf& dst, int64_t rows) {
    for (int64_t r = 0; r < rows; ++r) {
      std::vector<int> want(mt_pad, -1);  // -1: must stay the sentinel
      for (int g = 0; g < G; ++g)
        for (int64_t p = ps[g]; copy[g] && p < pe[g]; ++p) {
          const int64_t t = lo[g] + (p - ps[g]);
          want[p] = t < hi[g] ? src.p[r * Mt + t] : 0;
        }
      for (int64_t p = 0; p < mt_pad; ++p) {
        const int got = dst.p[r * mt_pad + p];
        const int w = want[p] < 0 ? sentinel : want[p];
        if (got != w && bad++ < 5)
          printf("  %s: %s row %lld col %lld: got %d want %d%s\n", name.c_str(), which,
                 (long long)r, (long long)p, got, w, want[p] < 0 ? " (untouched)" : "");
      }
    }
  };
  check_rows("a", a, sa, N);
  check_rows("b", b, sb, K);
  printf("%s: %s (G %d, %d copied, rule (%d, %lld), N %lld, Mt %lld, K %lld, mt_pad %lld, "
         "max_blocks %d)\n",
         name.c_str(), bad ? "FAIL" : "ok", G, copied, align_len, (long long)min_len,
         (long long)N, (long long)Mt, (long long)K, (long long)mt_pad, max_blocks);
  if (bad) ++fails;
}

static std::vector<int32_t> ends_of(const std::vector<int>& sizes) {
  std::vector<int32_t> o;
  int32_t s = 0;
  for (int x : sizes) o.push_back(s += x);
  return o;
}

int main() {
  // Sizes 1..17 then 0: starts 0, 1, 3, 6, 10, ... hit every residue mod 16.
  std::vector<int> sizes;
  for (int s = 1; s <= 17; ++s) sizes.push_back(s);
  sizes.push_back(0);
  sizes.push_back(16);
  sizes.push_back(33);
  sizes.push_back(0);
  sizes.push_back(1);
  int64_t tot = 0;
  for (int s : sizes) tot += s;
  const int64_t mt = (tot + 15) / 16 * 16 + 32;  // tokens past the last group
  const auto o = ends_of(sizes);
  for (int mb : {0, 1, 2, 3}) run_case("residues/mb" + std::to_string(mb), o, 3, mt, 2, mb, true);
  run_case("residues/no-b", o, 4, mt, 0, 2, true);
  run_case("residues/no-a", o, 0, mt, 3, 2, true);
  // CK's rule, with a minimum the sizes straddle (padded 16 and 32 fall on either side).
  run_case("residues/ck", o, 3, mt, 2, 2, true, 16, 20);
  run_case("residues/ck-mb0", o, 3, mt, 2, 0, true, 16, 20);

  // Aligned calls (every group on a 16-token boundary, lengths multiples of 16; empty ones
  // too): nothing copied under either rule, every staged column untouched.
  const auto al = ends_of({32, 16, 0, 48, 16, 0, 64});
  run_case("aligned", al, 3, 208, 2, 0, false, 1, 1, 0);
  run_case("aligned/ck", al, 3, 208, 2, 2, false, 16, 20, 0);
  // Aligned starts with a ragged last group: CUTLASS reads it in place, CK stages it.
  const auto rag = ends_of({32, 16, 21});
  run_case("aligned-ragged", rag, 2, 80, 2, 0, false, 1, 1, 0);
  run_case("aligned-ragged/ck", rag, 2, 80, 2, 0, false, 16, 16, 1);
  // A mix: aligned groups between unaligned ones.
  const auto mix = ends_of({32, 5, 11, 32, 7, 0, 9, 20, 3});
  run_case("mixed", mix, 3, 144, 2, 1, false, 1, 1, 3);

  // Clamped: negative, decreasing, past Mt; a first group at 0.
  run_case("clamped", {-5, 0, 7, 3, 40, 39, 1000, -1, 2000}, 2, 64, 3, 2, false);
  run_case("clamped/all-past", {500, 600}, 2, 48, 1, 0, false);
  run_case("all-empty", {0, 0, 0}, 2, 32, 2, 0, false);

  // More groups than a block's threads (several scan chunks), random sizes incl. 0 and 1;
  // with EMU_SMEM_GROUPS=64 the global tables.
  for (int G : {300, 1100}) {
    std::mt19937 rng(G);
    std::vector<int> sz;
    for (int g = 0; g < G; ++g) {
      const int r = (int)(rng() % 10);
      sz.push_back(r == 0 ? 0 : r == 1 ? 1 : (int)(rng() % 40));
    }
    int64_t t = 0;
    for (int s : sz) t += s;
    const auto og = ends_of(sz);
    run_case("many/" + std::to_string(G), og, 2, (t + 15) / 16 * 16 + 16, 1, 3, true);
  }
  printf(fails ? "EMU FAILED (%d)\n" : "EMU OK\n", fails);
  return fails ? 1 : 0;
}
