// Every GPU test starts with SKIP_WITHOUT_CUDA(): without a device (or a
// driver) it skips with cudaGetErrorString's reason instead of failing.
#pragma once

#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#define SKIP_WITHOUT_CUDA()                                                                        \
  do {                                                                                             \
    int ls_devices_ = 0;                                                                           \
    const cudaError_t ls_rc_ = cudaGetDeviceCount(&ls_devices_);                                   \
    if (ls_rc_ != cudaSuccess)                                                                     \
      GTEST_SKIP() << "no CUDA device: " << cudaGetErrorString(ls_rc_);                            \
    if (ls_devices_ == 0)                                                                          \
      GTEST_SKIP() << "no CUDA device: cudaGetDeviceCount found 0";                                \
  } while (false)
