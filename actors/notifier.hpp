// notifier: what the forward thread calls after each layer's KV write.
//
// It records ONE event on its stream (the compute stream, or the export's
// copy stream when the KV is staged to host memory) and hands ONE
// layer_end{layer, event} to the manager. It never blocks, never waits for
// the device, allocates nothing per active request, and touches no actor
// state (the fan-out to contexts happens in the manager).
//
// Two ways to hand the layer_end over:
// - direct (poll = 0): caf::anon_send on the forward thread. Simple, but the
//   send wakes a CAF worker (a futex call): ~1-5 us on the forward thread.
// - offloaded (poll > 0, the default in the scheduler): the layer_end goes
//   into a preallocated single-producer/single-consumer ring, and a drain
//   thread polling every `poll` sends it. The forward thread pays a ring push
//   and one atomic load (tens of ns); the drain thread pays the wake-up. After
//   `idle_sleep` without notifications the drain thread sleeps on a condition
//   variable and the next notify wakes it (once, then it polls again). The
//   push is not fenced (a fence cost ~1 us): a notify that races the falling
//   asleep can miss it, and then waits for the drain thread's next recheck
//   (`idle_recheck`, 2 ms), never longer.
//   A full ring (the drain thread stalled for `capacity` layers) falls back to
//   a direct send: the manager and contexts accept layer_ends in any order.
//
// The last layer: its hand-off is the front of the exposed tail (nothing
// after it hides it). A sleeping drain thread finds it up to a sleep (50 us
// asked, ~120 us on a busy VM) late, and the wake-ups down the chain cost
// more when the cores around them idle. So once the drain thread has sent a
// forward's second-to-last layer (`layers` - 2), it expects the last one a
// layer gap later (the gap between the forward thread's pushes of layers
// `layers` - 3 and `layers` - 2), and from a quarter of that gap (at most
// half of `last_layer_spin`) before then it yields in a loop instead of
// sleeping, until the next slot comes or `last_layer_spin` has passed. No
// gap, no spin: fewer than 3 layers, or layer `layers` - 3 not sent just
// before (an overflowed push). (Spinning over the whole gap slowed the
// many-room transfers of the layers before.)
// The cost: a core busy for about a quarter layer once per forward, longer
// if the last layer is late. yield() may let other runnable threads run
// first (on Linux's normal scheduler it is a hint), and the time counts as
// this process's CPU (a cgroup CPU quota charges it). On a GPU the pushes
// come when the forward thread enqueues each layer, so the gaps are launch
// gaps and the spin is short.
//
// then(fn) keeps causality: `fn` runs after every layer_end notified before
// it has been sent to the manager (the scheduler sends its batch_done that
// way, so the manager sees a layer's end before the room's finish).
//
// Thread contract: one forward thread calls operator() and then(); copies
// share one ring and one drain thread, which stops and joins (after sending
// what is queued) when the last copy is destroyed.
#pragma once

#include <chrono>
#include <functional>
#include <memory>

#include "actors/manager.hpp"
#include "device/event.hpp"

namespace layerstream {

struct notifier_options {
  /// Drain-thread poll interval; 0 = direct sends on the forward thread.
  std::chrono::microseconds poll{0};
  /// Without notifications for this long, the drain thread sleeps until woken.
  std::chrono::milliseconds idle_sleep{100};
  /// An asleep drain thread still looks at the ring this often: the bound on
  /// the delay of a notify that raced its falling asleep (push is unfenced).
  std::chrono::microseconds idle_recheck{2000};
  /// Ring slots (layer_ends the drain thread may lag behind).
  size_t capacity = 4096;
  /// Layers of one forward (the model's); 0 = unknown: never spin (nor with
  /// fewer than 3: no layer gap to time it by).
  uint32_t layers = 0;
  /// After sending layer `layers` - 2, yield (not sleep) for the next slot
  /// from min(a quarter layer gap, half this) before the last layer is due,
  /// for at most this long; 0 = never.
  std::chrono::microseconds last_layer_spin{0};
};

/// Counters of an offloaded notifier (all zero for a direct one).
struct notifier_counters {
  uint64_t offloaded = 0;     ///< layer_ends that went through the ring
  uint64_t overflowed = 0;    ///< layer_ends sent directly because the ring was full
  uint64_t wakeups = 0;       ///< times notify had to wake a sleeping drain thread
  bool sleeping = false;      ///< the drain thread sleeps now (idle)
  uint64_t spins = 0;         ///< waits for a last layer spent yielding, not sleeping
  uint64_t spin_timeouts = 0; ///< of those, the ones that ran out before a slot came
  bool spinning = false;      ///< the drain thread yields for a last layer now
};

class layer_notifier {
 public:
  layer_notifier(manager_actor manager, event_source& events, notifier_options opts = {},
                 stream_handle stream = 0);

  /// Layer `layer`'s KV write (and its staging copy, if any) has been
  /// enqueued, so that the stream this notifier records on is ordered
  /// after it.
  void operator()(uint32_t layer);

  /// Runs `fn` once every layer_end notified so far has been sent (on the
  /// drain thread when offloaded, at once on this thread when direct).
  void then(std::function<void()> fn);

  notifier_counters counters() const;

  class drain; // the ring and its thread (notifier.cpp)

 private:
  manager_actor manager_;
  event_source& events_;
  stream_handle stream_;
  std::shared_ptr<drain> drain_; // null when direct
};

} // namespace layerstream
