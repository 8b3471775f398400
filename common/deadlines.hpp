// Nested deadlines: a wait that covers another bounded wait ends later than
// it, so that the inner deadline fires first and its reason (which layer,
// which peer, what the provider answered) is the one the room reports,
// instead of a bare request_timeout from the layer above.
#pragma once

#include <algorithm>
#include <chrono>

#include <caf/timespan.hpp>

namespace layerstream {

/// The deadline of a request whose answer waits on something bounded by
/// `inner`: `inner` plus a quarter of it, and at least one second more.
inline caf::timespan outer_deadline(caf::timespan inner) {
  return inner + std::max<caf::timespan>(inner / 4, std::chrono::seconds(1));
}

} // namespace layerstream
