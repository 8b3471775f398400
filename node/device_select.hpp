// Picks a prefill rank's device from the config (prefill.device,
// prefill.kv_export): the host pool and CPU forward, or, in a binary built
// with CUDA, the GPU pool, kernel forward and CUDA events. A choice this
// binary or machine cannot honour is an error with the reason, never a
// silent fallback to the CPU.
#pragma once

#include <memory>

#include "common/error.hpp"
#include "config/config.hpp"
#include "model/prefill_device.hpp"

namespace layerstream {

/// True if this binary was built with the CUDA device layer.
bool built_with_cuda();

/// CUDA devices this process sees (cudaGetDeviceCount); an error where the
/// runtime finds none or no driver, 0 in a binary built without CUDA.
caf::expected<int> visible_cuda_devices();

caf::expected<std::unique_ptr<prefill_device>> make_prefill_device(const deployment_config& cfg,
                                                                   uint32_t cp_rank);

} // namespace layerstream
