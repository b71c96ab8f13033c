// port.h -- the ONLY vendor-aware file of hipfp8.
//
// Every kernel and launcher is written in HIP. On AMD (hipcc, __HIP_PLATFORM_AMD__) this header
// includes the HIP runtime. On NVIDIA (nvcc) it maps the HIP names we use onto CUDA.
// It also says, per compilation target, which hardware FP8 conversions exist and the
// wavefront size. Kernels never test vendor macros themselves: they test HIPFP8_* macros.
#pragma once

#include <stdint.h>

#if defined(__HIPCC__) || defined(__HIP_PLATFORM_AMD__)
// ----------------------------------------------------------------------------- AMD / ROCm
#define HIPFP8_VENDOR_AMD 1
#include <hip/hip_runtime.h>
#include <hip/hip_bf16.h>

typedef __hip_bfloat16 hipfp8_bf16;

// Wavefront size: 64 on CDNA (gfx9xx); known at compile time per device pass.
#if defined(__AMDGCN_WAVEFRONT_SIZE)
#define HIPFP8_WAVE __AMDGCN_WAVEFRONT_SIZE
#else
#define HIPFP8_WAVE 64
#endif

// Hardware FP8 conversions (v_cvt_pk_fp8_f32 / v_cvt_pk_bf8_f32). Same opcode, different
// flavour: FNUZ on gfx940/941/942, OCP on gfx950.
#if defined(__gfx940__) || defined(__gfx941__) || defined(__gfx942__)
#define HIPFP8_HW_FP8_FNUZ 1
#elif defined(__gfx950__)
#define HIPFP8_HW_FP8_OCP 1
#endif

#define HIPFP8_LDG(p) (*(p))
static inline __device__ float hipfp8_bf16_to_f32(hipfp8_bf16 v) { return __bfloat162float(v); }
static inline __device__ hipfp8_bf16 hipfp8_f32_to_bf16(float v) { return __float2bfloat16(v); }

#else
// ----------------------------------------------------------------------------- NVIDIA / CUDA
#define HIPFP8_VENDOR_NVIDIA 1
#include <cuda_runtime.h>
#include <cuda_bf16.h>
#include <cuda_fp8.h>

typedef __nv_bfloat16 hipfp8_bf16;

#define HIPFP8_WAVE 32

// sm_89+ converts f32x2 -> e4m3x2 / e5m2x2 (OCP, RNE, satfinite) in one instruction.
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 890
#define HIPFP8_HW_FP8_OCP 1
#endif

