// manager: one per prefill rank; owns the active contexts, one per forward
// batch (actors/context.hpp).
//
// Protocol:
//   setup{batch}    from the scheduler, before the forward: spawn one context
//                   for the batch's requests; answered with setup_result once
//                   it exists (so the forward may start). A room that cannot
//                   be set up (its id still active here, bad pointers) is
//                   refused in the answer, alone: the others go on
//   layer_end       from the notifier (forward thread): fanned out to every
//                   active context with the same event; a no-op when idle
//   finish{room}    from the scheduler: forwarded to that room's context;
//                   the answer goes back and the room is removed; a context
//                   is stopped once every room of its batch is finished
//
// A finished room's answer is remembered (the last `finished_memory` rooms),
// so a repeated finish gets the same answer; an unknown room gets an
// unknown_room failure. Contexts are linked to the manager.
#pragma once

#include <caf/replies_to.hpp>
#include <caf/stateful_actor.hpp>
#include <caf/typed_actor.hpp>
#include <caf/typed_event_based_actor.hpp>
#include <caf/typed_response_promise.hpp>

#include <deque>
#include <unordered_map>
#include <vector>

#include "actors/context.hpp"

namespace layerstream {

using manager_actor =
    caf::typed_actor<caf::replies_to<setup>::with<setup_result>, caf::reacts_to<layer_end>,
                     caf::replies_to<finish>::with<finish_result>>;

struct manager_config {
  context_config context;
  /// Deadline of the manager's finish request to a context (beyond the
  /// context's own finish_timeout, so the context answers first).
  caf::timespan finish_request_timeout = std::chrono::seconds(90);
  /// How many finished rooms keep their answer for repeated finish calls.
  size_t finished_memory = 4096;
};

struct manager_state {
  static inline const char* name = "layerstream.manager";

  submit_sink transport;
  manager_config cfg;
  struct active_context {
    context_actor ctx;
    /// Rooms of the batch not finished yet; the context stops at zero.
    size_t rooms_left = 0;
  };
  /// Contexts that receive layer_end (contiguous for the fan-out; one per
  /// batch in flight, so a handful).
  std::vector<active_context> active;
  /// Each active room's context.
  std::unordered_map<room_id, context_actor> context_of;
  /// finish requests waiting for their context's answer.
  std::unordered_map<room_id, std::vector<caf::typed_response_promise<finish_result>>> finishing;
  /// Answers of recently finished rooms, and the order they came in, oldest
  /// first. A room id reused by a new request leaves a stale entry in the
  /// order; the sequence number tells it from the entry of the answer kept
  /// now, so trimming the stale one does not drop the current answer.
  struct remembered {
    finish_result result;
    uint64_t seq = 0;
  };
  std::unordered_map<room_id, remembered> finished;
  std::deque<std::pair<room_id, uint64_t>> finished_order;
  uint64_t next_finished_seq = 0;
};

manager_actor::behavior_type manager_impl(manager_actor::stateful_pointer<manager_state> self,
                                          submit_sink transport, manager_config cfg);

} // namespace layerstream
