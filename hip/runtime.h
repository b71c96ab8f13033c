// runtime.h -- the extern "C" functions of the runtime shim (hip/runtime.hip) and the
// self-test kernels (hip/selftest.hip): the one written prototype of each. The .hip files
// include this header, so the C++ compiler checks every definition against it; src/sys/
// launchers.rs is generated from hip/launchers.h (which includes this) by bindgen
// (tests/sys_bindings.rs). Pointers are raw runtime handles or device pointers.
#pragma once

#include "kernel_abi.h"
#ifndef HIPFP8_BINDGEN
#include "port.h"
#endif

/// Fixed-layout device description (its size is checked at run time through
/// hipfp8_rt_props_size).
typedef struct hipfp8_device_props {
  char name[256];
  char arch[256];
  int32_t vendor;  // 1 = AMD, 2 = NVIDIA
  int32_t multiprocessor_count;
  int32_t wavefront_size;
  int32_t cc_major;
  int32_t cc_minor;
  int32_t max_threads_per_block;
  int64_t total_global_mem;
  int64_t l2_cache_bytes;
  int64_t shared_mem_per_block;
  int64_t shared_mem_per_block_optin;
  int32_t pci_bus_id;
  int32_t pci_device_id;
} hipfp8_device_props;

// Runtime shim (hip/runtime.hip).
HIPFP8_DECL int hipfp8_rt_props_size(uint64_t* size) HIPFP8_NOEXCEPT;
HIPFP8_DECL int hipfp8_rt_device_count(int32_t* count) HIPFP8_NOEXCEPT;
HIPFP8_DECL int hipfp8_rt_set_device(int32_t ordinal) HIPFP8_NOEXCEPT;
HIPFP8_DECL int hipfp8_rt_get_device(int32_t* ordinal) HIPFP8_NOEXCEPT;
HIPFP8_DECL int hipfp8_rt_device_props(int32_t ordinal, hipfp8_device_props* out) HIPFP8_NOEXCEPT;
HIPFP8_DECL int hipfp8_rt_mem_info(uint64_t* free_bytes, uint64_t* total_bytes) HIPFP8_NOEXCEPT;
HIPFP8_DECL int hipfp8_rt_versions(int32_t* driver, int32_t* runtime) HIPFP8_NOEXCEPT;
HIPFP8_DECL int hipfp8_rt_device_synchronize(void) HIPFP8_NOEXCEPT;
HIPFP8_DECL int hipfp8_rt_get_last_error(void) HIPFP8_NOEXCEPT;
HIPFP8_DECL int hipfp8_rt_malloc(void** ptr, uint64_t bytes) HIPFP8_NOEXCEPT;
HIPFP8_DECL int hipfp8_rt_free(void* ptr) HIPFP8_NOEXCEPT;
HIPFP8_DECL int hipfp8_rt_memcpy(void* dst, const void* src, uint64_t bytes, int32_t kind) HIPFP8_NOEXCEPT;
HIPFP8_DECL int hipfp8_rt_memcpy_async(void* dst, const void* src, uint64_t bytes, int32_t kind,
    hipStream_t stream) HIPFP8_NOEXCEPT;
HIPFP8_DECL int hipfp8_rt_memset(void* dst, int32_t value, uint64_t bytes) HIPFP8_NOEXCEPT;
HIPFP8_DECL int hipfp8_rt_memset_async(void* dst, int32_t value, uint64_t bytes,
    hipStream_t stream) HIPFP8_NOEXCEPT;
HIPFP8_DECL int hipfp8_rt_pointer_info(const void* ptr, int32_t* is_device, int32_t* device) HIPFP8_NOEXCEPT;
HIPFP8_DECL int hipfp8_rt_stream_create(hipStream_t* stream, int32_t non_blocking) HIPFP8_NOEXCEPT;
HIPFP8_DECL int hipfp8_rt_stream_destroy(hipStream_t stream) HIPFP8_NOEXCEPT;
HIPFP8_DECL int hipfp8_rt_stream_synchronize(hipStream_t stream) HIPFP8_NOEXCEPT;
HIPFP8_DECL int hipfp8_rt_stream_query(hipStream_t stream, int32_t* done) HIPFP8_NOEXCEPT;
HIPFP8_DECL int hipfp8_rt_stream_wait_event(hipStream_t stream, hipEvent_t event) HIPFP8_NOEXCEPT;
HIPFP8_DECL int hipfp8_rt_event_create(hipEvent_t* event, int32_t timing) HIPFP8_NOEXCEPT;
HIPFP8_DECL int hipfp8_rt_event_destroy(hipEvent_t event) HIPFP8_NOEXCEPT;
HIPFP8_DECL int hipfp8_rt_event_record(hipEvent_t event, hipStream_t stream) HIPFP8_NOEXCEPT;
HIPFP8_DECL int hipfp8_rt_event_synchronize(hipEvent_t event) HIPFP8_NOEXCEPT;
HIPFP8_DECL int hipfp8_rt_event_elapsed_ms(float* ms, hipEvent_t start, hipEvent_t end) HIPFP8_NOEXCEPT;
HIPFP8_DECL int hipfp8_rt_error_string(int32_t code, const char** name, const char** desc) HIPFP8_NOEXCEPT;
/// Whether `stream` is capturing into a graph now (`*capturing` = 1).
HIPFP8_DECL int hipfp8_rt_stream_is_capturing(hipStream_t stream, int32_t* capturing) HIPFP8_NOEXCEPT;
/// Begin capturing `stream` into a graph; mode 0 global, 1 thread-local, 2 relaxed.
HIPFP8_DECL int hipfp8_rt_stream_begin_capture(hipStream_t stream, int32_t mode) HIPFP8_NOEXCEPT;
/// End the capture of `stream`: `*graph` is the captured graph (destroy it).
HIPFP8_DECL int hipfp8_rt_stream_end_capture(hipStream_t stream, void** graph) HIPFP8_NOEXCEPT;
/// An executable graph of `graph` (destroy it with hipfp8_rt_graph_exec_destroy).
HIPFP8_DECL int hipfp8_rt_graph_instantiate(void** exec, void* graph) HIPFP8_NOEXCEPT;
/// Launch an executable graph on `stream`.
HIPFP8_DECL int hipfp8_rt_graph_launch(void* exec, hipStream_t stream) HIPFP8_NOEXCEPT;
HIPFP8_DECL int hipfp8_rt_graph_destroy(void* graph) HIPFP8_NOEXCEPT;
HIPFP8_DECL int hipfp8_rt_graph_exec_destroy(void* exec) HIPFP8_NOEXCEPT;

// Self-test kernels (hip/selftest.hip).
/// `out[i] = (in ? in[i] : 0) + mix32(i * 0x9E3779B9 + seed)` for i in 0..n (wrapping).
HIPFP8_DECL int hipfp8_selftest_fill_launch(const uint32_t* in, uint32_t* out, int64_t n, uint32_t seed,
    hipStream_t stream) HIPFP8_NOEXCEPT;
/// `out[0]` = HIPFP8_WAVE as compiled, `out[1]` = the device's warpSize.
HIPFP8_DECL int hipfp8_selftest_wave_launch(int32_t* out, hipStream_t stream) HIPFP8_NOEXCEPT;
