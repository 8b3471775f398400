#include "node/device_select.hpp"

#include "common/log.hpp"

#ifdef LAYERSTREAM_WITH_CUDA
#include "device/cuda_event.hpp"
#include "device/gpu_device.hpp"
#include "transport/fabric/endpoint.hpp"
#endif

namespace layerstream {

bool built_with_cuda() {
#ifdef LAYERSTREAM_WITH_CUDA
  return true;
#else
  return false;
#endif
}

caf::expected<int> visible_cuda_devices() {
#ifdef LAYERSTREAM_WITH_CUDA
  return cuda_device_count();
#else
  return 0;
#endif
}

caf::expected<std::unique_ptr<prefill_device>> make_prefill_device(const deployment_config& cfg,
                                                                   uint32_t cp_rank) {
  const auto& p = cfg.prefill;
  if (p.device == "cpu") {
    auto dev = cpu_device::create(cfg.model, p.pool_pages);
    if (!dev)
      return dev.error();
    return std::unique_ptr<prefill_device>(std::move(*dev));
  }
  if (p.device != "gpu")
    return make_error(lserr::bad_input, "prefill.device: unknown device '" + p.device + "'");
#ifdef LAYERSTREAM_WITH_CUDA
  // The probe registers the pool on the rank's own provider, as the
  // transport will: asking fi_getinfo for FI_HMEM is not enough.
  fabric::fabric_config fabric;
  fabric.provider = cfg.fabric.provider;
  fabric.bind_address = cfg.fabric.bind_address;
  auto probe = [fabric](void* ptr, uint64_t len, int device) {
    return fabric::probe_cuda_registration(fabric, ptr, len, device);
  };
  auto dev = gpu_device::create(cfg.model, p.pool_pages, p.kv_export, probe);
  if (!dev)
    return make_error(lserr::bad_input, "prefill rank " + std::to_string(cp_rank) +
                                            ": device gpu: " + describe(dev.error()));
  return std::unique_ptr<prefill_device>(std::move(*dev));
#else
  (void)cp_rank;
  return make_error(lserr::bad_input,
                    "prefill.device = \"gpu\", but this binary was built without CUDA (nvcc was "
                    "not found at build time, or a sanitizer build)");
#endif
}

} // namespace layerstream
