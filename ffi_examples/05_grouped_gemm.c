/* 05_grouped_gemm.c -- one FP8 MoE forward projection end to end through the C ABI:
 *   A (M, K) bf16 tokens sorted by expert   -> hipfp8_rowwise_2d  -> FP8 + row scales
 *   B (E, K, N) bf16 expert weights (col-major) -> hipfp8_colwise_3d -> FP8 + (E, N) scales
 *   out (M, N) bf16 = grouped GEMM over the token groups with the DEQUANT scales (1 / scale).
 * Groups: offs = {4, 4, 10}: expert 0 gets rows [0,4), expert 1 none, expert 2 rows [4,10);
 * rows 10 and 11 are routed nowhere and must stay untouched.
 * Checked against a double-precision reference on the decoded FP8 operands (check.h), with
 * the tolerance of a bf16 output and f32 accumulation written down below. */
#include <stdio.h>
#include <stdlib.h>

#include "check.h"

#define M 12
#define K 40
#define N 6
#define E 3

int main(void) {
    static uint16_t a[M * K], b[E * K * N], out[M * N];
    static uint8_t a8[M * K], b8[E * K * N];
    static float sa[M], sb[E * N], dqa[M], dqb[E * N];
    const int32_t offs[E] = {4, 4, 10};
    hipfp8_context *ctx = NULL;
    hipfp8_cast_2d_desc qa;
    hipfp8_cast_3d_desc qb;
    hipfp8_grouped_gemm_2d3d_desc g;
    fp8_spec spec = fp8_spec_of(HIPFP8_FORMAT_E4M3FN);
    double worst = 0.0;
    int i, j, k, e, bad = 0;

    for (i = 0; i < M * K; i++) a[i] = f32_to_bf16_exact((float)((i * 7) % 19 - 9) * 0.125f);
    for (i = 0; i < E * K * N; i++) b[i] = f32_to_bf16_exact((float)((i * 5) % 23 - 11) * 0.01171875f);
    for (i = 0; i < M * N; i++) out[i] = 0xA5A5;

    if (check_status("create", hipfp8_context_create(HIPFP8_BACKEND_CPU, 0, &ctx))) return 1;

    memset(&qa, 0, sizeof qa);
    qa.size = sizeof qa;
    qa.input_dtype = HIPFP8_DTYPE_BF16;
    qa.format = HIPFP8_FORMAT_E4M3FN;
    qa.flags = HIPFP8_FLAG_POW2_SCALES;
    qa.m = M;
    qa.k = K;
    if (check_status("rowwise_2d", hipfp8_rowwise_2d(ctx, &qa, a, M * K, a8, M * K, sa, M, NULL))) return 1;

    memset(&qb, 0, sizeof qb);
    qb.size = sizeof qb;
    qb.input_dtype = HIPFP8_DTYPE_BF16;
    qb.format = HIPFP8_FORMAT_E4M3FN;
    qb.flags = HIPFP8_FLAG_POW2_SCALES;
    qb.e = E;
    qb.k = K;
    qb.n = N;
    if (check_status("colwise_3d", hipfp8_colwise_3d(ctx, &qb, b, E * K * N, b8, E * K * N, sb, E * N, NULL))) return 1;

    /* The quantized A is what check.h computes (05 trusts nothing it did not check). */
    for (i = 0; i < M; i++) {
        float amax = 0.0f;
        for (k = 0; k < K; k++)
            if (fabsf(bf16_to_f32(a[i * K + k])) > amax) amax = fabsf(bf16_to_f32(a[i * K + k]));
        if (sa[i] != amax_to_scale(spec.max, amax, 1)) bad++;
        for (k = 0; k < K; k++)
            if (a8[i * K + k] != fp8_encode(spec, bf16_to_f32(a[i * K + k]) * sa[i])) bad++;
    }

    /* The GEMM takes dequant scales: the reciprocals (exact, the scales are powers of two). */
    for (i = 0; i < M; i++) dqa[i] = 1.0f / sa[i];
    for (i = 0; i < E * N; i++) dqb[i] = 1.0f / sb[i];

    memset(&g, 0, sizeof g);
    g.size = sizeof g;
    g.a_format = HIPFP8_FORMAT_E4M3FN;
    g.b_format = HIPFP8_FORMAT_E4M3FN;
    g.m = M;
    g.k = K;
    g.n = N;
    g.e = E;
    g.backend = HIPFP8_GEMM_BACKEND_AUTO; /* GPU: CUTLASS / CK when they take the call */
    {
        /* The workspace the vendor library needs (0 on the CPU). Passing NULL, 0 below uses a
         * cached per-device buffer instead; pass your own to capture the GEMM in a graph. */
        size_t ws = 1;
        if (check_status("workspace size", hipfp8_grouped_gemm_workspace_size(ctx, g.a_format, g.b_format, g.backend, E, &ws)))
            return 1;
        printf("grouped GEMM workspace for %d groups: %zu bytes\n", E, ws);
    }
    if (check_status("grouped_gemm_2d3d", hipfp8_grouped_gemm_2d3d(ctx, &g, a8, M * K, b8, E * K * N, offs, E, dqa, M,
                                                                   dqb, E * N, out, M * N, NULL, 0, NULL)))
        return 1;

    for (e = 0; e < E; e++) {
        int lo = e == 0 ? 0 : offs[e - 1];
        for (i = lo; i < offs[e]; i++)
            for (j = 0; j < N; j++) {
                double ref = 0.0, sum_abs = 0.0, got, tol;
                for (k = 0; k < K; k++) {
                    double t = fp8_decode(spec, a8[i * K + k]) * fp8_decode(spec, b8[e * N * K + j * K + k]);
                    ref += t;
                    sum_abs += fabs(t);
                }
                ref *= (double)dqa[i] * (double)dqb[e * N + j];
                sum_abs *= (double)dqa[i] * (double)dqb[e * N + j];
                got = bf16_to_f32(out[i * N + j]);
                /* bf16 round-to-nearest: 2^-9 relative; f32 accumulation of K terms: K * 2^-24
                 * of the sum of |terms|; doubled for slack. */
                tol = 2.0 * (ldexp(fabs(ref), -9) + K * ldexp(sum_abs, -24));
                if (fabs(got - ref) > tol) {
                    fprintf(stderr, "out[%d,%d] = %g, reference %g (tolerance %g)\n", i, j, got, ref, tol);
                    bad++;
                }
                if (fabs(got - ref) > worst) worst = fabs(got - ref);
            }
    }
    for (i = offs[E - 1]; i < M; i++)
        for (j = 0; j < N; j++)
            if (out[i * N + j] != 0xA5A5) {
                fprintf(stderr, "unrouted row %d was written\n", i);
                bad++;
            }

    /* Offsets must be one per expert. */
    {
        hipfp8_status st = hipfp8_grouped_gemm_2d3d(ctx, &g, a8, M * K, b8, E * K * N, offs, E - 1, dqa, M, dqb, E * N,
                                                    out, M * N, NULL, 0, NULL);
        printf("2 offsets for 3 experts: %s -- %s\n", hipfp8_status_string(st), hipfp8_last_error_message());
        if (st != HIPFP8_STATUS_GROUP_COUNT_MISMATCH) bad++;
    }

    hipfp8_context_destroy(ctx);
    if (bad) {
        fprintf(stderr, "05_grouped_gemm: %d mismatches\n", bad);
        return 1;
    }
    printf("05_grouped_gemm: OK (M=%d K=%d N=%d E=%d, an empty expert, 2 unrouted rows; max |err| %g)\n", M, K, N, E, worst);
    return 0;
}
