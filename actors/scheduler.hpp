// scheduler: one per prefill rank. Takes requests (transfer_info from decode),
// forms forward batches, and moves their KV to decode.
//
// Protocol (scheduler_actor, published on the control plane, plus locals):
//   transfer_info -> kv_ready   from decode: queue the request; answered when
//                               this rank's writes for every chunk of the room
//                               are delivery-complete, or failed (with reason;
//                               lserr::writes_in_flight if some it had handed
//                               over may still land: decode keeps the pages)
//   batch_done                  from the forward thread: the batch's forward ended
//   hold_forward                local (bench tail): start no batch until N
//                               requests are queued (one-shot, with a deadline)
//   forward_deadline_atom, N   local: batch N's forward has run timeouts.room
//   page_wait_deadline_atom, R, S  local: room R, still waiting for src
//                               pages (its wait S), can no longer start in
//                               time: it fails
//   stats_query -> scheduler_stats
//
// Per batch: setup (manager; a room it refuses, e.g. an id whose earlier
// context is still active there, fails alone and leaves the batch) -> forward
// (the device's forward thread; the notifier
// sends layer_end after each layer) -> batch_done -> finish for each
// per-layer room (manager), or the bulk send of all layers for the others
// (the classic transfer after the forward) -> kv_ready after the last chunk.
// Reconcile: when a per-layer room's finish fails only because some layers
// never reported their end (finish_result::unreported_layers), the bulk path
// sends exactly those layers after the forward, and the chunk's bytes are the
// per-layer bytes plus the bulk bytes. A layer the per-layer path sent is
// never sent again; a failed layer fails the room closed. The next
// batch's forward starts as soon as the previous forward ended; its transfers
// overlap. The scheduler owns its src page allocator; pages return when the
// room settles. A request that finds too few free pages waits for them, in
// arrival order, until it could no longer start in time; one that would not
// fit even in an empty pool is refused at once.
// A batch whose forward reports a status (batch_done.status: the device did
// not write its KV) fails every room in it with lserr::event_failed; its
// per-layer rooms are finished first (so their posted writes have ended, or
// the room says writes_in_flight), and none goes by the bulk path, which
// would send bytes never written.
// Every forward has a deadline: timeouts.room after it started (decode has
// given up on every room of it by then). A forward past it (a device that
// hangs: a kernel that never ends, cudaStreamSynchronize that never
// returns) fails its rooms with lserr::timeout, the per-layer ones finished
// first as above; the rank then refuses every request with that reason
// until the forward ends, since its forward thread runs one batch at a
// time; and the pages of those rooms stay out of the pool until then,
// since the device may still write them.
// A forward that reports lserr::device_lost (the device can run none again:
// a sticky CUDA error) fails every room the rank holds, those in a batch
// with writes_in_flight, and the scheduler quits with that reason, so that
// the process exits 1 and is restarted (node/watch.hpp).
#pragma once

#include <caf/stateful_actor.hpp>
#include <caf/typed_actor.hpp>
#include <caf/typed_event_based_actor.hpp>
#include <caf/typed_response_promise.hpp>

#include <chrono>
#include <deque>
#include <map>
#include <memory>
#include <optional>
#include <vector>

#include "actors/manager.hpp"
#include "actors/notifier.hpp"
#include "actors/scheduler_protocol.hpp"
#include "common/keyed_fifo.hpp"
#include "config/config.hpp"
#include "model/forward.hpp"
#include "model/prefill_device.hpp"
#include "transport/transport_protocol.hpp"

