// Nested deadlines: a wait that covers another bounded wait ends later than
// it, so that the inner deadline fires first and its reason (which layer,
// which peer, what the provider answered) is the one the room reports,
// instead of a bare request_timeout from the layer above.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstdint>

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

// A transfer_info's answer. Decode fails the room at `room`, but a rank that
// has not answered may still be writing into its pages, so decode waits
// longer for the answer (actors/receiver.hpp).

/// One chunk's nominal forward, layers x layer, saturating at a day (both are bounded, their
/// product is not); a forward that long is refused by the room deadline anyway.
inline caf::timespan forward_time(uint32_t layers, std::chrono::microseconds layer) {
  const caf::timespan day = std::chrono::hours(24);
  if (layer.count() <= 0)
    return caf::timespan{0};
  if (static_cast<uint64_t>(layers) >= static_cast<uint64_t>(day / layer))
    return day;
  return std::chrono::duration_cast<caf::timespan>(layer * layers);
}

/// The longest a live prefill rank takes to answer a transfer_info: its last
/// chunk starts within `room` of the arrival (the scheduler's start rule),
/// its batch's setup waits at most `room`, its forward runs at most `room`
/// (the scheduler's forward deadline, however long the nominal forward),
/// then the finish chain and, for layers the per-layer path did not send
/// (or a bulk room), one bulk submit.
inline caf::timespan prefill_answer_bound(caf::timespan room, caf::timespan submit) {
  return room + room + room + scheduler_finish_wait(room) + submit_request_wait(submit);
}

/// The gate's session forwarding a transfer_info to its scheduler.
inline caf::timespan session_answer_wait(caf::timespan room, caf::timespan submit) {
  return outer_deadline(prefill_answer_bound(room, submit));
}

/// Decode's transfer_info request: past the session's wait.
inline caf::timespan decode_answer_wait(caf::timespan room, caf::timespan submit) {
  return outer_deadline(session_answer_wait(room, submit));
}

} // namespace layerstream
