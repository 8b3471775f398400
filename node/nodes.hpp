// Assembling a process's actors from the deployment config.
//
// prefill_node: one prefill rank = its device (KV pool and forward:
// node/device_select.hpp), libfabric transport actor, manager and scheduler
// (the forward thread lives in the scheduler).
// decode_node: one decode rank = its KV pool, the registered fabric target
// (kept progressing) and the receiver.
// The demo builds cp_size prefill nodes and a decode node in one process;
// `layerstream prefill` / `decode` build one each and talk over caf-io.
//
// Lifecycle: start() opens everything or nothing; stop() sends every actor
// an exit; the pools must outlive the actor system's shutdown (declare the
// nodes before the actor_system, or call stop() and let the system wait).
#pragma once

#include <functional>
#include <memory>
#include <vector>

#include <caf/actor_system.hpp>
#include <caf/actor_system_config.hpp>

#include "actors/receiver.hpp"
#include "actors/scheduler.hpp"
#include "config/config.hpp"
#include "model/kv_pool.hpp"
#include "model/prefill_device.hpp"
#include "transport/transport_actor.hpp"

namespace layerstream {

/// Makes rank `cp_rank`'s device. The default is make_prefill_device (the
/// config's prefill.device); tests pass their own to put a faulty device
/// under a real node.
using device_factory = std::function<caf::expected<std::unique_ptr<prefill_device>>(
    const deployment_config& cfg, uint32_t cp_rank)>;

struct prefill_node {
  uint32_t cp_rank = 0;
  std::unique_ptr<prefill_device> device;
  transport_actor transport;
  manager_actor manager;
  scheduler_full_actor scheduler;

  /// `trace` (optional) records this rank's timeline; `make_device`
  /// (optional) replaces make_prefill_device.
  static caf::expected<std::unique_ptr<prefill_node>>
  start(caf::actor_system& sys, const deployment_config& cfg, uint32_t cp_rank,
        const std::shared_ptr<trace_recorder>& trace = nullptr,
        const device_factory& make_device = {});
  void stop();
};

struct decode_node {
  std::unique_ptr<kv_pool> pool;
  std::unique_ptr<fabric_target> target;
  receiver_actor receiver;

  static caf::expected<std::unique_ptr<decode_node>>
  start(caf::actor_system& sys, const deployment_config& cfg, std::vector<scheduler_actor> prefill,
        std::vector<std::vector<uint8_t>> session_keys = {});
  void stop();
};

/// cp_size prefill ranks and one decode node in this process (the demo and
/// the equivalence tests). The pools live in the nodes: stop() before the
/// actor system goes away.
struct local_cluster {
  std::vector<std::unique_ptr<prefill_node>> prefill;
  std::unique_ptr<decode_node> decode;

  /// Starts every prefill rank, then the decode node. On error, what was
  /// started is still here for stop().
  caf::error start(caf::actor_system& sys, const deployment_config& cfg,
                   const std::shared_ptr<trace_recorder>& trace = nullptr,
                   const device_factory& make_device = {});

  /// Stops every actor, waits for all actors of `sys`, closes the fabric target.
  void stop(caf::actor_system& sys);
};

/// What a workload run produced (decode side).
struct workload_report {
  uint32_t rooms = 0;
  uint32_t complete = 0;
  uint32_t failed = 0;
  /// Every complete room's bytes matched kv_pattern (and there was at least one).
  bool bit_exact = false;
  uint64_t bytes_expected = 0;
  uint64_t bytes_written = 0;
  double wall_ms = 0;
  /// The first few failure reasons, for the report.
  std::vector<std::string> failures;
};

/// Opens `cfg.workload.rooms` rooms (random prompt lengths from the seed) on
/// `receiver`, all at once, and waits for every result (all of them within
/// twice the room timeout, plus a margin, of the opens: a room may wait a room
/// timeout for pages). Rooms are closed after their result, but a room
/// refused as a duplicate id (the room that holds the id is not this one's).
/// Room ids are first_room, first_room + 1, ...
workload_report run_workload(caf::actor_system& sys, const receiver_actor& receiver,
                             const deployment_config& cfg, room_id first_room = 1);

} // namespace layerstream