// HIP runtime names used by hipfp8, mapped onto CUDA.
typedef cudaError_t hipError_t;
typedef cudaStream_t hipStream_t;
typedef cudaEvent_t hipEvent_t;
typedef cudaDeviceProp hipDeviceProp_t;
#define hipSuccess cudaSuccess
#define hipGetLastError cudaGetLastError
#define hipPeekAtLastError cudaPeekAtLastError
#define hipGetErrorString cudaGetErrorString
#define hipGetErrorName cudaGetErrorName
#define hipMalloc cudaMalloc
#define hipFree cudaFree
#define hipMemcpy cudaMemcpy
#define hipMemcpyAsync cudaMemcpyAsync
#define hipMemsetAsync cudaMemsetAsync
#define hipMemcpyHostToDevice cudaMemcpyHostToDevice
#define hipMemcpyDeviceToHost cudaMemcpyDeviceToHost
#define hipMemcpyDeviceToDevice cudaMemcpyDeviceToDevice
#define hipMemcpyDefault cudaMemcpyDefault
#define hipSetDevice cudaSetDevice
#define hipGetDevice cudaGetDevice
#define hipGetDeviceCount cudaGetDeviceCount
#define hipGetDeviceProperties cudaGetDeviceProperties
#define hipDeviceGetAttribute cudaDeviceGetAttribute
#define hipDeviceSynchronize cudaDeviceSynchronize
#define hipStreamCreate cudaStreamCreate
#define hipStreamCreateWithFlags cudaStreamCreateWithFlags
#define hipStreamNonBlocking cudaStreamNonBlocking
#define hipStreamDestroy cudaStreamDestroy
#define hipStreamSynchronize cudaStreamSynchronize
#define hipEventCreate cudaEventCreate
#define hipEventDestroy cudaEventDestroy
#define hipEventRecord cudaEventRecord
#define hipEventSynchronize cudaEventSynchronize
#define hipEventElapsedTime cudaEventElapsedTime
#define hipPointerGetAttributes cudaPointerGetAttributes
#define hipPointerAttribute_t cudaPointerAttributes
#define hipMemoryTypeDevice cudaMemoryTypeDevice
#define hipDriverGetVersion cudaDriverGetVersion
#define hipRuntimeGetVersion cudaRuntimeGetVersion
#define hipFuncSetAttribute cudaFuncSetAttribute
#define hipFuncAttributeMaxDynamicSharedMemorySize cudaFuncAttributeMaxDynamicSharedMemorySize
#define hipOccupancyMaxActiveBlocksPerMultiprocessor cudaOccupancyMaxActiveBlocksPerMultiprocessor
#define hipDeviceAttributeMultiprocessorCount cudaDevAttrMultiProcessorCount
// Used by hip/runtime.hip (the runtime shim).
typedef cudaMemcpyKind hipMemcpyKind;
#define hipErrorNoDevice cudaErrorNoDevice
#define hipErrorInsufficientDriver cudaErrorInsufficientDriver
#define hipErrorNotReady cudaErrorNotReady
#define hipErrorInvalidValue cudaErrorInvalidValue
#define hipMemset cudaMemset
#define hipMemGetInfo cudaMemGetInfo
#define hipStreamQuery cudaStreamQuery
#define hipStreamWaitEvent cudaStreamWaitEvent
#define hipEventCreateWithFlags cudaEventCreateWithFlags
#define hipEventDefault cudaEventDefault
#define hipEventDisableTiming cudaEventDisableTiming
#define hipEventQuery cudaEventQuery
#define hipMemoryTypeHost cudaMemoryTypeHost
#define hipMemoryTypeManaged cudaMemoryTypeManaged
// Stream capture and graphs (hip/runtime.hip: the tests' capture helpers, the capture check of
// the per-stream workspace).
typedef cudaGraph_t hipGraph_t;
typedef cudaGraphExec_t hipGraphExec_t;
typedef cudaStreamCaptureStatus hipStreamCaptureStatus;
#define hipStreamBeginCapture cudaStreamBeginCapture
#define hipStreamEndCapture cudaStreamEndCapture
#define hipStreamIsCapturing cudaStreamIsCapturing
#define hipStreamCaptureModeGlobal cudaStreamCaptureModeGlobal
#define hipStreamCaptureModeThreadLocal cudaStreamCaptureModeThreadLocal
#define hipStreamCaptureModeRelaxed cudaStreamCaptureModeRelaxed
#define hipStreamCaptureStatusNone cudaStreamCaptureStatusNone
#define hipStreamCaptureStatusActive cudaStreamCaptureStatusActive
#define hipGraphInstantiateWithFlags cudaGraphInstantiateWithFlags
#define hipGraphLaunch cudaGraphLaunch
#define hipGraphDestroy cudaGraphDestroy
#define hipGraphExecDestroy cudaGraphExecDestroy

#define HIPFP8_LDG(p) __ldg(p)
static inline __device__ float hipfp8_bf16_to_f32(hipfp8_bf16 v) { return __bfloat162float(v); }
static inline __device__ hipfp8_bf16 hipfp8_f32_to_bf16(float v) { return __float2bfloat16_rn(v); }

// sm_80+ rounds f32 -> bf16 to nearest even in one instruction (cvt.rn.bf16.f32: subnormals
// kept, overflow to Inf). hipfp8_bf16_rne_hi(x): those 16 bits in the high half of a word, for a
// NON-NaN x (NaN payloads follow the caller's own rule). Without the macro callers round in
// integer arithmetic (the same bits).
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
#define HIPFP8_HW_BF16_RNE 1
static inline __device__ uint32_t hipfp8_bf16_rne_hi(float x) {
  return (uint32_t)__bfloat16_as_ushort(__float2bfloat16_rn(x)) << 16;
}
#endif
#endif

// ----------------------------------------------------------------------------- common
// Launchers are extern "C", noexcept, and return a hipfp8_kernel_status: 0 = success,
// otherwise the runtime's error code (hipError_t / cudaError_t value).
#define HIPFP8_EXTERN extern "C"

// Check the launch error right after a kernel launch; returns the code from the launcher.
#define HIPFP8_RETURN_LAUNCH_STATUS()                \
  do {                                               \
    hipError_t hipfp8_e__ = hipGetLastError();       \
    return (int)hipfp8_e__;                          \
  } while (0)

