#include "model/gpu_kv_pool.hpp"

#include <string>

#include <cuda_runtime_api.h>

#include "device/cuda_check.hpp"
#include "model/kv_kernel.hpp"

namespace layerstream {

// -- gpu_page_table -----------------------------------------------------------

caf::expected<gpu_page_table> gpu_page_table::create(std::vector<uint64_t> pages) {
  gpu_page_table t;
  t.host_ = std::move(pages);
  if (t.host_.empty())
    return t;
  void* mem = nullptr;
  const auto bytes = t.host_.size() * sizeof(uint64_t);
  CUDA_RETURN_IF_ERROR(lserr::bad_input, cudaMalloc(&mem, bytes));
  t.device_ = static_cast<uint64_t*>(mem);
  CUDA_RETURN_IF_ERROR(lserr::bad_input,
                       cudaMemcpy(mem, t.host_.data(), bytes, cudaMemcpyHostToDevice));
  // From pageable memory cudaMemcpy may return once the bytes are staged,
  // before the DMA reaches the device, and it runs on the default stream,
  // which the forward's non-blocking streams do not wait for: wait here, so
  // that the first kv_fill reads the whole table.
  CUDA_RETURN_IF_ERROR(lserr::bad_input, cudaStreamSynchronize(nullptr));
  return t;
}

gpu_page_table::~gpu_page_table() {
  if (device_ != nullptr)
    cudaFree(device_);
}

gpu_page_table::gpu_page_table(gpu_page_table&& other) noexcept
    : host_(std::move(other.host_)), device_(other.device_) {
  other.device_ = nullptr;
}

gpu_page_table& gpu_page_table::operator=(gpu_page_table&& other) noexcept {
  if (this != &other) {
    if (device_ != nullptr)
      cudaFree(device_);
    host_ = std::move(other.host_);
    device_ = other.device_;
    other.device_ = nullptr;
  }
  return *this;
}

// -- gpu_kv_pool --------------------------------------------------------------

caf::expected<std::unique_ptr<gpu_kv_pool>> gpu_kv_pool::create(const model_config& model,
                                                                uint64_t pages) {
  std::unique_ptr<gpu_kv_pool> pool{new gpu_kv_pool};
  if (auto err = pool->init(model, pages, "gpu kv pool"))
    return err;
  void* mem = nullptr;
  CUDA_RETURN_IF_ERROR(lserr::bad_input, cudaMalloc(&mem, pool->bytes_));
  pool->base_ = static_cast<uint8_t*>(mem);
  CUDA_RETURN_IF_ERROR(lserr::bad_input, cudaMemset(mem, 0, pool->bytes_)); // like mmap's zeroes
  return pool;
}

gpu_kv_pool::~gpu_kv_pool() {
  if (base_ != nullptr)
    cudaFree(base_);
}

caf::error gpu_kv_pool::write_layer(uint64_t room, uint32_t layer, const gpu_page_table& pages,
                                    uint64_t first, uint64_t last, uint64_t prompt_tokens,
                                    stream_handle stream) {
  const auto& host = pages.host();
  if (layer >= layers_)
    return make_error(lserr::bad_layer, "gpu kv pool: layer " + std::to_string(layer));
  if (first > last || last > prompt_tokens ||
      (last > 0 && (last - 1) / page_size_ >= host.size()) ||
      (last == prompt_tokens && last % page_size_ != 0 && last / page_size_ >= host.size()))
    return make_error(lserr::bad_input, "gpu kv pool: tokens [" + std::to_string(first) + ", " +
                                            std::to_string(last) + ") outside the request's " +
                                            std::to_string(host.size()) + " pages");
  for (auto p : host)
    if (p >= pages_)
      return make_error(lserr::bad_input, "gpu kv pool: page " + std::to_string(p) +
                                              " outside the pool's " + std::to_string(pages_));
  for (uint32_t b = 0; b < buffers(); ++b) {
    kv_fill_args args;
    args.buffer = page_ptr(layer, b, 0);
    args.pages = pages.device();
    args.room = room;
    args.layer = layer;
    args.buffer_index = b;
    args.first_token = first;
    args.last_token = last;
    args.page_size = page_size_;
    args.row_len = row_len_;
    args.item_len = item_len_;
    CUDA_RETURN_IF_ERROR(lserr::event_failed, launch_kv_fill(args, stream));
    // Zero the unused slots of the request's last page once it is written.
    if (last == prompt_tokens && last % page_size_ != 0) {
      uint8_t* page = page_ptr(layer, b, host[last / page_size_]);
      const uint64_t used = (last % page_size_) * row_len_;
      CUDA_RETURN_IF_ERROR(lserr::event_failed,
                           cudaMemsetAsync(page + used, 0, item_len_ - used,
                                           reinterpret_cast<cudaStream_t>(stream)));
    }
  }
  return caf::error{};
}

caf::error gpu_kv_pool::copy_to_host(uint8_t* host) const {
  return CUDA_CHECK(lserr::bad_input, cudaMemcpy(host, base_, bytes_, cudaMemcpyDeviceToHost));
}

} // namespace layerstream
