/* 06_moe_experts_recipe.c -- a MoE experts block (torchtitan GroupedExperts: SwiGLU, W13 = w1|w3
 * stacked, W2) forward and backward through the recipe calls of the C ABI, on the CPU backend:
 *   hipfp8_moe_experts_weight_cache_create / hipfp8_weight_cache_refresh   (FP8 weights, once)
 *   hipfp8_moe_experts_forward   x (M, D) -> y (M, D), saved tensors
 *   hipfp8_moe_experts_backward  dy (M, D) -> dx (M, D), dW13 (2, E, I, D) = [dW1; dW3], dW2 (E, D, I)
 * with the workspace and saved sizes queried first. Tokens are already grouped by expert:
 * offs = {8, 8, 20}: expert 0 rows [0, 8), expert 1 none, expert 2 rows [8, 20); rows 20..23
 * are routed nowhere and must stay untouched.
 * Checked against a double-precision evaluation of the same block on the bf16 inputs: the
 * relative (Frobenius) error of each output must stay below 0.15 (FP8 E4M3 operands carry a
 * relative rounding error up to 2^-4 each, two per GEMM, up to three GEMMs in a chain; a wrong
 * scale convention or layout is off by far more). Also: a workspace one byte short is
 * OUTPUT_TOO_SMALL with nothing written, and a backward across a weight refresh is refused. */
#include <stdio.h>
#include <stdlib.h>

#include "check.h"

#define M 24
#define D 16
#define I 8
#define E 3

static double sigmoid(double g) { return 1.0 / (1.0 + exp(-g)); }

/* The experts block in double precision on the bf16 inputs (rows of groups only). */
static void reference(const uint16_t *x, const uint16_t *w13, const uint16_t *w2, const uint16_t *dy,
                      const int32_t *offs, double *y, double *dx, double *dw13, double *dw2) {
    int e, r, c, k, j;
    memset(dw13, 0, sizeof(double) * E * 2 * I * D);
    memset(dw2, 0, sizeof(double) * E * D * I);
    for (e = 0; e < E; e++) {
        int lo = e == 0 ? 0 : offs[e - 1];
        for (r = lo; r < offs[e]; r++) {
            double gu[2 * I], h[I], dh[I], dgu[2 * I];
            for (c = 0; c < 2 * I; c++) {
                gu[c] = 0.0;
                for (k = 0; k < D; k++) gu[c] += bf16_to_f32(x[r * D + k]) * bf16_to_f32(w13[(e * 2 * I + c) * D + k]);
            }
            for (c = 0; c < I; c++) h[c] = gu[c] * sigmoid(gu[c]) * gu[I + c];
            for (j = 0; j < D; j++) {
                y[r * D + j] = 0.0;
                for (c = 0; c < I; c++) y[r * D + j] += h[c] * bf16_to_f32(w2[(e * D + j) * I + c]);
            }
            for (c = 0; c < I; c++) {
                dh[c] = 0.0;
                for (j = 0; j < D; j++) dh[c] += bf16_to_f32(dy[r * D + j]) * bf16_to_f32(w2[(e * D + j) * I + c]);
            }
            for (c = 0; c < I; c++) {
                double g = gu[c], u = gu[I + c], s = sigmoid(g);
                dgu[c] = dh[c] * u * s * (1.0 + g * (1.0 - s));
                dgu[I + c] = dh[c] * g * s;
            }
            for (k = 0; k < D; k++) {
                dx[r * D + k] = 0.0;
                for (c = 0; c < 2 * I; c++) dx[r * D + k] += dgu[c] * bf16_to_f32(w13[(e * 2 * I + c) * D + k]);
            }
            for (j = 0; j < D; j++)
                for (c = 0; c < I; c++) dw2[(e * D + j) * I + c] += bf16_to_f32(dy[r * D + j]) * h[c];
            for (c = 0; c < 2 * I; c++)
                for (k = 0; k < D; k++) dw13[((c / I) * E + e) * I * D + (c % I) * D + k] += dgu[c] * bf16_to_f32(x[r * D + k]);
        }
    }
}

static double rel_err(const uint16_t *got, const double *want, int n) {
    double num = 0.0, den = 0.0;
    int j;
    for (j = 0; j < n; j++) {
        double d = bf16_to_f32(got[j]) - want[j];
        num += d * d;
        den += want[j] * want[j];
    }
    return sqrt(num / den);
}

