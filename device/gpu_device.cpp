#include "device/gpu_device.hpp"

#include <algorithm>

#include <cuda_runtime_api.h>

#include "common/log.hpp"
#include "device/cuda_check.hpp"
#include "model/forward_thread.hpp"
#include "model/kv_kernel.hpp"

namespace layerstream {

namespace {

/// The GPU forward thread: enqueues each layer's compute and KV write on the
/// compute stream and the export's stage (its copy stream, when staging),
/// then notifies; synchronizes the compute and the notify stream once per
/// batch.
class gpu_forward final : public forward_thread {
 public:
  gpu_forward(gpu_kv_pool& pool, kv_export& exp, stream_handle compute,
              std::chrono::microseconds layer_compute, notify_fn notify, done_fn done)
      : forward_thread(std::move(notify), std::move(done)), pool_(pool), export_(exp),
        compute_(compute), layer_compute_(layer_compute) {
    start();
  }

  ~gpu_forward() override { stop(); }

 private:
  /// Enqueues one layer: compute, every request's KV write, the export's stage.
  caf::error enqueue_layer(uint32_t layer, const forward_batch& batch,
                           const std::vector<gpu_page_table>& tables,
                           const std::vector<uint64_t>& pages) {
    const auto ns = static_cast<uint64_t>(
        std::chrono::duration_cast<std::chrono::nanoseconds>(layer_compute_).count());
    CUDA_RETURN_IF_ERROR(lserr::event_failed, launch_compute(ns, compute_));
    for (size_t i = 0; i < batch.items.size(); ++i) {
      const auto& item = batch.items[i];
      if (auto err = pool_.write_layer(item.room, layer, tables[i], item.first_token,
                                       item.last_token, item.prompt_tokens, compute_))
        return err;
    }
    return export_.stage(layer, pages);
  }

  void execute(const forward_batch& batch) override {
    forward_timing timing;
    timing.start = std::chrono::steady_clock::now();
    // The requests' page tables, and the pool pages the batch writes (staging copies them).
    std::vector<gpu_page_table> tables;
    std::vector<uint64_t> pages;
    const uint64_t ps = pool_.page_size();
    for (const auto& item : batch.items) {
      auto t = gpu_page_table::create(item.pages);
      if (!t) {
        timing.status = t.error();
        break;
      }
      tables.push_back(std::move(*t));
      for (uint64_t p = item.first_token / ps; p < (item.last_token + ps - 1) / ps; ++p)
        pages.push_back(item.pages[p]);
    }
    std::sort(pages.begin(), pages.end()); // runs of consecutive pages: fewer copies
    pages.erase(std::unique(pages.begin(), pages.end()), pages.end());
    for (uint32_t layer = 0; !timing.status && layer < pool_.layers(); ++layer) {
      auto t0 = steady_ns();
      if (auto err = enqueue_layer(layer, batch, tables, pages)) {
        // No notify: the layer's contexts never see it; the batch fails.
        timing.status = make_error(lserr::event_failed,
                                   "layer " + std::to_string(layer) + ": " + describe(err));
        break;
      }
      layer_written(timing, layer, t0, "enqueue");
    }
    // The forward ends when the device finished it; a sticky error fails the batch.
    if (auto err = CUDA_CHECK(lserr::event_failed,
                              cudaStreamSynchronize(reinterpret_cast<cudaStream_t>(compute_))))
      if (!timing.status)
        timing.status = std::move(err);
    const auto forward_end = std::chrono::steady_clock::now();
    // Once finish() reports the batch, its bulk rooms and any layer never
    // reported are sent whole: they read what the export copied, so its
    // copies must have landed (the per-layer path waits on each layer's
    // event instead). With hmem the notify stream is the compute stream.
    if (auto err = CUDA_CHECK(
            lserr::event_failed,
            cudaStreamSynchronize(reinterpret_cast<cudaStream_t>(export_.notify_stream()))))
      if (!timing.status)
        timing.status = std::move(err);
    if (timing.status) {
      // A sticky error (an illegal address, a kernel fault) poisons the
      // context: every later call fails alike, so no forward can run again.
      // A one-off failure (a page table that could not be allocated) clears.
      (void)cudaGetLastError();
      if (auto lost = CUDA_CHECK(lserr::device_lost, cudaDeviceSynchronize()))
        timing.status = make_error(lserr::device_lost,
                                   describe(timing.status) + "; the CUDA context is broken (" +
                                       message_of(lost) + "): the rank must restart");
    }
    timing.end = forward_end;
    tables.clear(); // the kernels that read them are done
    finish(batch.id, std::move(timing));
  }

  gpu_kv_pool& pool_;
  kv_export& export_;
  stream_handle compute_;
  std::chrono::microseconds layer_compute_;
};

} // namespace

caf::expected<std::unique_ptr<gpu_device>> gpu_device::create(const model_config& model,
                                                              uint64_t pages,
                                                              const std::string& kv_export,
                                                              const registration_probe& probe) {
  if (kv_export != "staging" && kv_export != "hmem" && kv_export != "auto")
    return make_error(lserr::bad_input, "kv_export: unknown export '" + kv_export + "'");
  auto count = cuda_device_count();
  if (!count)
    return count.error();
  if (*count == 0)
    return make_error(lserr::bad_input, "no CUDA device is visible");
  std::unique_ptr<gpu_device> dev{new gpu_device};
  CUDA_RETURN_IF_ERROR(lserr::bad_input, cudaGetDevice(&dev->cuda_device_));
  auto pool = gpu_kv_pool::create(model, pages);
  if (!pool)
    return pool.error();
  dev->pool_ = std::move(*pool);
  auto stream = cuda_stream::create();
  if (!stream)
    return stream.error();
  dev->compute_ = std::move(*stream);
  // Direct registration where the fabric can (the probe tries it on the
  // pool itself); Debian's libfabric cannot (fi_mr_regattr with iface CUDA:
  // -FI_ENOSYS), so "auto" stages there.
  bool direct = false;
  if (kv_export != "staging") {
    caf::error why = probe ? probe(dev->pool_->base(), dev->pool_->bytes(), dev->cuda_device_)
                           : make_error(lserr::bad_input, "no fabric to ask");
    if (why && kv_export == "hmem")
      return make_error(lserr::bad_input,
                        "kv_export = \"hmem\": the fabric cannot register the device pool (" +
                            describe(why) + "); use \"staging\" or \"auto\"");
    if (why)
      LS_INFO("gpu device {}: kv_export auto: staging through pinned host memory, because the "
              "fabric cannot register device memory: {}",
              dev->cuda_device_, describe(why));
    direct = !why;
  }
  auto exp = make_kv_export(*dev->pool_, dev->compute_.handle(), direct);
  if (!exp)
    return exp.error();
  dev->export_ = std::move(*exp);
  auto events = cuda_event_source::create();
  if (!events)
    return events.error();
  dev->events_ = std::move(*events);
  return dev;
}

gpu_device::~gpu_device() = default;

memory_span gpu_device::src() const {
  return {export_->src_base(), export_->src_bytes(), export_->device_memory(), cuda_device_};
}

caf::expected<std::unique_ptr<forward_runner>>
gpu_device::make_forward(std::chrono::microseconds layer_compute, forward_runner::notify_fn notify,
                         forward_runner::done_fn done) {
  return std::unique_ptr<forward_runner>(std::make_unique<gpu_forward>(
      *pool_, *export_, compute_.handle(), layer_compute, std::move(notify), std::move(done)));
}

} // namespace layerstream
