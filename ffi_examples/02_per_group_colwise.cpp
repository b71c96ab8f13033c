// 02_per_group_colwise.cpp -- per-group colwise quantization over jagged token groups, the
// wgrad operand of an FP8 MoE grouped GEMM, from C++ with a small RAII wrapper.
//
// x is (M, K) row-major f32; int32 END offsets split the M rows into groups (torch's `offs`):
// here {3, 3, 8}: rows [0,3), an EMPTY group, rows [3,8); rows 8 and 9 belong to no group and
// must not be written. The output is column-major (out[k*M + m]) with one scale per (group,
// column): scales[g*K + k]. Every byte and scale is checked against check.h.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <stdexcept>
#include <string>
#include <vector>

#include "check.h"

namespace {

// Owns a hipfp8_context; turns statuses into exceptions carrying the last-error message.
class Context {
  public:
    explicit Context(hipfp8_backend backend, int device = 0) {
        check(hipfp8_context_create(backend, device, &ctx_), "hipfp8_context_create");
    }
    ~Context() { hipfp8_context_destroy(ctx_); }
    Context(const Context &) = delete;
    Context &operator=(const Context &) = delete;
    const hipfp8_context *get() const { return ctx_; }

    static void check(hipfp8_status st, const char *what) {
        if (st != HIPFP8_STATUS_SUCCESS)
            throw std::runtime_error(std::string(what) + ": " + hipfp8_status_string(st) + " -- " +
                                     hipfp8_last_error_message());
    }

  private:
    hipfp8_context *ctx_ = nullptr;
};

constexpr size_t M = 10, K = 3, G = 3;
constexpr uint8_t POISON = 0xA5;

int run() {
    Context ctx(HIPFP8_BACKEND_CPU);
    std::vector<float> x(M * K);
    for (size_t m = 0; m < M; m++)
        for (size_t k = 0; k < K; k++)
            x[m * K + k] = static_cast<float>((static_cast<int>(m * 5 + k * 3) % 11) - 5) * 1.75f * static_cast<float>(k + 1);
    x[4 * K + 1] = 1000.0f; // a large value: column 1 of group 2 gets a small scale
    const int32_t offs[G] = {3, 3, 8};

    std::vector<uint8_t> out(M * K, POISON);
    std::vector<float> scales(G * K);
    hipfp8_cast_2d_desc desc{};
    desc.size = sizeof desc;
    desc.input_dtype = HIPFP8_DTYPE_F32;
    desc.format = HIPFP8_FORMAT_E5M2; // explicit format: gradients
    desc.flags = 0;                   // exact (not power-of-two) scales
    desc.m = M;
    desc.k = K;
    Context::check(hipfp8_per_group_colwise(ctx.get(), &desc, x.data(), x.size(), offs, G, out.data(),
                                            out.size(), scales.data(), scales.size(), nullptr),
                   "hipfp8_per_group_colwise");

    const fp8_spec spec = fp8_spec_of(HIPFP8_FORMAT_E5M2);
    int bad = 0;
    for (size_t g = 0; g < G; g++) {
        const size_t lo = g == 0 ? 0 : static_cast<size_t>(offs[g - 1]), hi = static_cast<size_t>(offs[g]);
        for (size_t k = 0; k < K; k++) {
            float amax = 0.0f;
            for (size_t m = lo; m < hi; m++) amax = std::max(amax, std::fabs(x[m * K + k]));
            const float s = amax_to_scale(spec.max, amax, 0); // empty group: the scale of amax 0
            if (scales[g * K + k] != s) {
                std::fprintf(stderr, "scale[g=%zu,k=%zu] = %g, expected %g\n", g, k, scales[g * K + k], s);
                bad++;
            }
            for (size_t m = lo; m < hi; m++) {
                const uint8_t want = fp8_encode(spec, x[m * K + k] * s);
                if (out[k * M + m] != want) {
                    std::fprintf(stderr, "out[k=%zu,m=%zu] = 0x%02x, expected 0x%02x\n", k, m, out[k * M + m], want);
                    bad++;
                }
            }
        }
    }
    for (size_t k = 0; k < K; k++)
        for (size_t m = static_cast<size_t>(offs[G - 1]); m < M; m++)
            if (out[k * M + m] != POISON) {
                std::fprintf(stderr, "row %zu (no group) was written\n", m);
                bad++;
            }

    // Bad offsets are refused before anything is written.
    const int32_t decreasing[G] = {3, 2, 8};
    std::vector<uint8_t> out2(M * K, POISON);
    const hipfp8_status st = hipfp8_per_group_colwise(ctx.get(), &desc, x.data(), x.size(), decreasing, G,
                                                      out2.data(), out2.size(), scales.data(), scales.size(), nullptr);
    std::printf("decreasing offsets: %s -- %s\n", hipfp8_status_string(st), hipfp8_last_error_message());
    if (st != HIPFP8_STATUS_INVALID_OFFSETS) bad++;
    for (uint8_t b : out2)
        if (b != POISON) bad++;

    if (bad) {
        std::fprintf(stderr, "02_per_group_colwise: %d mismatches\n", bad);
        return 1;
    }
    std::printf("02_per_group_colwise: OK (M=%zu K=%zu, groups 3 | empty | 5, 2 rows ungrouped); scales g2: %g %g %g\n",
                M, K, scales[2 * K], scales[2 * K + 1], scales[2 * K + 2]);
    return 0;
}

} // namespace

int main() {
    try {
        return run();
    } catch (const std::exception &e) {
        std::fprintf(stderr, "02_per_group_colwise: %s\n", e.what());
        return 1;
    }
}
