// runtime.hip -- the runtime shim: the few HIP runtime calls hipfp8 needs, behind a flat C ABI
// that src/sys.rs declares. Rust never links the vendor runtime's own symbols directly, so
// the same declarations serve ROCm (libamdhip64) and CUDA (cudart_static) builds: hip/port.h
// maps the names. Every function is extern "C", noexcept, and returns an int status
// (0 = success, > 0 = the runtime's error code, < 0 = HIPFP8_KSTATUS_*).
#include "port.h"
#include "kernel_abi.h"
#include "runtime.h"
#include "runtime_call.h"

#include <string.h>

// A failed runtime call leaves its code behind as the runtime's "last error", and the next
// launch check (hipGetLastError right after a kernel launch) would report it as that launch's
// failure. So every error the shim returns is also cleared here.
static inline int shim_status(hipError_t e) {
  if (e != hipSuccess) (void)hipGetLastError();
  return (int)e;
}

static hipMemcpyKind copy_kind(int kind, bool* ok) {
  *ok = true;
  switch (kind) {
    case HIPFP8_COPY_H2D: return hipMemcpyHostToDevice;
    case HIPFP8_COPY_D2H: return hipMemcpyDeviceToHost;
    case HIPFP8_COPY_D2D: return hipMemcpyDeviceToDevice;
    default: *ok = false; return hipMemcpyDefault;
  }
}

HIPFP8_EXTERN int hipfp8_rt_props_size(uint64_t* size) noexcept {
  if (!size) return HIPFP8_KSTATUS_NULL_POINTER;
  *size = sizeof(hipfp8_device_props);
  return 0;
}

// Number of visible devices. "No device" and "no driver" are not errors here: they mean 0,
// which is what a GPU build on a machine without a GPU must report.
HIPFP8_EXTERN int hipfp8_rt_device_count(int32_t* count) noexcept {
  if (!count) return HIPFP8_KSTATUS_NULL_POINTER;
  int n = 0;
  hipError_t e = hipGetDeviceCount(&n);
  if (e == hipErrorNoDevice || e == hipErrorInsufficientDriver) {
    (void)hipGetLastError();  // clear it so the next call does not see it
    *count = 0;
    return 0;
  }
  if (e != hipSuccess) return shim_status(e);
  *count = n;
  return 0;
}

HIPFP8_EXTERN int hipfp8_rt_set_device(int32_t ordinal) noexcept { return shim_status(hipSetDevice(ordinal)); }

HIPFP8_EXTERN int hipfp8_rt_get_device(int32_t* ordinal) noexcept {
  if (!ordinal) return HIPFP8_KSTATUS_NULL_POINTER;
  int d = 0;
  hipError_t e = hipGetDevice(&d);
  *ordinal = d;
  return shim_status(e);
}

HIPFP8_EXTERN int hipfp8_rt_device_props(int32_t ordinal, hipfp8_device_props* out) noexcept {
  if (!out) return HIPFP8_KSTATUS_NULL_POINTER;
  hipDeviceProp_t p;
  memset(&p, 0, sizeof(p));
  hipError_t e = hipGetDeviceProperties(&p, ordinal);
  if (e != hipSuccess) return shim_status(e);
  memset(out, 0, sizeof(*out));
  snprintf(out->name, sizeof(out->name), "%s", p.name);
  hipfp8_arch_string(&p, out->arch, sizeof(out->arch));
  out->vendor = HIPFP8_VENDOR_ID;
  out->multiprocessor_count = p.multiProcessorCount;
  out->wavefront_size = p.warpSize;
  out->cc_major = p.major;
  out->cc_minor = p.minor;
  out->max_threads_per_block = p.maxThreadsPerBlock;
  out->total_global_mem = (int64_t)p.totalGlobalMem;
  out->l2_cache_bytes = (int64_t)p.l2CacheSize;
  out->shared_mem_per_block = (int64_t)p.sharedMemPerBlock;
  out->shared_mem_per_block_optin = (int64_t)p.sharedMemPerBlockOptin;
  out->pci_bus_id = p.pciBusID;
  out->pci_device_id = p.pciDeviceID;
  return 0;
}

HIPFP8_EXTERN int hipfp8_rt_mem_info(uint64_t* free_bytes, uint64_t* total_bytes) noexcept {
  if (!free_bytes || !total_bytes) return HIPFP8_KSTATUS_NULL_POINTER;
  size_t f = 0, t = 0;
  hipError_t e = hipMemGetInfo(&f, &t);
  *free_bytes = f;
  *total_bytes = t;
  return shim_status(e);
}

