// kv_export: how a layer's KV bytes, written by the GPU forward into device
// memory, become bytes the fabric can write from. One small interface, two
// implementations:
//
// - hmem_export (direct): the fabric reads the device pool itself. Only where
//   the provider registers CUDA memory (FI_HMEM, iface FI_HMEM_CUDA: the
//   transport does it; gpu_device probes it first). stage() enqueues
//   nothing; the notifier records on the compute stream.
// - staging_export: Debian's libfabric has no CUDA HMEM, so every layer is
//   copied into a pinned host mirror of the pool (cudaMallocHost, same
//   layout, so the transfer address math is unchanged: src = mirror base +
//   the device offset). stage(layer, pages) records one event on the compute
//   stream, makes a copy stream wait for it (cudaStreamWaitEvent captures
//   that record, so one event serves every layer) and enqueues one
//   cudaMemcpyAsync per run of consecutive pages per buffer. The notifier
//   then records the layer's event on the COPY stream: when it completes the
//   layer's bytes are in host memory, and the context submits from there.
//
// Forward-thread use, per layer: launch the layer's kernels on the compute
// stream, stage(layer, pages), notify(layer) with the notifier built on
// notify_stream(). Nothing waits for the device inside a batch (the
// forward synchronizes the compute and the notify stream once at its end).
//
// Lifecycle: created for one gpu_kv_pool and one compute stream, which must
// outlive it; the destructor synchronizes its copy stream before freeing the
// mirror. Threading: stage() from the forward thread only.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "common/error.hpp"
#include "device/event.hpp"

namespace layerstream {

class gpu_kv_pool;

class kv_export {
 public:
  virtual ~kv_export() = default;

  /// "hmem" or "staging" (logs, bench output).
  virtual const char* name() const = 0;

  /// The stream the notifier records each layer's event on.
  virtual stream_handle notify_stream() const = 0;

  /// Enqueues what makes `layer`'s `pages` (pool pages, any order)
  /// readable at src addresses after the compute stream's work so far.
  virtual caf::error stage(uint32_t layer, const std::vector<uint64_t>& pages) = 0;

  /// The memory the transport registers and writes from (device memory for
  /// hmem: its registration needs iface FI_HMEM_CUDA).
  virtual uint8_t* src_base() const = 0;
  virtual uint64_t src_bytes() const = 0;
  virtual bool device_memory() const = 0;

  /// Per-layer src base pointers, as kv_pool::k_ptrs / v_ptrs.
  std::vector<uint64_t> k_ptrs() const;
  std::vector<uint64_t> v_ptrs() const;

 protected:
  explicit kv_export(const gpu_kv_pool& pool) : pool_(pool) {}
  const gpu_kv_pool& pool_;
};

/// Direct: the fabric writes from device memory.
caf::expected<std::unique_ptr<kv_export>> make_hmem_export(const gpu_kv_pool& pool,
                                                           stream_handle compute);

/// Staging through a pinned host mirror (works with any provider).
caf::expected<std::unique_ptr<kv_export>> make_staging_export(const gpu_kv_pool& pool,
                                                              stream_handle compute);

/// hmem where `cuda_hmem` (the provider registers CUDA memory), staging otherwise.
caf::expected<std::unique_ptr<kv_export>> make_kv_export(const gpu_kv_pool& pool,
                                                         stream_handle compute, bool cuda_hmem);

} // namespace layerstream
