// host_calls.cu -- what one CUDA runtime call costs on the host: the calls the library's host path
// makes (or made before session 26) per op call, each timed alone in a loop on the calling
// thread (bench/NOTES.md "Session 26: library host path" uses the numbers).
//
//   source /opt/cudatc/env.sh   # or any CUDA 12/13 toolkit
//   nvcc -O2 -std=c++17 -gencode arch=compute_90a,code=sm_90a -o host_calls bench/host_calls.cu
//   ./host_calls [iterations]     # on the GPU machine; needs only the driver's libcuda.so.1
//
// Prints one line per call: "name  ns_per_call" (the minimum over 5 rounds of `iterations`
// calls). Launches and memsets are queued on a non-blocking stream, 256 per round (below the
// launch queue's depth, so the host never waits for the device), synchronised between rounds:
// their host cost only.
#include <cuda.h>
#include <cuda_runtime.h>
#include <cudaTypedefs.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>

__global__ void empty_kernel() {}
// A kernel that asks for more than 48 KiB of dynamic shared memory (CUTLASS's GEMMs do), so the
// attribute call is the one CUTLASS's initialize() repeats.
__global__ void big_smem_kernel() {
  extern __shared__ char s[];
  if (threadIdx.x == 1024) s[0] = 0;
}
__global__ void cluster_kernel() {}

#define CHECK(x)                                                              \
  do {                                                                        \
    cudaError_t e_ = (x);                                                     \
    if (e_ != cudaSuccess) {                                                  \
      fprintf(stderr, "%s: %s\n", #x, cudaGetErrorString(e_));                \
      exit(1);                                                                \
    }                                                                         \
  } while (0)

static long iters = 100000;
static cudaStream_t stream;

template <class F>
static void timed(const char* name, F f, long n = 0) {
  if (n == 0) n = iters;
  double best = 1e30;
  for (int round = 0; round < 5; ++round) {
    const auto t0 = std::chrono::steady_clock::now();
    for (long i = 0; i < n; ++i) f();
    const auto t1 = std::chrono::steady_clock::now();
    cudaStreamSynchronize(stream);
    const cudaError_t e = cudaGetLastError();
    if (e != cudaSuccess) printf("  (%s: %s)\n", name, cudaGetErrorString(e));
    const double ns = std::chrono::duration<double, std::nano>(t1 - t0).count() / n;
    if (ns < best) best = ns;
  }
  printf("%-64s %9.1f ns\n", name, best);
}
// Calls that queue work: few per round.
constexpr long kQueued = 256;

int main(int argc, char** argv) {
  if (argc > 1) iters = atol(argv[1]);
  CHECK(cudaSetDevice(0));
  CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  void* dev = nullptr;
  CHECK(cudaMalloc(&dev, 1 << 20));
  static char host[4096];
  cudaDeviceProp p;
  CHECK(cudaGetDeviceProperties(&p, 0));
  printf("%s, %ld calls per round\n", p.name, iters);

  int d = 0, v = 0;
  timed("cudaGetDevice", [&] { cudaGetDevice(&d); });
  timed("cudaGetLastError", [&] { (void)cudaGetLastError(); });
  timed("cudaDeviceGetAttribute(MultiProcessorCount)",
        [&] { cudaDeviceGetAttribute(&v, cudaDevAttrMultiProcessorCount, 0); });
  timed("cudaPointerGetAttributes(device pointer)", [&] {
    cudaPointerAttributes a;
    cudaPointerGetAttributes(&a, dev);
  });
  timed("cudaPointerGetAttributes(unregistered host pointer)", [&] {
    cudaPointerAttributes a;
    if (cudaPointerGetAttributes(&a, host) != cudaSuccess) (void)cudaGetLastError();
  });
  timed("cudaOccupancyMaxActiveBlocksPerMultiprocessor",
        [&] { cudaOccupancyMaxActiveBlocksPerMultiprocessor(&v, empty_kernel, 256, 0); });
  const int big = 100 << 10;
  timed("cudaFuncSetAttribute(MaxDynamicSharedMemorySize, same value)", [&] {
    cudaFuncSetAttribute(big_smem_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, big);
  });
  timed("cudaFuncSetAttribute(NonPortableClusterSizeAllowed, 1)", [&] {
    cudaFuncSetAttribute(cluster_kernel, cudaFuncAttributeNonPortableClusterSizeAllowed, 1);
  });
  timed("cudaStreamIsCapturing", [&] {
    cudaStreamCaptureStatus s;
    cudaStreamIsCapturing(stream, &s);
  });
  void* pfn = nullptr;
  cudaDriverEntryPointQueryResult q;
#if CUDART_VERSION >= 12050
  timed("cudaGetDriverEntryPointByVersion(cuTensorMapEncodeTiled)", [&] {
    cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &pfn, 12000, cudaEnableDefault, &q);
  });
#else
  timed("cudaGetDriverEntryPoint(cuTensorMapEncodeTiled)", [&] {
    cudaGetDriverEntryPoint("cuTensorMapEncodeTiled", &pfn, cudaEnableDefault, &q);
  });
#endif
  if (pfn != nullptr) {
    auto encode = reinterpret_cast<PFN_cuTensorMapEncodeTiled_v12000>(pfn);
    timed("cuTensorMapEncodeTiled (2D, 128x128 box, through the cached pointer)", [&] {
      CUtensorMap m;
      cuuint64_t dims[2] = {1024, 1024}, strides[1] = {1024};
      cuuint32_t box[2] = {128, 128}, estr[2] = {1, 1};
      encode(&m, CU_TENSOR_MAP_DATA_TYPE_UINT8, 2, dev, dims, strides, box, estr,
             CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
             CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
    });
  }
  timed(
      "empty kernel launch <<<1, 256, 0, stream>>>",
      [&] { empty_kernel<<<1, 256, 0, stream>>>(); }, kQueued);
  timed("cudaLaunchKernelExC, 2x1 cluster", [&] {
    cudaLaunchConfig_t c = {};
    cudaLaunchAttribute at[1];
    at[0].id = cudaLaunchAttributeClusterDimension;
    at[0].val.clusterDim = {2, 1, 1};
    c.gridDim = {2, 1, 1};
    c.blockDim = {128, 1, 1};
    c.stream = stream;
    c.attrs = at;
    c.numAttrs = 1;
    void* args[1] = {nullptr};
    cudaLaunchKernelExC(&c, (const void*)cluster_kernel, args);
  }, kQueued);
  timed("cudaMemsetAsync(4 bytes)", [&] { cudaMemsetAsync(dev, 0, 4, stream); }, kQueued);
  timed("getenv(unset variable)", [&] { (void)getenv("HIPFP8_HOST_CALLS_UNSET"); });
  CHECK(cudaStreamSynchronize(stream));
  CHECK(cudaFree(dev));
  return 0;
}