HIPFP8_EXTERN int hipfp8_rt_versions(int32_t* driver, int32_t* runtime) noexcept {
  if (!driver || !runtime) return HIPFP8_KSTATUS_NULL_POINTER;
  int d = 0, r = 0;
  hipError_t e = hipDriverGetVersion(&d);
  if (e == hipSuccess) e = hipRuntimeGetVersion(&r);
  *driver = d;
  *runtime = r;
  return shim_status(e);
}

HIPFP8_EXTERN int hipfp8_rt_device_synchronize(void) noexcept { return shim_status(hipDeviceSynchronize()); }

// Returns and clears the runtime's last error (hipGetLastError semantics).
HIPFP8_EXTERN int hipfp8_rt_get_last_error(void) noexcept { return (int)hipGetLastError(); }

// ---------------------------------------------------------------------------------- memory

HIPFP8_EXTERN int hipfp8_rt_malloc(void** ptr, uint64_t bytes) noexcept {
  if (!ptr) return HIPFP8_KSTATUS_NULL_POINTER;
  *ptr = nullptr;
  if (bytes == 0) return 0;  // zero-length buffers own no memory
  return shim_status(hipMalloc(ptr, (size_t)bytes));
}

HIPFP8_EXTERN int hipfp8_rt_free(void* ptr) noexcept {
  if (!ptr) return 0;
  return shim_status(hipFree(ptr));
}

// The synchronous copy and fill return when the bytes are in place, for work queued afterwards
// on ANY stream: hipMemcpy may return before a pageable host-to-device or a device-to-device
// copy has landed, and hipMemset of device memory is asynchronous; both run on the legacy
// default stream, which non-blocking streams do not wait for. So wait for that stream.
static int landed(hipError_t e) {
  if (e == hipSuccess) e = hipStreamSynchronize(nullptr);
  return shim_status(e);
}

HIPFP8_EXTERN int hipfp8_rt_memcpy(void* dst, const void* src, uint64_t bytes, int32_t kind) noexcept {
  bool ok;
  hipMemcpyKind k = copy_kind(kind, &ok);
  if (!ok) return HIPFP8_KSTATUS_INVALID_ENUM;
  if (bytes == 0) return 0;
  if (!dst || !src) return HIPFP8_KSTATUS_NULL_POINTER;
  return landed(hipMemcpy(dst, src, (size_t)bytes, k));
}

HIPFP8_EXTERN int hipfp8_rt_memcpy_async(void* dst, const void* src, uint64_t bytes, int32_t kind,
                                         hipStream_t stream) noexcept {
  bool ok;
  hipMemcpyKind k = copy_kind(kind, &ok);
  if (!ok) return HIPFP8_KSTATUS_INVALID_ENUM;
  if (bytes == 0) return 0;
  if (!dst || !src) return HIPFP8_KSTATUS_NULL_POINTER;
  return shim_status(hipMemcpyAsync(dst, src, (size_t)bytes, k, stream));
}

HIPFP8_EXTERN int hipfp8_rt_memset(void* dst, int32_t value, uint64_t bytes) noexcept {
  if (bytes == 0) return 0;
  if (!dst) return HIPFP8_KSTATUS_NULL_POINTER;
  return landed(hipMemset(dst, value, (size_t)bytes));
}

HIPFP8_EXTERN int hipfp8_rt_memset_async(void* dst, int32_t value, uint64_t bytes, hipStream_t stream) noexcept {
  if (bytes == 0) return 0;
  if (!dst) return HIPFP8_KSTATUS_NULL_POINTER;
  return shim_status(hipMemsetAsync(dst, value, (size_t)bytes, stream));
}

// What a pointer is: *is_device = 1 and *device = its ordinal for device (or managed)
// memory, *is_device = 0 for host memory the runtime does not know (HIP reports those as
// an invalid value; that is an answer here, not an error).
HIPFP8_EXTERN int hipfp8_rt_pointer_info(const void* ptr, int32_t* is_device, int32_t* device) noexcept {
  if (!is_device || !device) return HIPFP8_KSTATUS_NULL_POINTER;
  *is_device = 0;
  *device = -1;
  if (!ptr) return 0;
  hipPointerAttribute_t a;
  memset(&a, 0, sizeof(a));
  hipError_t e = hipPointerGetAttributes(&a, ptr);
  if (e != hipSuccess) {
    (void)hipGetLastError();
    return 0;
  }
  if (a.type == hipMemoryTypeDevice || a.type == hipMemoryTypeManaged) {
    *is_device = 1;
    *device = a.device;
  }
  return 0;
}

