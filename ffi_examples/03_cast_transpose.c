/* 03_cast_transpose.c -- one read of x (M, K), two FP8 layouts: out (M, K) and out_t (K, M),
 * as a dense linear layer's forward (x) and backward (x^T) need. Rowwise scaling gives each
 * row of x its scale for out and each column its scale for out_t; tensorwise gives both the
 * one tensor scale. Delayed scaling (hipfp8_cast_transpose_scaled) takes a scale the caller
 * already has -- here half of this step's tensor scale, as an amax history might give -- and
 * returns this step's amax. Every mode is checked against check.h. */
#include <stdio.h>
#include <stdlib.h>

#include "check.h"

#define M 5
#define K 7

static int check_layouts(const uint16_t *x, const uint8_t *out, const uint8_t *out_t,
                         const float *row_scale, const float *col_scale, fp8_spec spec) {
    int bad = 0, m, k;
    for (m = 0; m < M; m++)
        for (k = 0; k < K; k++) {
            float v = bf16_to_f32(x[m * K + k]);
            uint8_t want = fp8_encode(spec, v * row_scale[m]);
            uint8_t want_t = fp8_encode(spec, v * col_scale[k]);
            if (out[m * K + k] != want) {
                fprintf(stderr, "out[%d,%d] = 0x%02x, expected 0x%02x\n", m, k, out[m * K + k], want);
                bad++;
            }
            if (out_t[k * M + m] != want_t) {
                fprintf(stderr, "out_t[%d,%d] = 0x%02x, expected 0x%02x\n", k, m, out_t[k * M + m], want_t);
                bad++;
            }
        }
    return bad;
}

int main(void) {
    hipfp8_context *ctx = NULL;
    uint16_t x[M * K];
    uint8_t out[M * K], out_t[M * K];
    float scales[M], scales_t[K], row_scale[M], col_scale[K], amax_row[M], amax_col[K], amax_all = 0.0f;
    hipfp8_cast_transpose_desc desc;
    fp8_spec spec = fp8_spec_of(HIPFP8_FORMAT_E4M3FN);
    int m, k, bad = 0;

    for (m = 0; m < M; m++)
        for (k = 0; k < K; k++)
            x[m * K + k] = f32_to_bf16_exact((float)((m * 13 + k * 7) % 17 - 8) * 0.046875f * (float)(1 << (k % 4)));
    for (m = 0; m < M; m++) amax_row[m] = 0.0f;
    for (k = 0; k < K; k++) amax_col[k] = 0.0f;
    for (m = 0; m < M; m++)
        for (k = 0; k < K; k++) {
            float a = fabsf(bf16_to_f32(x[m * K + k]));
            if (a > amax_row[m]) amax_row[m] = a;
            if (a > amax_col[k]) amax_col[k] = a;
            if (a > amax_all) amax_all = a;
        }

    if (check_status("create", hipfp8_context_create(HIPFP8_BACKEND_CPU, 0, &ctx))) return 1;
    memset(&desc, 0, sizeof desc);
    desc.size = sizeof desc;
    desc.input_dtype = HIPFP8_DTYPE_BF16;
    desc.format = HIPFP8_FORMAT_E4M3FN;
    desc.flags = HIPFP8_FLAG_POW2_SCALES;
    desc.m = M;
    desc.k = K;

    /* Rowwise. */
    desc.scaling = HIPFP8_SCALING_ROWWISE;
    if (check_status("cast_transpose (rowwise)",
                     hipfp8_cast_transpose(ctx, &desc, x, M * K, out, M * K, out_t, M * K, scales, M, scales_t, K, NULL)))
        return 1;
    for (m = 0; m < M; m++) {
        row_scale[m] = amax_to_scale(spec.max, amax_row[m], 1);
        if (scales[m] != row_scale[m]) bad++;
    }
    for (k = 0; k < K; k++) {
        col_scale[k] = amax_to_scale(spec.max, amax_col[k], 1);
        if (scales_t[k] != col_scale[k]) bad++;
    }
    bad += check_layouts(x, out, out_t, row_scale, col_scale, spec);

    /* Tensorwise: one scale; scales and scales_t hold one element each. */
    desc.scaling = HIPFP8_SCALING_TENSORWISE;
    if (check_status("cast_transpose (tensorwise)",
                     hipfp8_cast_transpose(ctx, &desc, x, M * K, out, M * K, out_t, M * K, scales, 1, scales_t, 1, NULL)))
        return 1;
    for (m = 0; m < M; m++) row_scale[m] = amax_to_scale(spec.max, amax_all, 1);
    for (k = 0; k < K; k++) col_scale[k] = row_scale[0];
    if (scales[0] != row_scale[0] || scales_t[0] != row_scale[0]) {
        fprintf(stderr, "tensor scale %g / %g, expected %g\n", scales[0], scales_t[0], row_scale[0]);
        bad++;
    }
    bad += check_layouts(x, out, out_t, row_scale, col_scale, spec);

    /* Delayed scaling: the caller's scale (e.g. from earlier steps' amax); the amax comes back. */
    {
        hipfp8_cast_2d_desc sdesc;
        float given = 0.5f * scales[0], amax_out = -1.0f;
        memset(&sdesc, 0, sizeof sdesc);
        sdesc.size = sizeof sdesc;
        sdesc.input_dtype = HIPFP8_DTYPE_BF16;
        sdesc.format = HIPFP8_FORMAT_E4M3FN;
        sdesc.m = M;
        sdesc.k = K;
        if (check_status("cast_transpose_scaled",
                         hipfp8_cast_transpose_scaled(ctx, &sdesc, x, M * K, &given, 1, out, M * K, out_t, M * K,
                                                      &amax_out, 1, NULL)))
            return 1;
        for (m = 0; m < M; m++) row_scale[m] = given;
        for (k = 0; k < K; k++) col_scale[k] = given;
        if (amax_out != amax_all) {
            fprintf(stderr, "cast_transpose_scaled amax %g, expected %g\n", amax_out, amax_all);
            bad++;
        }
        bad += check_layouts(x, out, out_t, row_scale, col_scale, spec);
        /* pow2 rounding does not apply to a given scale: refused, nothing written. */
        sdesc.flags = HIPFP8_FLAG_POW2_SCALES;
        amax_out = -1.0f;
        if (hipfp8_cast_transpose_scaled(ctx, &sdesc, x, M * K, &given, 1, out, M * K, out_t, M * K, &amax_out, 1,
                                         NULL) == HIPFP8_STATUS_SUCCESS ||
            amax_out != -1.0f) {
            fprintf(stderr, "cast_transpose_scaled accepted HIPFP8_FLAG_POW2_SCALES\n");
            bad++;
        }
    }

    hipfp8_context_destroy(ctx);
    if (bad) {
        fprintf(stderr, "03_cast_transpose: %d mismatches\n", bad);
        return 1;
    }
    printf("03_cast_transpose: OK (%d x %d, rowwise, tensorwise and a given scale; tensor scale %g)\n", M, K, scales[0]);
    return 0;
}
