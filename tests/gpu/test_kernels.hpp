// Test-only kernels (test_kernels.cu). No CUDA types: returns are cudaError_t as int.
#pragma once

#include <cstdint>

#include "device/event.hpp"

namespace layerstream::gpu_testing {

/// Enqueues one thread that spins on the device clock for about `ms` milliseconds.
int launch_spin(uint32_t ms, stream_handle stream);

/// Enqueues a kernel that writes to an unmapped device address: a sticky
/// cudaErrorIllegalAddress for the whole process.
int launch_fault(stream_handle stream);

} // namespace layerstream::gpu_testing
