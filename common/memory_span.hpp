// memory_span: a range of this process's memory that the fabric registers.
// A prefill device says where its src bytes lie with one
// (prefill_device::src); the transport registers each of its regions.
#pragma once

#include <cstdint>

namespace layerstream {

struct memory_span {
  void* base = nullptr;
  uint64_t length = 0;
  /// Device memory (CUDA device `cuda_device`): spawn_transport opens the
  /// endpoint with FI_HMEM and registers it with iface FI_HMEM_CUDA; a
  /// provider that cannot is refused with the reason (use the staging export).
  bool cuda = false;
  int cuda_device = 0;
};

} // namespace layerstream
