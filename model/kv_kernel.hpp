// The simulated GPU forward's KV write: a CUDA kernel that writes exactly the
// bytes kv_pattern::fill_row writes on the host (model/kv_pool.cpp), and its
// launch wrapper. The kernel lives in kv_kernel.cu (nvcc); this header has no
// CUDA types so g++ code can call it.
#pragma once

#include <cstdint>

#include "device/event.hpp"

namespace layerstream {

/// One layer buffer's write for one request, in kv_pool's layout.
struct kv_fill_args {
  uint8_t* buffer = nullptr;       ///< device address of page 0 of this layer's buffer
  const uint64_t* pages = nullptr; ///< device array: request page i -> pool page
  uint64_t room = 0;
  uint32_t layer = 0;
  uint32_t buffer_index = 0; ///< 0 = K (or MLA), 1 = V
  uint64_t first_token = 0;  ///< tokens [first, last) are written
  uint64_t last_token = 0;
  uint32_t page_size = 0;
  uint64_t row_len = 0;
  uint64_t item_len = 0;
};

/// Enqueues the kernel on `stream` (a cudaStream_t). Returns the launch's
/// cudaError_t (0 = cudaSuccess); never waits for the device.
int launch_kv_fill(const kv_fill_args& args, stream_handle stream);

/// Enqueues the simulated compute of one layer on `stream`: one thread that
/// waits `ns` nanoseconds on the device's global timer. Returns the launch's
/// cudaError_t; never waits for the device.
int launch_compute(uint64_t ns, stream_handle stream);

/// The kernel's formula for word `word` (8 bytes, little-endian) of a row,
/// run on the host: tests compare it with kv_pattern::fill_row without a GPU.
uint64_t kv_pattern_word(uint64_t room, uint32_t layer, uint32_t buffer, uint64_t token,
                         uint64_t word);

} // namespace layerstream