// The pointer check of one op call (runtime_call.h): hipfp8_rt_pointer_info's answer for each
// pointer, in order, up to the first that is not memory of `ordinal`.
HIPFP8_EXTERN int hipfp8_rt_check_pointers(const void* const* ptrs, int32_t n, int32_t ordinal, int32_t* bad,
                                           int32_t* bad_device) noexcept {
  if (!bad || !bad_device || (n > 0 && !ptrs)) return HIPFP8_KSTATUS_NULL_POINTER;
  *bad = -1;
  *bad_device = -1;
  for (int32_t i = 0; i < n; ++i) {
    int32_t is_device = 0, device = -1;
    if (!ptrs[i]) continue;
    (void)hipfp8_rt_pointer_info(ptrs[i], &is_device, &device);
    if (!is_device || device != ordinal) {
      *bad = i;
      *bad_device = is_device ? device : -1;
      return 0;
    }
  }
  return 0;
}

// The device activation of one op call (runtime_call.h).
HIPFP8_EXTERN int hipfp8_rt_activate(int32_t ordinal, int32_t* previous) noexcept {
  if (!previous) return HIPFP8_KSTATUS_NULL_POINTER;
  *previous = ordinal;
  (void)hipGetLastError();
  int cur = -1;
  hipError_t e = hipGetDevice(&cur);
  if (e != hipSuccess) return shim_status(e);
  if (cur == ordinal) return 0;
  e = hipSetDevice(ordinal);
  if (e != hipSuccess) return shim_status(e);
  *previous = cur;
  return 0;
}

// ---------------------------------------------------------------------------------- streams

HIPFP8_EXTERN int hipfp8_rt_stream_create(hipStream_t* stream, int32_t non_blocking) noexcept {
  if (!stream) return HIPFP8_KSTATUS_NULL_POINTER;
  *stream = nullptr;
  if (non_blocking) return shim_status(hipStreamCreateWithFlags(stream, hipStreamNonBlocking));
  return shim_status(hipStreamCreate(stream));
}

HIPFP8_EXTERN int hipfp8_rt_stream_destroy(hipStream_t stream) noexcept {
  if (!stream) return 0;  // the default stream is never destroyed
  return shim_status(hipStreamDestroy(stream));
}

HIPFP8_EXTERN int hipfp8_rt_stream_synchronize(hipStream_t stream) noexcept {
  return shim_status(hipStreamSynchronize(stream));
}

// 1 in *done when all work queued on the stream has finished, else 0.
HIPFP8_EXTERN int hipfp8_rt_stream_query(hipStream_t stream, int32_t* done) noexcept {
  if (!done) return HIPFP8_KSTATUS_NULL_POINTER;
  hipError_t e = hipStreamQuery(stream);
  *done = e == hipSuccess;
  if (e == hipErrorNotReady) {
    (void)hipGetLastError();
    return 0;
  }
  return shim_status(e);
}

HIPFP8_EXTERN int hipfp8_rt_stream_wait_event(hipStream_t stream, hipEvent_t event) noexcept {
  if (!event) return HIPFP8_KSTATUS_NULL_POINTER;
  return shim_status(hipStreamWaitEvent(stream, event, 0));
}

// ---------------------------------------------------------------------------------- events

HIPFP8_EXTERN int hipfp8_rt_event_create(hipEvent_t* event, int32_t timing) noexcept {
  if (!event) return HIPFP8_KSTATUS_NULL_POINTER;
  *event = nullptr;
  return shim_status(hipEventCreateWithFlags(event, timing ? hipEventDefault : hipEventDisableTiming));
}

HIPFP8_EXTERN int hipfp8_rt_event_destroy(hipEvent_t event) noexcept {
  if (!event) return 0;
  return shim_status(hipEventDestroy(event));
}

HIPFP8_EXTERN int hipfp8_rt_event_record(hipEvent_t event, hipStream_t stream) noexcept {
  if (!event) return HIPFP8_KSTATUS_NULL_POINTER;
  return shim_status(hipEventRecord(event, stream));
}

HIPFP8_EXTERN int hipfp8_rt_event_synchronize(hipEvent_t event) noexcept {
  if (!event) return HIPFP8_KSTATUS_NULL_POINTER;
  return shim_status(hipEventSynchronize(event));
}

