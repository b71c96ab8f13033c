// runtime_call.h -- the runtime-shim functions of an op call's host path (hip/runtime.hip):
// one call that checks every buffer of an op, one that makes the op's GPU current. Only
// hip/runtime.hip includes this header (no kernel translation unit does, so the kernels'
// object cache does not depend on it), and bindgen does not read it: src/sys.rs declares
// these two functions by hand, and its unit test `runtime_call_header_matches_sys` compares
// those declarations with the prototypes below.
#pragma once

#include "kernel_abi.h"

/// Whether every non-NULL pointer of `ptrs[0..n)` is device (or managed) memory of GPU
/// `ordinal`: `*bad` = the index of the first that is not (-1 when all are, NULL entries
/// included), `*bad_device` = the GPU that pointer belongs to (-1: host memory the runtime
/// does not know). One shim call per op instead of one per buffer; the runtime is still asked
/// about every pointer (hipPointerGetAttributes), in order, stopping at the first bad one.
HIPFP8_DECL int hipfp8_rt_check_pointers(const void* const* ptrs, int32_t n, int32_t ordinal, int32_t* bad,
    int32_t* bad_device) HIPFP8_NOEXCEPT;
/// Make GPU `ordinal` current for an op: clear the runtime's last error (so a launcher's
/// launch check reports its own launch, not an older failure), then set the device only when
/// another is current. `*previous` = the device that was current (the caller restores it with
/// hipfp8_rt_set_device when it differs from `ordinal`); on a failure it is `ordinal` (nothing
/// to restore).
HIPFP8_DECL int hipfp8_rt_activate(int32_t ordinal, int32_t* previous) HIPFP8_NOEXCEPT;
