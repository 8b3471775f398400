#include "node/nodes.hpp"

#include <algorithm>
#include <random>

#include <caf/scoped_actor.hpp>
#include <caf/send.hpp>

#include "common/deadlines.hpp"
#include "common/log.hpp"
#include "node/device_select.hpp"

namespace layerstream {

caf::expected<std::unique_ptr<prefill_node>>
prefill_node::start(caf::actor_system& sys, const deployment_config& cfg, uint32_t cp_rank,
                    const std::shared_ptr<trace_recorder>& trace,
                    const device_factory& make_device) {
  auto node = std::make_unique<prefill_node>();
  node->cp_rank = cp_rank;
  auto device = make_device ? make_device(cfg, cp_rank) : make_prefill_device(cfg, cp_rank);
  if (!device)
    return device.error();
  node->device = std::move(*device);
  transport_config tcfg;
  tcfg.fabric.provider = cfg.fabric.provider;
  tcfg.fabric.bind_address = cfg.fabric.bind_address;
  tcfg.fabric.max_write_iov = cfg.fabric.write_iov;
  tcfg.regions.push_back(node->device->src());
  tcfg.write_timeout = cfg.timeouts.submit;
  tcfg.scope =
      cfg.cluster.network == "deployment" ? network_scope::deployment : network_scope::test;
  if (cfg.workload.fault_rate > 0) {
    LS_WARN("prefill rank {}: TEST HOOK workload.fault_rate = {}: write completions are turned "
            "into CQ errors at random",
            cp_rank, cfg.workload.fault_rate);
    tcfg.faults = std::make_shared<fabric::random_faults>(cfg.workload.fault_rate,
                                                          cfg.workload.seed + cp_rank);
  }
  auto transport = spawn_transport(sys, std::move(tcfg));
  if (!transport)
    return transport.error();
  node->transport = *transport;
  manager_config mcfg;
  // Each wait outlasts the one it covers (common/deadlines.hpp): the
  // engine's write deadline (timeouts.submit) < the context's submit request
  // < the context's finish deadline (timeouts.room, from the first finish)
  // < the manager's finish request < the scheduler's.
  mcfg.context.submit_timeout = submit_request_wait(cfg.timeouts.submit);
  mcfg.context.finish_timeout = cfg.timeouts.room;
  mcfg.finish_request_timeout = manager_finish_wait(cfg.timeouts.room);
  mcfg.context.trace = trace;
  mcfg.context.rank = cp_rank;
  node->manager = sys.spawn(manager_impl, submit_sink{node->transport}, mcfg);
  scheduler_config scfg;
  scfg.model = cfg.model;
  scfg.transfer = cfg.transfer;
  scfg.timeouts = cfg.timeouts;
  scfg.cp_rank = cp_rank;
  scfg.cp_size = cfg.cluster.cp_size;
  scfg.pool_pages = cfg.prefill.pool_pages;
  scfg.trace = trace;
  if (!cfg.workload.skip_notify_layers.empty()) // TESTING ONLY; validated < model.layers
    scfg.skip_notify_layers.assign(cfg.workload.skip_notify_layers.begin(),
                                   cfg.workload.skip_notify_layers.end());
  if (trace)
    trace->name_process(cp_rank, "prefill rank " + std::to_string(cp_rank));
  node->scheduler =
      sys.spawn(scheduler_impl, scfg, node->device.get(), node->transport, node->manager);
  LS_INFO("prefill rank {}/{}: device {}, pool {} pages x {} B, provider '{}'", cp_rank,
          cfg.cluster.cp_size, node->device->name(), cfg.prefill.pool_pages,
          node->device->layout().item_len(), cfg.fabric.provider);
  return node;
}

void prefill_node::stop() {
  caf::anon_send_exit(scheduler, caf::exit_reason::user_shutdown);
  caf::anon_send_exit(manager, caf::exit_reason::user_shutdown);
  caf::anon_send_exit(transport, caf::exit_reason::user_shutdown);
}

caf::expected<std::unique_ptr<decode_node>>
decode_node::start(caf::actor_system& sys, const deployment_config& cfg,
                   std::vector<scheduler_actor> prefill,
                   std::vector<std::vector<uint8_t>> session_keys) {
  auto node = std::make_unique<decode_node>();
  auto pool = kv_pool::create(cfg.model, cfg.decode.pool_pages);
  if (!pool)
    return pool.error();
  node->pool = std::move(*pool);
  fabric_target::config tcfg;
  tcfg.fabric.provider = cfg.fabric.provider;
  tcfg.fabric.bind_address = cfg.fabric.bind_address;
  tcfg.regions.push_back({node->pool->base(), node->pool->bytes()});
  auto target = fabric_target::open(tcfg);
  if (!target)
    return target.error();
  node->target = std::move(*target);
  decode_pool dp{node->pool.get(), node->target->peer()};
  page_allocator pages{node->pool->pages(), cfg.workload.seed, cfg.workload.fragmentation};
  auto rcfg = make_receiver_config(cfg);
  rcfg.session_keys = std::move(session_keys);
  node->receiver =
      sys.spawn(receiver_impl, dp, std::move(pages), std::move(prefill), std::move(rcfg));
  return node;
}

void decode_node::stop() {
  caf::anon_send_exit(receiver, caf::exit_reason::user_shutdown);
}

caf::error local_cluster::start(caf::actor_system& sys, const deployment_config& cfg,
                                const std::shared_ptr<trace_recorder>& trace,
                                const device_factory& make_device) {
  std::vector<scheduler_actor> schedulers;
  for (uint32_t r = 0; r < cfg.cluster.cp_size; ++r) {
    auto node = prefill_node::start(sys, cfg, r, trace, make_device);
    if (!node)
      return make_error(lserr::bad_input,
                        "prefill rank " + std::to_string(r) + ": " + describe(node.error()));
    schedulers.push_back((*node)->scheduler);
    prefill.push_back(std::move(*node));
  }
  auto node = decode_node::start(sys, cfg, std::move(schedulers));
  if (!node)
    return make_error(lserr::bad_input, "decode: " + describe(node.error()));
  decode = std::move(*node);
  return caf::none;
}

void local_cluster::stop(caf::actor_system& sys) {
  if (decode)
    decode->stop();
  for (auto& p : prefill)
    p->stop();
  // The pools (in the nodes) must outlive every actor that writes or reads them.
  sys.await_all_actors_done();
  if (decode)
    decode->target->close();
}

workload_report run_workload(caf::actor_system& sys, const receiver_actor& receiver,
                             const deployment_config& cfg, room_id first_room) {
  workload_report rep;
  const auto& w = cfg.workload;
  std::mt19937_64 rng{w.seed};
  std::uniform_int_distribution<uint64_t> tokens{w.min_tokens, w.max_tokens};
  const uint64_t buffers = cfg.model.mla ? 1 : 2;
  caf::scoped_actor self{sys};
  auto t0 = std::chrono::steady_clock::now();
  // The receiver answers every room: a room waits at most room_ms for
  // pages, then has room_ms from taking them. So every result comes within
  // twice room_ms of the opens; one deadline for all (a wait per result
  // would run out while a room let in late still had time).
  const auto bound = 2 * cfg.timeouts.room + std::chrono::seconds(5);
  const auto deadline = t0 + bound;
  for (uint32_t r = 0; r < w.rooms; ++r) {
    auto n = tokens(rng);
    auto pages = (n + cfg.model.page_size - 1) / cfg.model.page_size;
    rep.bytes_expected += pages * cfg.model.item_len() * buffers * cfg.model.layers;
    self->send(receiver, open_room{first_room + r, n});
  }
  rep.rooms = w.rooms;
  // A receiver that dies answers no more rooms: say so now, not at the deadline.
  self->monitor(receiver);
  bool all_exact = true;
  for (uint32_t i = 0; i < w.rooms; ++i) {
    bool timed_out = false;
    bool receiver_down = false;
    self->receive(
        [&](room_result& res) {
          rep.bytes_written += res.bytes;
          if (res.status) {
            ++rep.failed;
            if (rep.failures.size() < 5)
              rep.failures.push_back("room " + std::to_string(res.room) + ": " +
                                     describe(res.status));
          } else {
            ++rep.complete;
            all_exact = all_exact && res.bit_exact;
          }
          // A duplicate id was refused: the room holding that id is not
          // this one's to close.
          if (!is(res.status, lserr::duplicate_room))
            caf::anon_send(receiver, close_room{res.room});
        },
        [&](caf::error& err) {
          ++rep.failed;
          if (rep.failures.size() < 5)
            rep.failures.push_back(describe(err));
        },
        [&](caf::down_msg& down) {
          receiver_down = true;
          rep.failed += w.rooms - i;
          rep.failures.push_back("no answer for " + std::to_string(w.rooms - i) +
                                 " rooms: the receiver is down (" + describe(down.reason) + ")");
        },
        caf::after(std::max<std::chrono::steady_clock::duration>(
            deadline - std::chrono::steady_clock::now(), std::chrono::milliseconds(1))) >>
            [&] { timed_out = true; });
    if (receiver_down)
      break;
    if (timed_out) {
      rep.failed += w.rooms - i;
      rep.failures.push_back("no answer for " + std::to_string(w.rooms - i) + " rooms within " +
                             std::to_string(bound.count()) +
                             " ms of the opens (twice timeouts.room_ms, plus 5 s)");
      break;
    }
  }
  // A monitor would outlive this call (soak calls it once per round).
  self->demonitor(receiver.address());
  rep.bit_exact = all_exact && rep.complete > 0;
  rep.wall_ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  return rep;
}

} // namespace layerstream