// ----------------------------------------------------------------------------- kernel primitives
// (added for hip/quant: the few device intrinsics whose names differ between vendors)
#if defined(HIPFP8_VENDOR_AMD)
// Butterfly exchange within one wavefront (every lane active).
#define HIPFP8_SHFL_XOR(v, m) __shfl_xor((v), (m))
// Value of v in lane `src` of this wavefront (every lane active; src taken modulo the wave).
#define HIPFP8_SHFL(v, src) __shfl((v), (src))
// Orders the shared-memory accesses of one wavefront (its lanes run in lockstep on AMD).
#define HIPFP8_SYNC_WAVE() __builtin_amdgcn_wave_barrier()
// __launch_bounds__ with a minimum of resident blocks per SM (NVIDIA: caps the registers so that
// many blocks fit). On AMD only the block size is passed: HIP reads a second argument as
// waves per EU, a different budget (the VGPR file of a CU differs too).
#define HIPFP8_LAUNCH_BOUNDS_MIN_BLOCKS(threads, blocks) __launch_bounds__(threads)
// Max over the wavefront (every lane active); every lane gets it.
static inline __device__ uint32_t hipfp8_wave_max_u32(uint32_t v) {
#pragma unroll
  for (int o = HIPFP8_WAVE / 2; o > 0; o >>= 1) {
    const uint32_t w = __shfl_xor(v, o);
    v = w > v ? w : v;
  }
  return v;
}
// Polite spin-wait step for inter-block flags.
#define HIPFP8_BACKOFF() __builtin_amdgcn_s_sleep(2)
// One f32 add / multiply, rounded once, never fused with a neighbouring operation into an FMA
// (hipcc contracts a*b+c by default; the pragma drops the `contract` flag of these instructions).
static inline __device__ float hipfp8_add_rn(float a, float b) {
#pragma clang fp contract(off)
  return a + b;
}
static inline __device__ float hipfp8_mul_rn(float a, float b) {
#pragma clang fp contract(off)
  return a * b;
}
#if defined(HIPFP8_HW_FP8_FNUZ) || defined(HIPFP8_HW_FP8_OCP)
// Raw hardware f32x2 -> fp8x2 (byte 0 = lo, byte 1 = hi), round-to-nearest-even. The hardware
// does NOT saturate by itself and its NaN/Inf/-0 behaviour is the codec's business: callers
// (hip/fp8_codec.h) pass finite, pre-clamped values only and fix up the rest.
static inline __device__ uint32_t hipfp8_hw_cvt_e4m3x2(float lo, float hi) {
  return (uint32_t)__builtin_amdgcn_cvt_pk_fp8_f32(lo, hi, 0, false) & 0xFFFFu;
}
static inline __device__ uint32_t hipfp8_hw_cvt_e5m2x2(float lo, float hi) {
  return (uint32_t)__builtin_amdgcn_cvt_pk_bf8_f32(lo, hi, 0, false) & 0xFFFFu;
}
#endif
#else
#define HIPFP8_SHFL_XOR(v, m) __shfl_xor_sync(0xffffffffu, (v), (m))
#define HIPFP8_SHFL(v, src) __shfl_sync(0xffffffffu, (v), (src))
#define HIPFP8_SYNC_WAVE() __syncwarp()
#define HIPFP8_LAUNCH_BOUNDS_MIN_BLOCKS(threads, blocks) __launch_bounds__(threads, blocks)
// One f32 add / multiply, rounded once, never merged into an FMA (nvcc contracts a*b+c by
// default; the _rn intrinsics are documented never to be).
static inline __device__ float hipfp8_add_rn(float a, float b) { return __fadd_rn(a, b); }
static inline __device__ float hipfp8_mul_rn(float a, float b) { return __fmul_rn(a, b); }
static inline __device__ uint32_t hipfp8_wave_max_u32(uint32_t v) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  return __reduce_max_sync(0xffffffffu, v);  // one redux.sync
#else
#pragma unroll
  for (int o = HIPFP8_WAVE / 2; o > 0; o >>= 1) {
    const uint32_t w = __shfl_xor_sync(0xffffffffu, v, o);
    v = w > v ? w : v;
  }
  return v;
#endif
}
#define HIPFP8_BACKOFF() __nanosleep(64)
#if defined(HIPFP8_HW_FP8_OCP)
// cvt.rn.satfinite.{e4m3,e5m2}x2.f32: RNE, finite overflow saturates (byte 0 = lo).
static inline __device__ uint32_t hipfp8_hw_cvt_e4m3x2(float lo, float hi) {
  return (uint32_t)__nv_cvt_float2_to_fp8x2(make_float2(lo, hi), __NV_SATFINITE, __NV_E4M3);
}
static inline __device__ uint32_t hipfp8_hw_cvt_e5m2x2(float lo, float hi) {
  return (uint32_t)__nv_cvt_float2_to_fp8x2(make_float2(lo, hi), __NV_SATFINITE, __NV_E5M2);
}
#endif
#endif

// ----------------------------------------------------------------------------- runtime helpers
// Vendor facts the runtime shim (hip/runtime.hip) reports without testing vendor macros itself.
#include <stdio.h>
#if defined(HIPFP8_VENDOR_AMD)
#define HIPFP8_VENDOR_ID 1
#else
#define HIPFP8_VENDOR_ID 2
#endif

// The architecture string hipfp8 derives the native FP8 flavour from: gcnArchName on AMD
// ("gfx942:sramecc+:xnack-", features included), "sm_XY" from the compute capability on NVIDIA.
static inline void hipfp8_arch_string(const hipDeviceProp_t* p, char* buf, size_t n) {
#if defined(HIPFP8_VENDOR_AMD)
  snprintf(buf, n, "%s", p->gcnArchName);
#else
  snprintf(buf, n, "sm_%d%d", p->major, p->minor);
#endif
}
