// A KV pool in device memory, with kv_pool's layout and pointer API.
//
// Layout (one cudaMalloc, so one HMEM registration or one staging mirror
// covers it):
//   [K_0][K_1]..[K_{N-1}][V_0]..[V_{N-1}]   (MLA: [KV_0]..[KV_{N-1}])
// exactly as model/kv_pool.hpp: page p of layer L's buffer b starts at
// page_ptr(L, b, 0) + p * item_len, and k_ptrs/v_ptrs/item_lens are what
// transfer_info carries. The pointers are device addresses.
//
// write_layer enqueues the simulated model's write of one layer (the kv_fill
// kernel, model/kv_kernel.cu: kv_pattern's bytes) on a stream and returns at
// once. The kernel reads the request's pages from a gpu_page_table, uploaded
// for each batch item before the batch's forward (create() returns once the
// table is on the device; the per-layer path does not wait).
//
// Lifecycle: create() allocates and zeroes; the destructor frees (after the
// caller synchronized the streams that use it). Threading: one forward thread
// calls write_layer; the accessors are const and thread-safe.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "common/error.hpp"
#include "config/config.hpp"
#include "device/event.hpp"
#include "model/kv_pool.hpp"

namespace layerstream {

/// One request's page list in device memory (plus its host copy). Owns the
/// device array.
class gpu_page_table {
 public:
  /// Uploads `pages` and waits until they are on the device (call before
  /// the forward, not per layer).
  static caf::expected<gpu_page_table> create(std::vector<uint64_t> pages);
  gpu_page_table() = default;
  ~gpu_page_table();
  gpu_page_table(gpu_page_table&& other) noexcept;
  gpu_page_table& operator=(gpu_page_table&& other) noexcept;
  gpu_page_table(const gpu_page_table&) = delete;
  gpu_page_table& operator=(const gpu_page_table&) = delete;

  const std::vector<uint64_t>& host() const { return host_; }
  const uint64_t* device() const { return device_; }

 private:
  std::vector<uint64_t> host_;
  uint64_t* device_ = nullptr;
};

class gpu_kv_pool : public kv_layout {
 public:
  static caf::expected<std::unique_ptr<gpu_kv_pool>> create(const model_config& model,
                                                            uint64_t pages);
  ~gpu_kv_pool();
  gpu_kv_pool(const gpu_kv_pool&) = delete;
  gpu_kv_pool& operator=(const gpu_kv_pool&) = delete;

  /// Enqueues on `stream` the write of `layer` for tokens [first, last) of
  /// `room` (kv_pool::write_layer's contract, zeroed tail included). Never
  /// waits for the device; an error is the enqueue's (bad input or a CUDA
  /// launch error).
  caf::error write_layer(uint64_t room, uint32_t layer, const gpu_page_table& pages, uint64_t first,
                         uint64_t last, uint64_t prompt_tokens, stream_handle stream);

  /// Copies the whole pool to `host` (bytes() bytes) and waits: tests only.
  caf::error copy_to_host(uint8_t* host) const;

 private:
  gpu_kv_pool() = default;
};

} // namespace layerstream
