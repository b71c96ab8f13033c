/* 01_quantize_rowwise.c -- the basic hipfp8 C workflow:
 * create a context, ask what it is, quantize a bf16 matrix rowwise to FP8, check every
 * byte and scale against a tiny independent computation, and see how errors are reported.
 *
 * On a GPU context the same calls take device pointers and a hipStream_t as the last
 * argument; here the CPU backend takes host pointers and ignores the stream. */
#include <stdio.h>
#include <stdlib.h>

#include "check.h"

#define M 4
#define K 33

int main(void) {
    hipfp8_context *ctx = NULL;
    hipfp8_backend backend;
    hipfp8_format native, resolved;
    char name[128], arch[32];
    uint16_t x[M * K];
    uint8_t out[M * K];
    float scales[M];
    hipfp8_cast_2d_desc desc;
    hipfp8_status st;
    fp8_spec spec;
    int i, j, bad = 0;

    if (hipfp8_abi_version() != HIPFP8_ABI_VERSION) {
        fprintf(stderr, "header ABI %d vs library ABI %u\n", HIPFP8_ABI_VERSION, hipfp8_abi_version());
        return 1;
    }
    if (check_status("create", hipfp8_context_create(HIPFP8_BACKEND_CPU, 0, &ctx))) return 1;
    if (check_status("backend", hipfp8_context_backend(ctx, &backend)) ||
        check_status("device name", hipfp8_context_device_name(ctx, name, sizeof name, NULL)) ||
        check_status("arch", hipfp8_context_arch(ctx, arch, sizeof arch, NULL)) ||
        check_status("native format", hipfp8_context_native_format(ctx, &native)) ||
        check_status("resolve", hipfp8_context_resolve_format(ctx, HIPFP8_FORMAT_AUTO, &resolved)))
        return 1;
    printf("hipfp8 %u (ABI %u): backend %u, device \"%s\", arch %s, native format %u\n",
           hipfp8_version(), hipfp8_abi_version(), (unsigned)backend, name, arch, (unsigned)native);
    if (backend != HIPFP8_BACKEND_CPU || native != HIPFP8_FORMAT_E4M3FN || resolved != native) {
        fprintf(stderr, "unexpected context properties\n");
        return 1;
    }

    /* bf16 input with a zero row and values that need rounding; all exact in bf16. */
    for (i = 0; i < M; i++)
        for (j = 0; j < K; j++)
            x[i * K + j] = f32_to_bf16_exact(i == 2 ? 0.0f : (float)((i * 37 + j * 11) % 29 - 14) * 0.3125f * (float)(i + 1));

    memset(&desc, 0, sizeof desc);
    desc.size = sizeof desc;
    desc.input_dtype = HIPFP8_DTYPE_BF16;
    desc.format = HIPFP8_FORMAT_AUTO; /* E4M3 in the device's flavour: OCP here */
    desc.flags = HIPFP8_FLAG_POW2_SCALES;
    desc.m = M;
    desc.k = K;
    st = hipfp8_rowwise_2d(ctx, &desc, x, M * K, out, M * K, scales, M, NULL);
    if (check_status("hipfp8_rowwise_2d", st)) return 1;

    spec = fp8_spec_of(resolved);
    for (i = 0; i < M; i++) {
        float amax = 0.0f, s;
        for (j = 0; j < K; j++) {
            float v = fabsf(bf16_to_f32(x[i * K + j]));
            if (v > amax) amax = v;
        }
        s = amax_to_scale(spec.max, amax, 1);
        if (scales[i] != s) {
            fprintf(stderr, "row %d: scale %g, expected %g\n", i, scales[i], s);
            bad++;
        }
        for (j = 0; j < K; j++) {
            uint8_t want = fp8_encode(spec, bf16_to_f32(x[i * K + j]) * s);
            if (out[i * K + j] != want) {
                if (bad++ < 10) fprintf(stderr, "out[%d,%d] = 0x%02x, expected 0x%02x\n", i, j, out[i * K + j], want);
            }
        }
    }
    printf("row scales: %g %g %g %g; first bytes: %02x %02x %02x %02x\n", scales[0], scales[1],
           scales[2], scales[3], out[0], out[1], out[2], out[3]);

    /* Errors: a status, a message, and nothing written. */
    memset(scales, 0xA5, sizeof scales);
    st = hipfp8_rowwise_2d(ctx, &desc, x, M * K, out, M * K, scales, M - 1, NULL);
    printf("with a short scales buffer: %s -- %s\n", hipfp8_status_string(st), hipfp8_last_error_message());
    if (st != HIPFP8_STATUS_OUTPUT_TOO_SMALL) bad++;
    for (i = 0; i < (int)sizeof scales; i++)
        if (((unsigned char *)scales)[i] != 0xA5) bad++;

    if (check_status("destroy", hipfp8_context_destroy(ctx))) return 1;
    if (hipfp8_context_destroy(ctx) != HIPFP8_STATUS_INVALID_HANDLE) bad++; /* detected, not UB */

    if (bad) {
        fprintf(stderr, "01_quantize_rowwise: %d mismatches\n", bad);
        return 1;
    }
    printf("01_quantize_rowwise: OK (%d x %d)\n", M, K);
    return 0;
}