int main(void) {
    static uint16_t x[M * D], w13[E * 2 * I * D], w2[E * D * I], dy[M * D];
    static uint16_t y[M * D], dx[M * D], dw13[E * 2 * I * D], dw2[E * D * I];
    static double ry[M * D], rdx[M * D], rdw13[E * 2 * I * D], rdw2[E * D * I];
    const int32_t offs[E] = {8, 8, 20};
    hipfp8_context *ctx = NULL;
    hipfp8_weight_cache *cache = NULL;
    hipfp8_moe_experts_desc desc;
    size_t saved_len = 0, fws_len = 0, bws_len = 0;
    uint8_t *saved, *fws, *bws;
    uint64_t gen = 0, gen2 = 0, fwd_gen = 0;
    double errs[4];
    int i, bad = 0;

    for (i = 0; i < M * D; i++) x[i] = f32_to_bf16_exact((float)((i * 7) % 19 - 9) * 0.125f);
    for (i = 0; i < E * 2 * I * D; i++) w13[i] = f32_to_bf16_exact((float)((i * 5) % 23 - 11) * 0.03125f);
    for (i = 0; i < E * D * I; i++) w2[i] = f32_to_bf16_exact((float)((i * 3) % 17 - 8) * 0.03125f);
    for (i = 0; i < M * D; i++) dy[i] = f32_to_bf16_exact((float)((i * 11) % 13 - 6) * 0.0625f);
    for (i = 0; i < M * D; i++) y[i] = dx[i] = 0xA5A5;

    if (check_status("create", hipfp8_context_create(HIPFP8_BACKEND_CPU, 0, &ctx))) return 1;
    memset(&desc, 0, sizeof desc);
    desc.size = sizeof desc;
    desc.input_dtype = HIPFP8_DTYPE_BF16;
    desc.format = HIPFP8_FORMAT_E4M3FN;
    desc.grad_format = HIPFP8_FORMAT_E4M3FN;
    desc.flags = HIPFP8_FLAG_POW2_SCALES;
    desc.backend = HIPFP8_GEMM_BACKEND_AUTO;
    desc.m = M;
    desc.d = D;
    desc.i = I;
    desc.e = E;

    /* Sizes first; the caller owns every buffer (device memory on a GPU context). */
    if (check_status("saved size", hipfp8_moe_experts_saved_size(ctx, &desc, &saved_len))) return 1;
    if (check_status("fwd ws size", hipfp8_moe_experts_forward_workspace_size(ctx, &desc, &fws_len))) return 1;
    if (check_status("bwd ws size", hipfp8_moe_experts_backward_workspace_size(ctx, &desc, &bws_len))) return 1;
    printf("saved %zu bytes, forward workspace %zu, backward workspace %zu\n", saved_len, fws_len, bws_len);
    saved = (uint8_t *)calloc(saved_len, 1);
    fws = (uint8_t *)calloc(fws_len, 1);
    bws = (uint8_t *)calloc(bws_len, 1);
    if (!saved || !fws || !bws) return 1;

    /* The FP8 weights, both layouts, quantized once (per optimizer step). */
    if (check_status("cache create", hipfp8_moe_experts_weight_cache_create(ctx, &desc, &cache))) return 1;
    if (check_status("cache refresh", hipfp8_weight_cache_refresh(ctx, cache, HIPFP8_DTYPE_BF16, w13, E * 2 * I * D, w2,
                                                                  E * D * I, &gen, NULL)))
        return 1;

    /* A workspace one byte short: refused, nothing written. */
    {
        hipfp8_status st = hipfp8_moe_experts_forward(ctx, &desc, cache, x, M * D, offs, E, y, M * D, saved, saved_len,
                                                      fws, fws_len - 1, &fwd_gen, NULL);
        printf("forward with a short workspace: %s -- %s\n", hipfp8_status_string(st), hipfp8_last_error_message());
        if (st != HIPFP8_STATUS_OUTPUT_TOO_SMALL || y[0] != 0xA5A5 || fwd_gen != 0) bad++;
    }

    if (check_status("forward", hipfp8_moe_experts_forward(ctx, &desc, cache, x, M * D, offs, E, y, M * D, saved,
                                                           saved_len, fws, fws_len, &fwd_gen, NULL)))
        return 1;
    if (check_status("backward", hipfp8_moe_experts_backward(ctx, &desc, cache, fwd_gen, saved, saved_len, dy, M * D, offs,
                                                             E, dx, M * D, dw13, E * 2 * I * D, dw2, E * D * I, bws,
                                                             bws_len, NULL)))
        return 1;

    reference(x, w13, w2, dy, offs, ry, rdx, rdw13, rdw2);
    errs[0] = rel_err(y, ry, offs[E - 1] * D);
    errs[1] = rel_err(dx, rdx, offs[E - 1] * D);
    errs[2] = rel_err(dw13, rdw13, E * 2 * I * D);
    errs[3] = rel_err(dw2, rdw2, E * D * I);
    printf("relative error vs double: y %.4f dx %.4f dW13 %.4f dW2 %.4f\n", errs[0], errs[1], errs[2], errs[3]);
    for (i = 0; i < 4; i++)
        if (!(errs[i] <= 0.15)) bad++;
    for (i = offs[E - 1] * D; i < M * D; i++)
        if (y[i] != 0xA5A5 || dx[i] != 0xA5A5) {
            fprintf(stderr, "unrouted element %d was written\n", i);
            bad++;
            break;
        }
    for (i = I * D; i < 2 * I * D; i++) /* expert 1 has no tokens: zero gradient (both halves) */
        if (dw13[i] != 0 || dw13[E * I * D + i] != 0) bad++;

    /* W13 from its two halves as a framework keeps them (torchtitan's w1 and w3: expert e's
     * gate rows, then its up rows): the same cache, so the same y, with no stacked copy. */
    {
        static uint16_t w_gate[E * I * D], w_up[E * I * D], y2[M * D];
        hipfp8_weight_cache *cache2 = NULL;
        uint64_t gen_h = 0, fwd_gen2 = 0;
        int e;
        for (e = 0; e < E; e++) {
            memcpy(w_gate + e * I * D, w13 + e * 2 * I * D, sizeof(uint16_t) * I * D);
            memcpy(w_up + e * I * D, w13 + e * 2 * I * D + I * D, sizeof(uint16_t) * I * D);
        }
        if (check_status("cache create", hipfp8_moe_experts_weight_cache_create(ctx, &desc, &cache2))) return 1;
        if (check_status("refresh halves", hipfp8_weight_cache_refresh_halves(ctx, cache2, HIPFP8_DTYPE_BF16, w_gate,
                                                                              E * I * D, w_up, E * I * D, w2,
                                                                              E * D * I, &gen_h, NULL)))
            return 1;
        if (check_status("forward (halves)", hipfp8_moe_experts_forward(ctx, &desc, cache2, x, M * D, offs, E, y2,
                                                                        M * D, saved, saved_len, fws, fws_len,
                                                                        &fwd_gen2, NULL)))
            return 1;
        if (memcmp(y, y2, sizeof(uint16_t) * offs[E - 1] * D) != 0) {
            fprintf(stderr, "y from the W13 halves differs from y from W13\n");
            bad++;
        }
        hipfp8_weight_cache_destroy(cache2);
    }

    /* An optimizer step updates W13 in place; refresh, and the old forward's saved tensors no
     * longer match the cache: the backward is refused. */
    for (i = 0; i < E * 2 * I * D; i++) w13[i] = f32_to_bf16_exact(-bf16_to_f32(w13[i]));
    if (check_status("refresh", hipfp8_weight_cache_refresh(ctx, cache, HIPFP8_DTYPE_BF16, w13, E * 2 * I * D, w2,
                                                            E * D * I, &gen2, NULL)))
        return 1;
    {
        hipfp8_status st = hipfp8_moe_experts_backward(ctx, &desc, cache, fwd_gen, saved, saved_len, dy, M * D, offs, E,
                                                       dx, M * D, dw13, E * 2 * I * D, dw2, E * D * I, bws, bws_len, NULL);
        printf("backward across a refresh (generation %llu -> %llu): %s\n", (unsigned long long)gen,
               (unsigned long long)gen2, hipfp8_status_string(st));
        if (st != HIPFP8_STATUS_NOT_SUPPORTED || gen2 != gen + 1) bad++;
    }

    hipfp8_weight_cache_destroy(cache);
    hipfp8_context_destroy(ctx);
    free(saved);
    free(fws);
    free(bws);
    if (bad) {
        fprintf(stderr, "06_moe_experts_recipe: %d mismatches\n", bad);
        return 1;
    }
    printf("06_moe_experts_recipe: OK (M=%d D=%d I=%d E=%d, an empty expert, 4 unrouted rows)\n", M, D, I, E);
    return 0;
}
