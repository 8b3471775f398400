// The CAF scheduler settings every layerstream process runs with.
#pragma once

#include <cstddef>

#include <caf/actor_system_config.hpp>

namespace layerstream {

/// CAF 0.17's idle worker first spins on its queue (aggressive phase), then
/// polls it 500 times with a 50 us sleep in between (moderate phase), and
/// only then waits on a condition variable that an enqueue from another
/// thread notifies (relaxed phase). A message from a foreign thread (the
/// notifier's drain thread, an event callback, the fabric engine's
/// completions) that lands on a worker in a moderate sleep waits out the
/// sleep plus the kernel's timer slack, on every hop of a layer's chain, and
/// the polling itself costs CPU after every burst. Without the moderate
/// phase an idle worker spins briefly and then sleeps until it is woken
/// (bench/HISTORY.md, "Batched submit": lower handling CPU and latency).
inline void tune_actor_runtime(caf::actor_system_config& cfg) {
  cfg.set("work-stealing.moderate-poll-attempts", size_t{0});
}

} // namespace layerstream
