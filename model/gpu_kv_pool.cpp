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
  if (model.layers == 0 || model.kv_heads == 0 || model.head_dim == 0 || model.dtype_bytes == 0 ||
      model.page_size == 0 || pages == 0)
    return make_error(lserr::bad_input, "gpu kv pool: every model dimension and the page count "
                                        "must be at least 1");
  if (model.mla && model.kv_heads != 1)
    return make_error(lserr::bad_input, "gpu kv pool: MLA has one KV head (model.kv_heads = 1)");
  std::unique_ptr<gpu_kv_pool> pool{new gpu_kv_pool};
  pool->layers_ = model.layers;
  pool->mla_ = model.mla;
  pool->pages_ = pages;
  pool->page_size_ = model.page_size;
  pool->row_len_ = uint64_t{model.kv_heads} * model.head_dim * model.dtype_bytes;
  pool->item_len_ = pool->row_len_ * model.page_size;
  uint64_t buffers = uint64_t{model.layers} * pool->buffers();
  if (__builtin_mul_overflow(pool->item_len_, pages, &pool->buffer_bytes_) ||
      __builtin_mul_overflow(pool->buffer_bytes_, buffers, &pool->bytes_) ||
      pool->bytes_ > (uint64_t{1} << 40))
    return make_error(lserr::bad_input, "gpu kv pool: " + std::to_string(pages) +
                                            " pages of this geometry exceed 1 TiB");
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

uint8_t* gpu_kv_pool::page_ptr(uint32_t layer, uint32_t buffer, uint64_t page) const {
  return base_ + (uint64_t{buffer} * layers_ + layer) * buffer_bytes_ + page * item_len_;
}

std::vector<uint64_t> gpu_kv_pool::k_ptrs() const {
  std::vector<uint64_t> out;
  for (uint32_t l = 0; l < layers_; ++l)
    out.push_back(reinterpret_cast<uint64_t>(page_ptr(l, 0, 0)));
  return out;
}

std::vector<uint64_t> gpu_kv_pool::v_ptrs() const {
  std::vector<uint64_t> out;
  if (!mla_)
    for (uint32_t l = 0; l < layers_; ++l)
      out.push_back(reinterpret_cast<uint64_t>(page_ptr(l, 1, 0)));
  return out;
}

std::vector<uint64_t> gpu_kv_pool::item_lens() const {
  return std::vector<uint64_t>(uint64_t{layers_} * buffers(), item_len_);
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
