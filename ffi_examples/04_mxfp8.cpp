// 04_mxfp8.cpp -- MXFP8 (OCP MX v1.0): FP8 E4M3 elements in blocks of 32 with one E8M0
// (power-of-two) scale byte per block, along rows (dim0) and along columns (dim1), with
// FLOOR and RCEIL scale rounding. Checked against the MX rules computed here:
//   FLOOR: e = floor(log2(amax)) - 8   (8 = floor(log2(448)); amax 0 -> e = -127)
//   RCEIL: e = ceil(log2(amax / 448))  (amax 0 -> e = -127, multiplier 1)
//   scale byte = e + 127; data = encode(x * 2^-e).
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <vector>

#include "check.h"

namespace {

constexpr size_t M = 40, K = 70, B = 32; // partial last blocks in both directions

struct Mx {
    int e;
    float mult;
};

Mx mx_rule(float amax, hipfp8_mx_rounding r) {
    if (r == HIPFP8_MX_ROUNDING_FLOOR) {
        if (amax == 0.0f) return {-127, std::ldexp(1.0f, 126)}; // the multiplier is clamped to 2^126
        int ex;
        std::frexp(amax, &ex); // amax = f * 2^ex, f in [0.5, 1): floor(log2(amax)) = ex - 1
        const int e = ex - 1 - 8;
        return {e, std::ldexp(1.0f, -e)};
    }
    if (amax == 0.0f) return {-127, 1.0f};
    const float d = amax / 448.0f;
    int ex;
    const float f = std::frexp(d, &ex);
    const int e = f == 0.5f ? ex - 1 : ex; // exact ceil(log2(d))
    return {e, std::ldexp(1.0f, -e)};
}

int check(const char *what, const std::vector<uint16_t> &x, const std::vector<uint8_t> &out,
          const std::vector<uint8_t> &scales, bool dim1, hipfp8_mx_rounding r) {
    const fp8_spec spec = fp8_spec_of(HIPFP8_FORMAT_E4M3FN);
    const size_t lines = dim1 ? K : M, len = dim1 ? M : K, nb = (len + B - 1) / B;
    auto at = [&](size_t line, size_t i) { return dim1 ? i * K + line : line * K + i; };
    int bad = 0;
    for (size_t line = 0; line < lines; line++)
        for (size_t b = 0; b < nb; b++) {
            float amax = 0.0f;
            for (size_t i = b * B; i < std::min(len, (b + 1) * B); i++)
                amax = std::max(amax, std::fabs(bf16_to_f32(x[at(line, i)])));
            const Mx mx = mx_rule(amax, r);
            if (scales[line * nb + b] != static_cast<uint8_t>(mx.e + 127)) {
                std::fprintf(stderr, "%s: scale[%zu,%zu] = %u, expected %d\n", what, line, b, scales[line * nb + b], mx.e + 127);
                bad++;
            }
            for (size_t i = b * B; i < std::min(len, (b + 1) * B); i++) {
                const uint8_t want = fp8_encode(spec, bf16_to_f32(x[at(line, i)]) * mx.mult);
                if (out[line * len + i] != want && bad++ < 10)
                    std::fprintf(stderr, "%s: out[%zu,%zu] = 0x%02x, expected 0x%02x\n", what, line, i, out[line * len + i], want);
            }
        }
    return bad;
}

} // namespace

int main() {
    hipfp8_context *ctx = nullptr;
    if (check_status("create", hipfp8_context_create(HIPFP8_BACKEND_CPU, 0, &ctx))) return 1;

    std::vector<uint16_t> x(M * K);
    for (size_t m = 0; m < M; m++)
        for (size_t k = 0; k < K; k++) {
            const float v = static_cast<float>(static_cast<int>((m * 31 + k * 17) % 41) - 20) * 0.0625f;
            x[m * K + k] = f32_to_bf16_exact(m < 2 && k < 32 ? 0.0f : v * std::ldexp(1.0f, static_cast<int>(k % 5) * 3 - 6));
        }

    hipfp8_mxfp8_desc desc{};
    desc.size = sizeof desc;
    desc.input_dtype = HIPFP8_DTYPE_BF16;
    desc.format = HIPFP8_FORMAT_E4M3FN;
    desc.m = M;
    desc.k = K;

    int bad = 0;
    for (hipfp8_mx_rounding r : {HIPFP8_MX_ROUNDING_FLOOR, HIPFP8_MX_ROUNDING_RCEIL}) {
        desc.rounding = r;
        std::vector<uint8_t> out0(M * K), s0(M * ((K + B - 1) / B)), out1(M * K), s1(K * ((M + B - 1) / B));
        if (check_status("mxfp8_dim0", hipfp8_mxfp8_dim0(ctx, &desc, x.data(), x.size(), out0.data(), out0.size(),
                                                          s0.data(), s0.size(), nullptr)) ||
            check_status("mxfp8_dim1", hipfp8_mxfp8_dim1(ctx, &desc, x.data(), x.size(), out1.data(), out1.size(),
                                                          s1.data(), s1.size(), nullptr)))
            return 1;
        const char *name = r == HIPFP8_MX_ROUNDING_FLOOR ? "floor" : "rceil";
        bad += check(name, x, out0, s0, false, r);
        bad += check(name, x, out1, s1, true, r);
        std::printf("%s: dim0 scales of row 0: %u %u %u, row 5: %u %u %u\n", name, s0[0], s0[1], s0[2], s0[15], s0[16], s0[17]);
    }

    // MX elements are OCP only: an FNUZ format is refused.
    desc.format = HIPFP8_FORMAT_E4M3FNUZ;
    std::vector<uint8_t> out(M * K), s(M * 3);
    const hipfp8_status st = hipfp8_mxfp8_dim0(ctx, &desc, x.data(), x.size(), out.data(), out.size(), s.data(), s.size(), nullptr);
    std::printf("FNUZ elements: %s -- %s\n", hipfp8_status_string(st), hipfp8_last_error_message());
    if (st != HIPFP8_STATUS_UNSUPPORTED_FORMAT) bad++;

    hipfp8_context_destroy(ctx);
    if (bad) {
        std::fprintf(stderr, "04_mxfp8: %d mismatches\n", bad);
        return 1;
    }
    std::printf("04_mxfp8: OK (%zu x %zu, dim0 and dim1, FLOOR and RCEIL)\n", M, K);
    return 0;
}