HIPFP8_EXTERN int hipfp8_rt_event_elapsed_ms(float* ms, hipEvent_t start, hipEvent_t end) noexcept {
  if (!ms || !start || !end) return HIPFP8_KSTATUS_NULL_POINTER;
  *ms = 0.0f;
  return shim_status(hipEventElapsedTime(ms, start, end));
}

// ---------------------------------------------------------------------------------- capture

HIPFP8_EXTERN int hipfp8_rt_stream_is_capturing(hipStream_t stream, int32_t* capturing) noexcept {
  if (!capturing) return HIPFP8_KSTATUS_NULL_POINTER;
  hipStreamCaptureStatus st = hipStreamCaptureStatusNone;
  const int e = shim_status(hipStreamIsCapturing(stream, &st));
  *capturing = e == 0 && st != hipStreamCaptureStatusNone;
  return e;
}

HIPFP8_EXTERN int hipfp8_rt_stream_begin_capture(hipStream_t stream, int32_t mode) noexcept {
  if (mode < 0 || mode > 2) return HIPFP8_KSTATUS_INVALID_ENUM;
  const auto m = mode == 0 ? hipStreamCaptureModeGlobal
                 : mode == 1 ? hipStreamCaptureModeThreadLocal
                             : hipStreamCaptureModeRelaxed;
  return shim_status(hipStreamBeginCapture(stream, m));
}

HIPFP8_EXTERN int hipfp8_rt_stream_end_capture(hipStream_t stream, void** graph) noexcept {
  if (!graph) return HIPFP8_KSTATUS_NULL_POINTER;
  hipGraph_t g = nullptr;
  const int e = shim_status(hipStreamEndCapture(stream, &g));
  *graph = (void*)g;
  return e;
}

HIPFP8_EXTERN int hipfp8_rt_graph_instantiate(void** exec, void* graph) noexcept {
  if (!exec || !graph) return HIPFP8_KSTATUS_NULL_POINTER;
  hipGraphExec_t x = nullptr;
  const int e = shim_status(hipGraphInstantiateWithFlags(&x, (hipGraph_t)graph, 0));
  *exec = (void*)x;
  return e;
}

HIPFP8_EXTERN int hipfp8_rt_graph_launch(void* exec, hipStream_t stream) noexcept {
  if (!exec) return HIPFP8_KSTATUS_NULL_POINTER;
  return shim_status(hipGraphLaunch((hipGraphExec_t)exec, stream));
}

HIPFP8_EXTERN int hipfp8_rt_graph_destroy(void* graph) noexcept {
  if (!graph) return 0;
  return shim_status(hipGraphDestroy((hipGraph_t)graph));
}

HIPFP8_EXTERN int hipfp8_rt_graph_exec_destroy(void* exec) noexcept {
  if (!exec) return 0;
  return shim_status(hipGraphExecDestroy((hipGraphExec_t)exec));
}

// ---------------------------------------------------------------------------------- errors

// Static strings for a status: the runtime's name/description for > 0, hipfp8's own for <= 0.
HIPFP8_EXTERN int hipfp8_rt_error_string(int32_t code, const char** name, const char** desc) noexcept {
  if (!name || !desc) return HIPFP8_KSTATUS_NULL_POINTER;
  switch (code) {
    case HIPFP8_KSTATUS_OK: *name = "HIPFP8_KSTATUS_OK"; *desc = "success"; return 0;
    case HIPFP8_KSTATUS_INVALID_ENUM:
      *name = "HIPFP8_KSTATUS_INVALID_ENUM"; *desc = "unknown format, dtype or mode id"; return 0;
    case HIPFP8_KSTATUS_INVALID_SHAPE:
      *name = "HIPFP8_KSTATUS_INVALID_SHAPE"; *desc = "negative or overflowing sizes"; return 0;
    case HIPFP8_KSTATUS_MISALIGNED:
      *name = "HIPFP8_KSTATUS_MISALIGNED"; *desc = "pointer not aligned as the kernel requires"; return 0;
    case HIPFP8_KSTATUS_UNSUPPORTED:
      *name = "HIPFP8_KSTATUS_UNSUPPORTED"; *desc = "not implemented for this build or target"; return 0;
    case HIPFP8_KSTATUS_NULL_POINTER:
      *name = "HIPFP8_KSTATUS_NULL_POINTER"; *desc = "null pointer"; return 0;
    default: break;
  }
  if (code < 0) {
    *name = "HIPFP8_KSTATUS_UNKNOWN";
    *desc = "unknown hipfp8 status";
    return 0;
  }
  *name = hipGetErrorName((hipError_t)code);
  *desc = hipGetErrorString((hipError_t)code);
  return 0;
}
