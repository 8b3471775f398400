// Limits shared by the config loader (which refuses a config past them with
// exit 2) and the code that would otherwise fail on them at run time.
#pragma once

#include <cstdint>

namespace layerstream {

/// The largest KV pool one process maps: 1 TiB.
inline constexpr uint64_t max_pool_bytes = uint64_t{1} << 40;

} // namespace layerstream
