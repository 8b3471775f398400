#include "test_kernels.hpp"

#include <cuda_runtime.h>

namespace layerstream::gpu_testing {

namespace {

__global__ void spin_kernel(uint64_t cycles) {
  const long long start = clock64();
  while (static_cast<uint64_t>(clock64() - start) < cycles) {
    // busy
  }
}

__global__ void fault_kernel(uint64_t* bad) {
  *bad = 1; // unmapped: the kernel faults
}

} // namespace

int launch_spin(uint32_t ms, stream_handle stream) {
  int khz = 0;
  int dev = 0;
  cudaGetDevice(&dev);
  if (cudaDeviceGetAttribute(&khz, cudaDevAttrClockRate, dev) != cudaSuccess || khz <= 0)
    khz = 2'000'000; // 2 GHz if the attribute is missing
  spin_kernel<<<1, 1, 0, reinterpret_cast<cudaStream_t>(stream)>>>(uint64_t{ms} *
                                                                   static_cast<uint64_t>(khz));
  return static_cast<int>(cudaGetLastError());
}

int launch_fault(stream_handle stream) {
  auto* bad = reinterpret_cast<uint64_t*>(uintptr_t{0x10});
  fault_kernel<<<1, 1, 0, reinterpret_cast<cudaStream_t>(stream)>>>(bad);
  return static_cast<int>(cudaGetLastError());
}

} // namespace layerstream::gpu_testing
