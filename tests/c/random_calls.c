/* random_calls.c -- a randomized C client of the hipfp8 C ABI (CPU backend), built with
 * -fsanitize=address,undefined by tests/c_random_calls.rs and run for a few seconds.
 *
 * Each iteration picks an op, small random dimensions (sometimes 0), dtypes / formats / flags
 * (sometimes invalid), offsets (sometimes bad), buffers whose capacity is what the op needs
 * plus -2..+2 elements (sometimes NULL), each followed by a canary. After the call:
 *  - the status is a known value and hipfp8_status_string() names it;
 *  - on failure the last-error message starts with the function's name and no output byte
 *    changed; on success the message is "";
 *  - no canary byte changed (nothing written past a declared capacity) and no input changed.
 * ASan and UBSan watch this program's side of the ABI (struct layouts, pointers handed over);
 * the canaries watch the library's. Prints the counts and exits 0, or prints the first
 * violation and exits 1.
 *
 *   random_calls SECONDS SEED */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "hipfp8.h"

#define CANARY 64
#define CANARY_BYTE 0xCD
#define POISON 0xA5

static uint64_t rng;
static uint32_t next(void) {
  rng ^= rng << 13;
  rng ^= rng >> 7;
  rng ^= rng << 17;
  return (uint32_t)(rng >> 16);
}
static size_t below(size_t n) { return n ? next() % n : 0; }

typedef struct {
  const char *name;
  unsigned char *mem; /* data + canary */
  size_t elems, esz, bytes;
  int output, null;
  unsigned char *before; /* copy of data + canary before the call */
} buf_t;

static void buf_init(buf_t *b, const char *name, size_t needed, size_t esz, int output) {
  long slack = (long)below(5) - 2;
  long n = (long)needed + slack;
  b->name = name;
  b->elems = n < 0 ? 0 : (size_t)n;
  b->esz = esz;
  b->bytes = b->elems * esz;
  b->output = output;
  b->null = b->elems == 0 ? (int)below(2) : below(40) == 0;
  b->mem = malloc(b->bytes + CANARY);
  b->before = malloc(b->bytes + CANARY);
  for (size_t i = 0; i < b->bytes; ++i) b->mem[i] = output ? POISON : (unsigned char)next();
  memset(b->mem + b->bytes, CANARY_BYTE, CANARY);
  memcpy(b->before, b->mem, b->bytes + CANARY);
}
static void *buf_ptr(buf_t *b) { return b->null ? NULL : b->mem; }
static size_t buf_len(buf_t *b) { return b->elems; }
static void buf_free(buf_t *b) {
  free(b->mem);
  free(b->before);
}

static int fail(const char *op, const char *what) {
  fprintf(stderr, "random_calls: %s: %s (last error: %s)\n", op, what, hipfp8_last_error_message());
  return 1;
}

/* Check the buffers after a call with status st. */
static int check(const char *op, hipfp8_status st, buf_t *bs, int n) {
  if ((unsigned)st > 20u) return fail(op, "unknown status");
  if (!hipfp8_status_string((uint32_t)st)) return fail(op, "no status string");
  const char *msg = hipfp8_last_error_message();
  if (!msg) return fail(op, "NULL last-error message");
  if (st == HIPFP8_STATUS_SUCCESS && msg[0] != 0) return fail(op, "message after success");
  if (st != HIPFP8_STATUS_SUCCESS && strncmp(msg, op, strlen(op)) != 0) return fail(op, "message does not name the function");
  for (int i = 0; i < n; ++i) {
    buf_t *b = &bs[i];
    if (memcmp(b->mem + b->bytes, b->before + b->bytes, CANARY) != 0) {
      fprintf(stderr, "buffer `%s` (%zu elements)\n", b->name, b->elems);
      return fail(op, "canary overwritten: a write past the declared capacity");
    }
    if ((!b->output || st != HIPFP8_STATUS_SUCCESS) && memcmp(b->mem, b->before, b->bytes) != 0) {
      fprintf(stderr, "buffer `%s`\n", b->name);
      return fail(op, b->output ? "output written on failure" : "input modified");
    }
  }
  return 0;
}

static uint32_t pick_dtype(void) { return below(16) ? (uint32_t)below(2) : (uint32_t)next(); }
static uint32_t pick_format(void) { return below(16) ? (uint32_t)below(6) : 6 + (uint32_t)below(100); }
static uint32_t pick_flags(void) { return below(16) ? (uint32_t)below(2) : (uint32_t)next(); }
static size_t pick_dim(void) { return below(8) == 0 ? 0 : 1 + below(40); }
static size_t esz_of(uint32_t dtype) { return dtype == HIPFP8_DTYPE_F32 ? 4 : 2; }

static void fill_offsets(buf_t *b, size_t extent) {
  if (b->elems == 0) return;
  int32_t *o = (int32_t *)b->mem;
  int bad = below(6) == 0;
  int32_t prev = 0;
  for (size_t i = 0; i < b->elems; ++i) {
    int32_t v = prev + (int32_t)below(extent / b->elems + 2);
    if (v > (int32_t)extent) v = (int32_t)extent;
    if (bad && below(4) == 0) v = (int32_t)below(2 * extent + 3) - 2;
    o[i] = v;
    prev = v < 0 ? 0 : v;
  }
  if (!bad) o[b->elems - 1] = (int32_t)extent;
  memcpy(b->before, b->mem, b->bytes);
}

