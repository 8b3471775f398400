// context: one per forward batch on a prefill rank, holding one pipeline
// per request (room) of that batch. A batch shares its layer_end events, so
// the context waits on each layer's event once and sends each layer of all
// its rooms in one submit_batch per decode peer: per layer, a handful of
// messages for the whole batch instead of four per room (bench/HISTORY.md,
// "Batched submit").
//
// Protocol:
//   layer_end{layer, event}  from the manager: ask the event for completion
//                            (once, for every room that needs the layer)
//   event_ready{layer}       from the event waiter: build every waiting
//                            room's blocks, submit once per room
//   finish{room}             from the manager: answered with finish_result
//                            once none of that room's layers is outstanding;
//                            layers with owned pages that never got a
//                            layer_end are listed in unreported_layers (status
//                            missing_layer) when they are the room's only
//                            problem, so that the scheduler can send them by
//                            the bulk path
//   finish_deadline{room}    to itself: the room's outstanding layers ran out
//                            of time
//
// Rules, per room: a layer is submitted at most once and only after its event
// completed; a room with no owned pages submits nothing; after the room's
// first failed wait or submit nothing more is submitted for it (fail closed),
// and its neighbours in the batch are not affected; finish waits for every
// outstanding layer of the room, bounded by `finish_timeout`, and every
// finish of a room gets the same answer. After the first finish of any of
// its rooms the context takes no more layer_end: the scheduler finishes a
// batch only after its batch_done, which follows every layer_end of the
// batch, so a later one is another batch's. The context never outlives its
// manager (linked).
#pragma once

#include <caf/duration.hpp>
#include <caf/replies_to.hpp>
#include <caf/stateful_actor.hpp>
#include <caf/typed_actor.hpp>
#include <caf/typed_event_based_actor.hpp>
#include <caf/typed_response_promise.hpp>

#include <memory>
#include <optional>
#include <unordered_map>
#include <vector>

#include "common/handler_clock.hpp"
#include "common/trace.hpp"
#include "messages/messages.hpp"
#include "transport/transport_protocol.hpp"

namespace layerstream {

using context_actor =
    caf::typed_actor<caf::reacts_to<layer_end>, caf::reacts_to<event_ready>,
                     caf::replies_to<finish>::with<finish_result>, caf::reacts_to<finish_deadline>>;

struct context_config {
  /// Deadline of one submit (its request to the transport).
  caf::timespan submit_timeout = std::chrono::seconds(30);
  /// Deadline, counted from the first finish, for layers still waiting on
  /// their event or transport.
  caf::timespan finish_timeout = std::chrono::seconds(60);
  /// Optional timeline (demo --trace): event ready and submit-to-done per layer.
  std::shared_ptr<trace_recorder> trace;
  /// The prefill rank, as the trace's process id.
  uint32_t rank = 0;
  /// Optional (benchmarks): CPU time spent in this context's handlers.
  handler_cpu_counter handler_cpu;
};

/// Where one layer of this room stands.
enum class layer_phase : uint8_t {
  idle,          // no layer_end yet
  waiting_event, // layer_end seen, event not complete yet
  submitted,     // submit sent, no submit_done yet
  sent,          // delivery-complete
  empty,         // no owned pages: nothing to send
  failed,        // its wait or submit failed
  cancelled,     // not sent because the room had already failed
};

/// One room's column of its batch's phase table. The table is layer-major
/// (one layer's phases of every room side by side), so that a layer's pass
/// over 256 rooms reads 4 cache lines of phases instead of 256 scattered
/// vectors.
class phase_column {
 public:
  phase_column() = default;
  phase_column(layer_phase* first, size_t stride, size_t layers)
      : first_(first), stride_(stride), layers_(layers) {
    // nop
  }
  layer_phase& operator[](size_t layer) { return first_[layer * stride_]; }
  layer_phase operator[](size_t layer) const { return first_[layer * stride_]; }
  size_t size() const { return layers_; }

 private:
  layer_phase* first_ = nullptr;
  size_t stride_ = 0;
  size_t layers_ = 0;
};

/// One room's pipeline inside its batch's context. The fields a layer
/// touches come first, on as few cache lines as possible.
struct room_pipeline {
  /// The room's K/V pointer lists: one copy per distinct set in the batch.
  /// Rooms of one batch share the prefill pool and, per decode peer, the
  /// decode pool, so building a layer for 256 rooms reads one set of lists
  /// (a few cache lines) instead of 256 scattered ones.
  const kv_pointers* ptrs = nullptr;
  /// Where each of its layers stands (a column of the batch's table).
  phase_column layers;
  /// Layers waiting on an event or a submit.
  uint32_t outstanding = 0;
  uint32_t layers_sent = 0;
  uint64_t bytes = 0;
  /// The latest submit_done::delivered_ns of its layers.
  int64_t delivered_ns = 0;
  /// First failure; no submit after it.
  caf::error failure;
  std::vector<caf::typed_response_promise<finish_result>> finish_waiters;
  /// Its request; `req.ptrs` is emptied at start (the lists live in `ptrs`).
  request_transfer req;
  std::optional<finish_result> result;
  bool deadline_armed = false;
  /// When each layer's submit went out (only kept while tracing).
  std::vector<int64_t> submitted_ns;
};

struct context_state {
  static inline const char* name = "layerstream.context";

  submit_sink transport;
  context_config cfg;
  /// The batch's rooms, in setup order; an index stays valid for the
  /// context's lifetime.
  std::vector<room_pipeline> rooms;
  std::unordered_map<room_id, size_t> index_of;
  /// The distinct pointer sets of the batch (stable addresses).
  std::vector<std::unique_ptr<const kv_pointers>> pointer_sets;
  /// The phase table: layer l of room i at [l * rooms.size() + i]. Sized
  /// once at start, never resized (the columns point into it).
  std::vector<layer_phase> phases;
  /// Blocks of one layer of the whole batch (every room's runs, K and V):
  /// the flat list is reserved once per layer at this size.
  size_t blocks_per_layer_hint = 0;
  /// A finish came: the forward batch is over, so every later layer_end is
  /// a later batch's (the manager fans layer_end out to every context still
  /// active) and must not be written into this batch's rooms.
  bool batch_over = false;
};

context_actor::behavior_type context_impl(context_actor::stateful_pointer<context_state> self,
                                          std::vector<request_transfer> batch,
                                          submit_sink transport, const context_config& cfg);

} // namespace layerstream
