#include "device/kv_export.hpp"

#include <algorithm>
#include <cstring>

#include <cuda_runtime_api.h>

#include "device/cuda_check.hpp"
#include "model/gpu_kv_pool.hpp"

namespace layerstream {

namespace {

cudaStream_t as_stream(stream_handle h) {
  return reinterpret_cast<cudaStream_t>(h);
}

class hmem_export final : public kv_export {
 public:
  hmem_export(const gpu_kv_pool& pool, stream_handle compute) : kv_export(pool), compute_(compute) {
    // nop
  }
  const char* name() const override { return "hmem"; }
  stream_handle notify_stream() const override { return compute_; }
  caf::error stage(uint32_t, const std::vector<uint64_t>&) override {
    return caf::error{}; // the fabric reads the pool itself, after the layer's event
  }
  uint8_t* src_base() const override { return pool_.base(); }
  uint64_t src_bytes() const override { return pool_.bytes(); }
  bool device_memory() const override { return true; }

 private:
  stream_handle compute_;
};

/// Owns the pinned mirror, the copy stream and the one dependency event,
/// created in that order and destroyed in reverse (after the copy stream
/// drained).
class staging_export final : public kv_export {
 public:
  explicit staging_export(const gpu_kv_pool& pool, stream_handle compute)
      : kv_export(pool), compute_(compute) {
    // nop
  }

  ~staging_export() override {
    if (copy_ != nullptr)
      cudaStreamSynchronize(copy_);
    if (dep_ != nullptr)
      cudaEventDestroy(dep_);
    if (copy_ != nullptr)
      cudaStreamDestroy(copy_);
    if (mirror_ != nullptr)
      cudaFreeHost(mirror_);
  }

  caf::error open() {
    void* mem = nullptr;
    CUDA_RETURN_IF_ERROR(lserr::bad_input, cudaMallocHost(&mem, pool_.bytes()));
    mirror_ = static_cast<uint8_t*>(mem);
    std::memset(mirror_, 0, pool_.bytes());
    CUDA_RETURN_IF_ERROR(lserr::event_failed,
                         cudaStreamCreateWithFlags(&copy_, cudaStreamNonBlocking));
    CUDA_RETURN_IF_ERROR(lserr::event_failed,
                         cudaEventCreateWithFlags(&dep_, cudaEventDisableTiming));
    return caf::error{};
  }

  const char* name() const override { return "staging"; }
  stream_handle notify_stream() const override { return reinterpret_cast<stream_handle>(copy_); }

  caf::error stage(uint32_t layer, const std::vector<uint64_t>& pages) override {
    if (layer >= pool_.layers())
      return make_error(lserr::bad_layer, "staging: layer " + std::to_string(layer));
    for (auto p : pages)
      if (p >= pool_.pages())
        return make_error(lserr::bad_input, "staging: page " + std::to_string(p) +
                                                " outside the pool's " +
                                                std::to_string(pool_.pages()));
    if (pages.empty())
      return caf::error{};
    sorted_ = pages;
    std::sort(sorted_.begin(), sorted_.end());
    CUDA_RETURN_IF_ERROR(lserr::event_failed, cudaEventRecord(dep_, as_stream(compute_)));
    CUDA_RETURN_IF_ERROR(lserr::event_failed, cudaStreamWaitEvent(copy_, dep_, 0));
    const auto item = pool_.item_len();
    for (uint32_t b = 0; b < pool_.buffers(); ++b) {
      const uint8_t* dev = pool_.page_ptr(layer, b, 0);
      uint8_t* host = mirror_ + (dev - pool_.base());
      for (size_t i = 0; i < sorted_.size();) {
        size_t j = i + 1;
        while (j < sorted_.size() && sorted_[j] <= sorted_[j - 1] + 1)
          ++j; // a run of consecutive pages (duplicates fold in)
        const uint64_t first = sorted_[i];
        const uint64_t count = sorted_[j - 1] - first + 1;
        CUDA_RETURN_IF_ERROR(lserr::event_failed,
                             cudaMemcpyAsync(host + first * item, dev + first * item, count * item,
                                             cudaMemcpyDeviceToHost, copy_));
        i = j;
      }
    }
    return caf::error{};
  }

  uint8_t* src_base() const override { return mirror_; }
  uint64_t src_bytes() const override { return pool_.bytes(); }
  bool device_memory() const override { return false; }

 private:
  stream_handle compute_;
  uint8_t* mirror_ = nullptr;
  cudaStream_t copy_ = nullptr;
  cudaEvent_t dep_ = nullptr;
  std::vector<uint64_t> sorted_; // scratch, reused per layer
};

} // namespace

std::vector<uint64_t> kv_export::k_ptrs() const {
  std::vector<uint64_t> out;
  const auto base = reinterpret_cast<uint64_t>(src_base());
  for (uint32_t l = 0; l < pool_.layers(); ++l)
    out.push_back(base + static_cast<uint64_t>(pool_.page_ptr(l, 0, 0) - pool_.base()));
  return out;
}

std::vector<uint64_t> kv_export::v_ptrs() const {
  std::vector<uint64_t> out;
  const auto base = reinterpret_cast<uint64_t>(src_base());
  if (!pool_.mla())
    for (uint32_t l = 0; l < pool_.layers(); ++l)
      out.push_back(base + static_cast<uint64_t>(pool_.page_ptr(l, 1, 0) - pool_.base()));
  return out;
}

caf::expected<std::unique_ptr<kv_export>> make_hmem_export(const gpu_kv_pool& pool,
                                                           stream_handle compute) {
  return std::unique_ptr<kv_export>{new hmem_export(pool, compute)};
}

caf::expected<std::unique_ptr<kv_export>> make_staging_export(const gpu_kv_pool& pool,
                                                              stream_handle compute) {
  std::unique_ptr<staging_export> out{new staging_export(pool, compute)};
  if (auto err = out->open())
    return err; // the destructor frees what open() made
  return std::unique_ptr<kv_export>{std::move(out)};
}

caf::expected<std::unique_ptr<kv_export>> make_kv_export(const gpu_kv_pool& pool,
                                                         stream_handle compute, bool cuda_hmem) {
  return cuda_hmem ? make_hmem_export(pool, compute) : make_staging_export(pool, compute);
}

} // namespace layerstream