int main(int argc, char **argv) {
  double secs = argc > 1 ? atof(argv[1]) : 3.0;
  rng = argc > 2 ? strtoull(argv[2], NULL, 10) | 1 : 88172645463325252ull;
  hipfp8_context *ctx = NULL;
  if (hipfp8_context_create(HIPFP8_BACKEND_CPU, 0, &ctx) != HIPFP8_STATUS_SUCCESS) return fail("create", "no CPU context");
  unsigned long calls = 0, ok = 0;
  clock_t t0 = clock();
  while ((double)(clock() - t0) / CLOCKS_PER_SEC < secs) {
    buf_t b[5];
    int n = 0;
    hipfp8_status st;
    const char *op;
    size_t m = pick_dim(), k = pick_dim(), g = below(6);
    uint32_t dt = pick_dtype();
    size_t es = esz_of(dt);
    switch (below(5)) {
      case 0: {
        op = "hipfp8_rowwise_2d";
        hipfp8_cast_2d_desc d = {sizeof d, dt, pick_format(), pick_flags(), m, k};
        if (below(30) == 0) d.size -= 8;
        buf_init(&b[0], "x", m * k, es, 0);
        buf_init(&b[1], "out", m * k, 1, 1);
        buf_init(&b[2], "scales", m, 4, 1);
        n = 3;
        st = hipfp8_rowwise_2d(ctx, &d, buf_ptr(&b[0]), buf_len(&b[0]), buf_ptr(&b[1]), buf_len(&b[1]), buf_ptr(&b[2]),
                               buf_len(&b[2]), NULL);
        break;
      }
      case 1:
      case 2: {
        int colwise = below(2);
        op = colwise ? "hipfp8_per_group_colwise" : "hipfp8_per_group_rowwise";
        hipfp8_cast_2d_desc d = {sizeof d, dt, pick_format(), pick_flags(), m, k};
        buf_init(&b[0], "x", m * k, es, 0);
        buf_init(&b[1], "offs", g, 4, 0);
        b[1].null = g == 0 && below(2);
        fill_offsets(&b[1], colwise ? m : k);
        buf_init(&b[2], "out", m * k, 1, 1);
        buf_init(&b[3], "scales", g * (colwise ? k : m), 4, 1);
        n = 4;
        st = (colwise ? hipfp8_per_group_colwise : hipfp8_per_group_rowwise)(
            ctx, &d, buf_ptr(&b[0]), buf_len(&b[0]), (const int32_t *)buf_ptr(&b[1]), buf_len(&b[1]), buf_ptr(&b[2]),
            buf_len(&b[2]), buf_ptr(&b[3]), buf_len(&b[3]), NULL);
        break;
      }
      case 3: {
        op = "hipfp8_tensorwise";
        size_t len = m * k;
        hipfp8_tensorwise_desc d = {sizeof d, dt, pick_format(), pick_flags(), len};
        buf_init(&b[0], "x", len, es, 0);
        buf_init(&b[1], "out", len, 1, 1);
        buf_init(&b[2], "scale", 1, 4, 1);
        buf_init(&b[3], "amax", 1, 4, 1);
        n = 4;
        st = hipfp8_tensorwise(ctx, &d, buf_ptr(&b[0]), buf_len(&b[0]), buf_ptr(&b[1]), buf_len(&b[1]), buf_ptr(&b[2]),
                               buf_len(&b[2]), buf_ptr(&b[3]), buf_len(&b[3]), NULL);
        break;
      }
      default: {
        op = "hipfp8_cast_transpose";
        uint32_t scaling = below(10) ? (uint32_t)below(2) : 7;
        hipfp8_cast_transpose_desc d = {sizeof d, dt, pick_format(), pick_flags(), scaling, m, k};
        buf_init(&b[0], "x", m * k, es, 0);
        buf_init(&b[1], "out", m * k, 1, 1);
        buf_init(&b[2], "out_t", m * k, 1, 1);
        buf_init(&b[3], "scales", scaling == HIPFP8_SCALING_ROWWISE ? m : 1, 4, 1);
        buf_init(&b[4], "scales_t", scaling == HIPFP8_SCALING_ROWWISE ? k : 1, 4, 1);
        n = 5;
        st = hipfp8_cast_transpose(ctx, &d, buf_ptr(&b[0]), buf_len(&b[0]), buf_ptr(&b[1]), buf_len(&b[1]),
                                   buf_ptr(&b[2]), buf_len(&b[2]), buf_ptr(&b[3]), buf_len(&b[3]), buf_ptr(&b[4]),
                                   buf_len(&b[4]), NULL);
        break;
      }
    }
    int bad = check(op, st, b, n);
    for (int i = 0; i < n; ++i) buf_free(&b[i]);
    if (bad) return 1;
    ++calls;
    ok += st == HIPFP8_STATUS_SUCCESS;
  }
  hipfp8_context_destroy(ctx);
  printf("random_calls: %lu calls (%lu succeeded) in %.1f s under ASan+UBSan: no violation\n", calls, ok, secs);
  return ok > 0 && calls > ok ? 0 : fail("summary", "no successful or no failing call");
}
