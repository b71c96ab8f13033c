/* check.h -- a tiny, independent FP8 oracle for the example programs.
 *
 * It shares no code with hipfp8: decode follows the format definitions directly, and encode
 * is a brute-force search for the nearest representable value (ties to the even code),
 * after saturating to +-max. Slow, obvious, and enough to check a few hundred elements.
 * Works as C11 and C++17. */
#ifndef HIPFP8_EXAMPLES_CHECK_H
#define HIPFP8_EXAMPLES_CHECK_H

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "hipfp8.h"

typedef struct fp8_spec {
    int mbits;    /* mantissa bits */
    int bias;     /* exponent bias */
    int fnuz;     /* single NaN 0x80, no -0, no Inf */
    int has_inf;  /* E5M2 (OCP): 0x7C is Inf */
    double max;   /* largest finite value */
} fp8_spec;

static inline fp8_spec fp8_spec_of(hipfp8_format f) {
    fp8_spec s;
    switch (f) {
    case HIPFP8_FORMAT_E5M2: s.mbits = 2; s.bias = 15; s.fnuz = 0; s.has_inf = 1; s.max = 57344.0; break;
    case HIPFP8_FORMAT_E4M3FNUZ: s.mbits = 3; s.bias = 8; s.fnuz = 1; s.has_inf = 0; s.max = 240.0; break;
    case HIPFP8_FORMAT_E5M2FNUZ: s.mbits = 2; s.bias = 16; s.fnuz = 1; s.has_inf = 0; s.max = 57344.0; break;
    default: s.mbits = 3; s.bias = 7; s.fnuz = 0; s.has_inf = 0; s.max = 448.0; break; /* E4M3FN */
    }
    return s;
}

static inline int fp8_is_nan(fp8_spec s, uint8_t c) {
    if (s.fnuz) return c == 0x80;
    if (s.has_inf) return (c & 0x7F) > 0x7C;
    return (c & 0x7F) == 0x7F; /* E4M3FN */
}

static inline double fp8_decode(fp8_spec s, uint8_t c) {
    int ebits = 7 - s.mbits;
    int e = (c >> s.mbits) & ((1 << ebits) - 1);
    int m = c & ((1 << s.mbits) - 1);
    double v;
    if (fp8_is_nan(s, c)) return NAN;
    if (s.has_inf && (c & 0x7F) == 0x7C) return (c & 0x80) ? -INFINITY : INFINITY;
    v = e == 0 ? ldexp(m, 1 - s.bias - s.mbits) : ldexp((1 << s.mbits) + m, e - s.bias - s.mbits);
    return (c & 0x80) ? -v : v;
}

/* encode(x): NaN -> canonical NaN; saturate; nearest, ties to even code; OCP keeps -0. */
static inline uint8_t fp8_encode(fp8_spec s, float xf) {
    double x = xf, best_err = INFINITY;
    int c, best = -1, neg = signbit(x) != 0;
    if (isnan(x)) return s.fnuz ? 0x80 : 0x7F;
    if (x > s.max) x = s.max;
    if (x < -s.max) x = -s.max;
    for (c = 0; c < 256; c++) {
        double v, err;
        if (fp8_is_nan(s, (uint8_t)c) || isinf(fp8_decode(s, (uint8_t)c))) continue;
        /* Search codes of x's sign (FNUZ: positive codes too for the unsigned zero). */
        if (((c & 0x80) != 0) != neg && !(s.fnuz && c == 0)) continue;
        v = fp8_decode(s, (uint8_t)c);
        err = fabs(v - x);
        if (err < best_err || (err == best_err && (c & 1) == 0)) {
            best_err = err;
            best = c;
        }
    }
    return (uint8_t)best;
}

/* torchao's amax_to_scale: fp8_max / max(amax, 1e-12) in double, stored as float;
 * optionally rounded down to a power of two. */
static inline float amax_to_scale(double fp8_max, float amax, int pow2) {
    float s = (float)(fp8_max / (amax > 1e-12 ? (double)amax : 1e-12));
    if (pow2) {
        int e;
        (void)frexpf(s, &e); /* s = f * 2^e, f in [0.5, 1) */
        s = ldexpf(1.0f, e - 1);
    }
    return s;
}

/* bf16 <-> float for values the examples choose exactly representable. */
static inline uint16_t f32_to_bf16_exact(float f) {
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return (uint16_t)(u >> 16);
}
static inline float bf16_to_f32(uint16_t b) {
    uint32_t u = (uint32_t)b << 16;
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

/* Print and return non-zero when a call fails. */
static inline int check_status(const char *what, hipfp8_status st) {
    if (st != HIPFP8_STATUS_SUCCESS) {
        fprintf(stderr, "%s failed: %s (%s)\n", what, hipfp8_status_string(st),
                hipfp8_last_error_message());
        return 1;
    }
    return 0;
}

#endif /* HIPFP8_EXAMPLES_CHECK_H */