namespace layerstream {

/// Local: the deadline of batch N's forward (sent to itself when it starts).
using forward_deadline_atom = caf::atom_constant<caf::atom("fwddue")>;

/// Local: the last moment room R, waiting for src pages, could still start.
using page_wait_deadline_atom = caf::atom_constant<caf::atom("pgwaitdue")>;

using scheduler_full_actor =
    scheduler_actor::extend<caf::reacts_to<batch_done>, caf::reacts_to<hold_forward>,
                            caf::reacts_to<forward_deadline_atom, uint64_t>,
                            caf::reacts_to<page_wait_deadline_atom, room_id, uint64_t>,
                            caf::replies_to<stats_query>::with<scheduler_stats>>;

struct scheduler_config {
  model_config model;
  transfer_config transfer;
  timeouts_config timeouts;
  uint32_t cp_rank = 0;
  uint32_t cp_size = 1;
  uint64_t pool_pages = 0;
  /// Optional timeline (demo --trace).
  std::shared_ptr<trace_recorder> trace;
  /// Per-batch samples scheduler_stats keeps (forward_ns, tail_ns,
  /// settled_tail_ns): those of the first this many batches, so a rank that
  /// runs for days does not grow them without bound (~1.5 MiB at the
  /// default). The room and byte counts go on.
  size_t stats_batches_max = size_t{1} << 16;
  /// TESTING ONLY (workload.skip_notify_layers): layers the forward never
  /// notifies, so that per-layer rooms reach finish with them unreported.
  std::vector<uint32_t> skip_notify_layers;
};

/// One request on this rank.
struct prefill_room {
  transfer_info info;
  caf::typed_response_promise<kv_ready> promise;
  /// Request pages on this rank: owned positions hold real pages, others 0 (unused).
  std::vector<uint64_t> src_pages;
  std::vector<uint64_t> owned_pages;
  position_range owned;
  peer_id peer = 0;
  bool per_layer = true;
  uint64_t next_token = 0;
  uint64_t bytes = 0;
  /// Set while a chunk is in a batch (forward or transfer).
  bool busy = false;
  /// When its transfer_info arrived: decode fails the room timeouts.room
  /// after it sent it.
  std::chrono::steady_clock::time_point arrived;
};

/// One batch from setup to its last transfer.
struct batch_state {
  std::vector<room_id> rooms;
  /// Chunk token ranges of each room, in `rooms` order.
  std::vector<std::pair<uint64_t, uint64_t>> chunks;
  uint32_t unsettled = 0;
  int64_t forward_end_ns = 0;
  /// The latest delivery-complete of its rooms' writes (the engine's view),
  /// and when its last successful room settled here.
  int64_t last_delivered_ns = 0;
  int64_t last_settled_ns = 0;
};

struct scheduler_state {
  static inline const char* name = "layerstream.scheduler";

  scheduler_config cfg;
  prefill_device* device = nullptr;
  /// The device's src pointer lists (copied once: every plan uses them).
  std::vector<uint64_t> src_k_ptrs;
  std::vector<uint64_t> src_v_ptrs;
  std::unique_ptr<page_allocator> pages;
  /// Src pages of rooms that settled with writes_in_flight: a write the
  /// engine gave up on may still read them, so this process never hands them
  /// out again (decode holds the room's dst pages likewise).
  std::vector<uint64_t> held_pages;
  transport_actor transport;
  manager_actor manager;
  /// Why the device could not make a forward (every request is refused).
  caf::error forward_error;
  /// Set when the device reported lserr::device_lost: the scheduler quits.
  caf::error device_lost;
  std::map<room_id, prefill_room> rooms;
  /// Rooms that arrived to too few free src pages, in arrival order: each
  /// takes its pages once the rooms ahead of it have theirs, or fails when
  /// it could no longer start in time (`expired`). A room arriving while any
  /// wait is queued behind them, so that a large room is not starved. Each
  /// holds its wait's sequence number, which its deadline timer carries (a
  /// room in the wait holds no pages yet).
  keyed_fifo<room_id, uint64_t> page_wait;
  uint64_t next_wait_seq = 0;
  /// Set while admit_page_waiters runs (a room it settles calls it again).
  bool admitting = false;
  std::deque<room_id> queue;
  std::map<uint64_t, batch_state> batches;
  uint64_t next_batch = 1;
  bool forward_busy = false;
  /// The batch whose forward runs now (0: none), and since when.
  uint64_t running_batch = 0;
  std::chrono::steady_clock::time_point running_since;
  /// A forward past its deadline: its rooms have failed; no forward starts
  /// and every request is refused until it ends; the pages of its rooms that
  /// settled stay here, out of the pool, until then (the device may still
  /// write them).
  struct overdue_forward {
    uint64_t batch = 0;
    std::vector<room_id> rooms;
    std::vector<uint64_t> pages;
    caf::error reason;
  };
  std::optional<overdue_forward> overdue;
  /// hold_forward: no batch starts until this many requests are queued (0 = no hold).
  uint32_t hold_rooms = 0;
  uint64_t hold_id = 0;
  scheduler_stats stats;
  /// The forward thread; declared last so it stops first.
  std::unique_ptr<forward_runner> forward;
};

/// Starts the rank's forward thread (`device`'s: it writes the device's pool
/// and notifies `manager` after each layer). The scheduler does not own
/// `device`; the caller keeps it alive until the scheduler is gone.
scheduler_full_actor::behavior_type
scheduler_impl(scheduler_full_actor::stateful_pointer<scheduler_state> self, scheduler_config cfg,
               prefill_device* device, transport_actor transport, const manager_actor& manager);

} // namespace layerstream
