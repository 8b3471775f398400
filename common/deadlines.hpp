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

// The chain of waits of one room, innermost first. `submit` is
// timeouts.submit_ms (the engine's write deadline), `room` is
// timeouts.room_ms (the context's finish deadline, from a room's first
// finish). Each wait is named here so that the order lives in one place.

/// A submit request (context -> transport, scheduler bulk -> transport):
/// past the engine's write deadline.
inline caf::timespan submit_request_wait(caf::timespan submit) {
  return outer_deadline(submit);
}

/// The manager's finish request to a context: past the context's finish deadline.
inline caf::timespan manager_finish_wait(caf::timespan room) {
  return outer_deadline(room);
}

/// The scheduler's finish request to the manager: past the manager's own wait.
inline caf::timespan scheduler_finish_wait(caf::timespan room) {
  return outer_deadline(manager_finish_wait(room));
}

} // namespace layerstream
