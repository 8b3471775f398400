#include "bench/tail_bench.hpp"

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <future>
#include <iostream>
#include <memory>

#include <sys/resource.h>

#include <caf/all.hpp>
#include <nlohmann/json.hpp>

#include "actors/notifier.hpp"
#include "common/json_file.hpp"
#include "common/log.hpp"
#include "common/net_guard.hpp"
#include "config/loader.hpp"
#include "model/cpu_forward.hpp"
#include "node/actor_runtime.hpp"
#include "node/device_select.hpp"
#include "node/nodes.hpp"

namespace layerstream {

namespace {

using namespace std::chrono_literals;
using clock_type = std::chrono::steady_clock;

/// One row of the table: the workload shape.
struct bench_shape {
  uint32_t layers = 32;
  uint32_t rooms = 1;
  uint32_t cp = 1;
  uint64_t tokens = 0;   // per room
  uint32_t kv_heads = 0; // sets the page size in bytes
};

/// The workload of a shape: by default one room holds 256 tokens (16
/// pages); many rooms hold one page each, and at 256 rooms the pages are
/// smaller (1 KV head), so that one layer's bytes stay below what the link
/// moves in one layer's compute (the regime where per-layer overlap can hide
/// the transfer). `tokens` > 0 sets the prompt length of every room instead.
bench_shape shape_of(uint32_t layers, uint32_t rooms, uint32_t cp, uint64_t tokens) {
  bench_shape s{layers, rooms, cp, rooms == 1 ? 256u : 16u, rooms >= 128 ? 1u : 8u};
  if (tokens > 0)
    s.tokens = tokens;
  return s;
}

double median(std::vector<double> v) {
  if (v.empty())
    return 0;
  std::sort(v.begin(), v.end());
  return v.size() % 2 ? v[v.size() / 2] : (v[v.size() / 2 - 1] + v[v.size() / 2]) / 2;
}

int64_t percentile(std::vector<int64_t> v, double p) {
  if (v.empty())
    return 0;
  std::sort(v.begin(), v.end());
  auto k = static_cast<size_t>(std::llround(p * static_cast<double>(v.size() - 1)));
  return v[std::min(k, v.size() - 1)];
}

/// transfer.notify_spin_us the runs use: the option, else the embedded config's.
int64_t notify_spin_in_use(const tail_bench_options& o) {
  if (o.notify_spin_us)
    return *o.notify_spin_us;
  auto res = load_config_string(embedded_demo_config(), "<embedded demo config>");
  if (auto* cfg = std::get_if<deployment_config>(&res))
    return cfg->transfer.notify_spin.count();
  return transfer_config{}.notify_spin.count();
}

std::optional<deployment_config> make_config(const tail_bench_options& o, const bench_shape& b,
                                             bool per_layer, std::string& why) {
  auto res = load_config_string(embedded_demo_config(), "<embedded demo config>");
  if (auto* err = std::get_if<config_error>(&res)) {
    why = err->to_string();
    return std::nullopt;
  }
  auto cfg = std::get<deployment_config>(std::move(res));
  cfg.model.layers = b.layers;
  cfg.model.kv_heads = b.kv_heads;
  cfg.model.head_dim = 64;
  cfg.model.dtype_bytes = 2;
  cfg.model.page_size = 16;
  cfg.model.mla = false;
  cfg.model.layer_compute = std::chrono::microseconds(o.layer_compute_us);
  cfg.model.compute_wait = o.compute_wait;
  cfg.transfer.per_layer = per_layer;
  cfg.transfer.per_layer_min_tokens = 0;
  cfg.transfer.chunk_tokens = 0;
  cfg.transfer.max_batch = b.rooms; // every room in one forward batch
  cfg.fabric.provider = o.provider;
  cfg.fabric.write_iov = o.write_iov;
  if (o.notify_spin_us)
    cfg.transfer.notify_spin = std::chrono::microseconds(*o.notify_spin_us);
  cfg.prefill.device = o.device;
  const uint64_t pages = (b.tokens + cfg.model.page_size - 1) / cfg.model.page_size;
  cfg.prefill.pool_pages = b.rooms * pages;
  cfg.decode.pool_pages = b.rooms * pages;
  cfg.workload.rooms = b.rooms;
  cfg.workload.min_tokens = b.tokens;
  cfg.workload.max_tokens = b.tokens;
  cfg.workload.fault_rate = 0;
  cfg.cluster.cp_size = b.cp;
  if (auto err = validate_for(cfg, config_role::demo, "<bench tail>")) {
    why = err->to_string();
    return std::nullopt;
  }
  return cfg;
}

/// What one workload run measured (the worst CP rank: decode completes a
/// room only after every rank).
struct run_sample {
  /// Forward end to the last byte delivery-complete (the engine saw it).
  double tail_ms = 0;
  /// Forward end to the scheduler having settled every room: the tail plus
  /// the actor hops that report it.
  double settled_ms = 0;
  double forward_ms = 0;
  std::vector<int64_t> notify_ns;
};

/// The largest of the samples `after` holds beyond `before` (one rank's
/// batches of this run; the stats are cumulative), in ms; 0 if none.
double max_new_ms(const std::vector<int64_t>& before, const std::vector<int64_t>& after) {
  double out = 0;
  for (size_t k = before.size(); k < after.size(); ++k)
    out = std::max(out, static_cast<double>(after[k]) / 1e6);
  return out;
}

/// Stats of every rank (cumulative).
std::vector<scheduler_stats> stats_of(caf::actor_system& sys, local_cluster& c) {
  std::vector<scheduler_stats> out;
  caf::scoped_actor self{sys};
  for (auto& p : c.prefill)
    self->request(p->scheduler, 10s, stats_query{})
        .receive([&](scheduler_stats& s) { out.push_back(std::move(s)); },
                 [&](caf::error&) { out.emplace_back(); });
  return out;
}

/// One workload run on `c`: all rooms in one batch per rank (hold_forward),
/// checked bit-exact at decode. nullopt (and `why`) if any room failed.
std::optional<run_sample> run_once(caf::actor_system& sys, local_cluster& c,
                                   const deployment_config& cfg, room_id first_room,
                                   uint64_t hold_id, std::string& why) {
  auto before = stats_of(sys, c);
  for (auto& p : c.prefill)
    caf::anon_send(p->scheduler, hold_forward{cfg.workload.rooms, hold_id, caf::timespan{10s}});
  auto rep = run_workload(sys, c.decode->receiver, cfg, first_room);
  if (rep.complete != rep.rooms || !rep.bit_exact || rep.bytes_written != rep.bytes_expected) {
    why = std::to_string(rep.complete) + "/" + std::to_string(rep.rooms) + " rooms complete, " +
          (rep.bit_exact ? "bit-exact" : "NOT bit-exact") + ", " +
          std::to_string(rep.bytes_written) + " of " + std::to_string(rep.bytes_expected) +
          " bytes" + (rep.failures.empty() ? "" : ": " + rep.failures.front());
    return std::nullopt;
  }
  auto after = stats_of(sys, c);
  run_sample s;
  for (size_t r = 0; r < after.size() && r < before.size(); ++r) {
    auto& a = after[r];
    auto& b = before[r];
    s.tail_ms = std::max(s.tail_ms, max_new_ms(b.tail_ns, a.tail_ns));
    s.settled_ms = std::max(s.settled_ms, max_new_ms(b.settled_tail_ns, a.settled_tail_ns));
    s.forward_ms = std::max(s.forward_ms, max_new_ms(b.forward_ns, a.forward_ns));
    s.notify_ns.insert(s.notify_ns.end(),
                       a.notify_ns.begin() + static_cast<std::ptrdiff_t>(b.notify_ns.size()),
                       a.notify_ns.end());
    if (a.tail_ns.size() != b.tail_ns.size() + 1) {
      why = "rank " + std::to_string(r) + " ran " +
            std::to_string(a.tail_ns.size() - b.tail_ns.size()) + " batches, not 1";
      return std::nullopt;
    }
  }
  return s;
}

/// CPU time of this process and of the calling thread, ns.
std::pair<int64_t, int64_t> cpu_ns() {
  auto ns = [](const rusage& u) {
    return (static_cast<int64_t>(u.ru_utime.tv_sec) + u.ru_stime.tv_sec) * 1'000'000'000 +
           (static_cast<int64_t>(u.ru_utime.tv_usec) + u.ru_stime.tv_usec) * 1000;
  };
  rusage all{}, self{};
  getrusage(RUSAGE_SELF, &all);
  getrusage(RUSAGE_THREAD, &self);
  return {ns(all), ns(self)};
}

/// One no-transfer forward: the slowest rank's wall time, and the process's
/// CPU time over it per forward thread, in % of that wall time (nearly all
/// of it the forward threads': the clusters beside them idle).
struct forward_alone {
  double ms = 0;
  double cpu_pct = 0;
};

/// The same forward with no notifier and no transfer at all: every CP rank's
/// forward thread at once (same rooms, KV writes and compute as in the
/// cluster runs), one pool per rank. The slowdown baseline (the slowest rank).
std::optional<forward_alone>
run_forward_alone(std::vector<std::unique_ptr<prefill_device>>& devices,
                  const deployment_config& cfg) {
  const auto& w = cfg.workload;
  const uint64_t ps = cfg.model.page_size;
  const uint64_t pages = (w.max_tokens + ps - 1) / ps;
  const auto ranks = static_cast<uint32_t>(devices.size());
  std::vector<forward_batch> batches(ranks);
  for (uint32_t rank = 0; rank < ranks; ++rank) {
    auto owned = owned_positions(pages, ranks, rank);
    if (!owned)
      return std::nullopt;
    batches[rank].id = 1;
    for (uint32_t r = 0; r < w.rooms; ++r) {
      forward_item item{r + 1, std::vector<uint64_t>(pages, 0), owned->begin * ps,
                        std::min(owned->end * ps, w.max_tokens), w.max_tokens};
      for (uint64_t k = owned->begin; k < owned->end; ++k)
        item.pages[k] = r * pages + k;
      if (item.first_token < item.last_token)
        batches[rank].items.push_back(std::move(item));
    }
  }
  std::vector<std::promise<double>> done(ranks);
  std::vector<std::future<double>> took;
  std::vector<std::unique_ptr<forward_runner>> forwards;
  for (uint32_t rank = 0; rank < ranks; ++rank) {
    took.push_back(done[rank].get_future());
    auto fwd = devices[rank]->make_forward(
        cfg.model.layer_compute, [](uint32_t) {},
        [&done, rank](uint64_t, const forward_timing& t) {
          done[rank].set_value(
              t.status ? -1.0 : std::chrono::duration<double, std::milli>(t.end - t.start).count());
        });
    if (!fwd)
      return std::nullopt;
    forwards.push_back(std::move(*fwd));
  }
  // Started together, as the ranks' batches start together in the cluster runs.
  const int64_t cpu0 = cpu_ns().first;
  for (uint32_t rank = 0; rank < ranks; ++rank)
    forwards[rank]->run(std::move(batches[rank]));
  double slowest = 0;
  bool all = true;
  for (auto& t : took) {
    if (t.wait_for(60s) != std::future_status::ready) {
      all = false;
      break;
    }
    auto ms = t.get();
    all = all && ms >= 0; // < 0: the forward reported a device error
    slowest = std::max(slowest, ms);
  }
  const int64_t cpu1 = cpu_ns().first;
  forwards.clear(); // joins the threads (a running batch ends first)
  if (!all || slowest <= 0)
    return std::nullopt;
  return forward_alone{slowest, static_cast<double>(cpu1 - cpu0) / 1e6 / slowest / ranks * 100};
}

/// The manager's and the contexts' message handling for `rooms` rooms over
/// the layers of `cfg`, paced by the layer compute like a forward: the real
/// manager, contexts and notifier, with a sink that answers each submit at
/// once in place of the transport (so only the actors' handling is counted).
struct handling_sample {
  double cpu_us_per_layer = 0;      // CPU of every thread but the forward thread
  double handlers_us_per_layer = 0; // CPU inside the manager's and contexts' handlers
  double latency_us_median = 0;     // layer_end to the last room's submit of that layer
};

/// Per layer: submits seen and when the last one arrived.
struct tally {
  std::vector<std::atomic<uint32_t>> seen;
  std::vector<std::atomic<int64_t>> last_ns;
  explicit tally(size_t n) : seen(n), last_ns(n) {}
};

/// The bytes of one room's blocks; counts the room as seen for `layer`.
uint64_t tally_room(tally& t, uint32_t layer, block_span blocks) {
  uint64_t bytes = 0;
  for (auto& b : blocks)
    bytes += b.len;
  if (layer < t.seen.size()) {
    t.last_ns[layer].store(steady_ns());
    t.seen[layer].fetch_add(1);
  }
  return bytes;
}

/// Stands in for the transport: answers each submit at once, counting it.
/// (A spawn argument, not a capture: CAF 0.17's spawn of a function without
/// arguments dereferences a null tuple, which UBSan reports.)
submit_sink::behavior_type answering_sink(submit_sink::pointer, std::shared_ptr<tally> t) {
  return {
      [t](submit& s) -> submit_done {
        return submit_done{s.room, s.layer, caf::error{}, tally_room(*t, s.layer, s.blocks)};
      },
      [t](submit_batch& s) -> submit_batch_done {
        submit_batch_done done{s.layer, {}};
        done.rooms.reserve(s.rooms.size());
        if (auto bad = check_block_counts(s)) {
          for (const auto& part : s.rooms)
            done.rooms.push_back(submit_done{part.room, s.layer, bad, 0});
          return done;
        }
        for_each_room(s, [&](size_t, room_id room, block_span blocks) {
          done.rooms.push_back(
              submit_done{room, s.layer, caf::error{}, tally_room(*t, s.layer, blocks)});
        });
        return done;
      },
  };
}

std::optional<handling_sample> measure_handling(caf::actor_system& sys,
                                                const deployment_config& cfg, std::string& why) {
  const uint32_t rooms = cfg.workload.rooms, layers = cfg.model.layers;
  const uint64_t ps = cfg.model.page_size;
  const uint64_t pages = (cfg.workload.max_tokens + ps - 1) / ps;
  auto pool = kv_pool::create(cfg.model, rooms * pages);
  if (!pool) {
    why = describe(pool.error());
    return std::nullopt;
  }
  auto t = std::make_shared<tally>(layers);
  auto sink = sys.spawn(answering_sink, t);
  manager_config mcfg;
  mcfg.context.handler_cpu = std::make_shared<std::atomic<int64_t>>(0);
  auto manager = sys.spawn(manager_impl, sink, mcfg);
  setup batch;
  for (uint32_t r = 0; r < rooms; ++r) {
    std::vector<uint64_t> src(pages), dst(pages);
    for (uint64_t k = 0; k < pages; ++k)
      src[k] = dst[k] = r * pages + k;
    auto plan = make_transfer_plan(src, dst);
    if (!plan) {
      why = describe(plan.error());
      return std::nullopt;
    }
    batch.batch.push_back(
        request_transfer{r + 1, 1, std::move(*plan),
                         kv_pointers{(*pool)->k_ptrs(), (*pool)->k_ptrs(), (*pool)->v_ptrs(),
                                     (*pool)->v_ptrs(), (*pool)->item_lens()}});
  }
  caf::scoped_actor self{sys};
  bool ready = false;
  self->request(manager, 30s, std::move(batch))
      .receive(
          [&](const setup_result& res) {
            ready = res.refused.empty();
            if (!ready)
              why = "setup: " + describe(res.refused.front().reason);
          },
          [&](caf::error& err) { why = "setup: " + sys.render(err); });
  std::optional<handling_sample> out;
  if (ready) {
    completed_event_source events;
    notifier_options nopts;
    nopts.poll = cfg.transfer.notify_poll;
    // No last-layer spin here: this sample counts the CPU of message
    // handling, and a drain thread yielding through the last layer would
    // add a layer's worth of CPU that handles nothing.
    layer_notifier notify{manager, events, nopts};
    std::vector<int64_t> sent_ns(layers);
    auto [cpu0_all, cpu0_self] = cpu_ns();
    for (uint32_t layer = 0; layer < layers; ++layer) {
      spin_for(cfg.model.layer_compute);
      sent_ns[layer] = steady_ns();
      notify(layer);
    }
    // Let the last layer's handling finish, then finish every room.
    std::promise<void> flushed;
    notify.then([&flushed] { flushed.set_value(); });
    flushed.get_future().wait_for(30s);
    uint32_t answered = 0;
    for (uint32_t r = 0; r < rooms; ++r)
      self->request(manager, 60s, finish{r + 1})
          .receive([&](const finish_result& res) { answered += res.status ? 0 : 1; },
                   [&](caf::error&) {});
    auto [cpu1_all, cpu1_self] = cpu_ns();
    if (answered != rooms) {
      why = std::to_string(rooms - answered) + " rooms did not finish";
    } else {
      handling_sample h;
      const int64_t others = (cpu1_all - cpu0_all) - (cpu1_self - cpu0_self);
      h.cpu_us_per_layer = static_cast<double>(others) / 1e3 / layers;
      h.handlers_us_per_layer =
          static_cast<double>(mcfg.context.handler_cpu->load()) / 1e3 / layers;
      std::vector<double> lat;
      for (uint32_t layer = 0; layer < layers; ++layer)
        if (t->seen[layer].load() == rooms)
          lat.push_back(static_cast<double>(t->last_ns[layer].load() - sent_ns[layer]) / 1e3);
      h.latency_us_median = median(lat);
      out = h;
    }
  }
  caf::anon_send_exit(manager, caf::exit_reason::user_shutdown);
  caf::anon_send_exit(sink, caf::exit_reason::user_shutdown);
  return out;
}

/// Everything reported for one config.
struct bench_row {
  bench_shape shape;
  uint64_t layer_bytes = 0; // one layer's KV over all rooms and ranks
  double tail_bulk_ms = 0, tail_layer_ms = 0, layer_xfer_ms = 0;
  /// One layer's transfer alone: the tail of a bulk run of the same rooms
  /// with a one-layer model (forward end to that layer delivery-complete).
  double layer_alone_ms = 0;
  double settled_bulk_ms = 0, settled_layer_ms = 0;
  double forward_none_ms = 0, forward_layer_ms = 0, slowdown_pct = 0;
  /// The no-transfer forward's CPU per forward thread, % of its wall time:
  /// ~100 when it spins through its compute, far less when it sleeps.
  double forward_cpu_pct = 0;
  int64_t notify_median_ns = 0, notify_p99_ns = 0;
  handling_sample handling;
};

/// Runs one config: `reps` interleaved repetitions of (no-transfer forward,
/// bulk, per-layer, one layer alone), order rotated each repetition.
std::optional<bench_row> run_config(const tail_bench_options& o, const bench_shape& shape,
                                    std::string& why) {
  auto bulk_cfg = make_config(o, shape, false, why);
  auto layer_cfg = make_config(o, shape, true, why);
  // The same rooms with a one-layer model, bulk: one layer's bytes alone on
  // the link, measured like the tails (what "one layer's transfer" costs
  // with its start-up and completion latency, which T/L does not hold).
  bench_shape one_layer_shape = shape;
  one_layer_shape.layers = 1;
  if (!bulk_cfg || !layer_cfg)
    return std::nullopt;
  auto one_layer_cfg = make_config(o, one_layer_shape, false, why);
  if (!one_layer_cfg) {
    why = "one-layer config: " + why;
    return std::nullopt;
  }
  caf::actor_system_config scfg;
  layerstream::add_message_types(scfg);
  scfg.set("logger.verbosity", caf::atom("quiet"));
  scfg.set("logger.console", caf::atom("none"));
  tune_actor_runtime(scfg);
  caf::actor_system sys{scfg};
  bench_row row;
  row.shape = shape;
  row.layer_bytes = bulk_cfg->workload.rooms *
                    ((shape.tokens + bulk_cfg->model.page_size - 1) / bulk_cfg->model.page_size) *
                    bulk_cfg->model.item_len() * 2;
  // First, while no fabric thread runs: only the actors' handling is on the CPU.
  std::vector<double> hdl_cpu, hdl_handlers, hdl_lat;
  for (uint32_t rep = 0; rep < o.repetitions; ++rep) {
    auto h = measure_handling(sys, *layer_cfg, why);
    if (!h) {
      why = "handling: " + why;
      return std::nullopt;
    }
    hdl_cpu.push_back(h->cpu_us_per_layer);
    hdl_handlers.push_back(h->handlers_us_per_layer);
    hdl_lat.push_back(h->latency_us_median);
  }
  const handling_sample handling{median(hdl_cpu), median(hdl_handlers), median(hdl_lat)};
  std::vector<std::unique_ptr<prefill_device>> alone_devices;
  bool ok = true;
  for (uint32_t rank = 0; ok && rank < shape.cp; ++rank) {
    auto dev = make_prefill_device(*bulk_cfg, rank);
    if (!dev) {
      why = describe(dev.error());
      ok = false;
    } else {
      alone_devices.push_back(std::move(*dev));
    }
  }
  local_cluster bulk, layer, one_layer;
  if (ok)
    if (auto err = bulk.start(sys, *bulk_cfg)) {
      why = "bulk cluster: " + describe(err);
      ok = false;
    }
  if (ok)
    if (auto err = layer.start(sys, *layer_cfg)) {
      why = "per-layer cluster: " + describe(err);
      ok = false;
    }
  if (ok)
    if (auto err = one_layer.start(sys, *one_layer_cfg)) {
      why = "one-layer cluster: " + describe(err);
      ok = false;
    }
  /// One kind of cluster run and what its repetitions measured.
  struct cluster_run {
    const char* name;
    local_cluster* cluster;
    const deployment_config* cfg;
    std::vector<double> tails, settled;
  };
  std::array<cluster_run, 3> runs{{{"bulk", &bulk, &*bulk_cfg, {}, {}},
                                   {"per-layer", &layer, &*layer_cfg, {}, {}},
                                   {"one-layer", &one_layer, &*one_layer_cfg, {}, {}}}};
  auto& [bulk_run, layer_run, one_layer_run] = runs;
  std::vector<double> fwd_none, fwd_none_cpu, fwd_layer;
  std::vector<int64_t> notify;
  room_id next_room = 1;
  uint64_t hold = 1;
  // One untimed warm-up run of each path (first touch of the pools, connections).
  for (int rep = -1; ok && rep < static_cast<int>(o.repetitions); ++rep) {
    for (size_t k = 0; ok && k <= runs.size(); ++k) {
      const size_t which = (k + static_cast<size_t>(std::max(rep, 0))) % (runs.size() + 1);
      if (which == runs.size()) {
        auto alone = run_forward_alone(alone_devices, *bulk_cfg);
        if (!alone) {
          why = "the no-transfer forward did not end";
          ok = false;
        } else if (rep >= 0) {
          fwd_none.push_back(alone->ms);
          fwd_none_cpu.push_back(alone->cpu_pct);
        }
        continue;
      }
      auto& run = runs[which];
      auto s = run_once(sys, *run.cluster, *run.cfg, next_room, hold++, why);
      next_room += run.cfg->workload.rooms;
      if (!s) {
        why = std::string(run.name) + " run: " + why;
        ok = false;
      } else if (rep >= 0) {
        run.tails.push_back(s->tail_ms);
        run.settled.push_back(s->settled_ms);
        if (&run == &layer_run) {
          fwd_layer.push_back(s->forward_ms);
          notify.insert(notify.end(), s->notify_ns.begin(), s->notify_ns.end());
        }
      }
    }
  }
  // Every cluster's actors stop before the one wait for all actors of `sys`
  // (local_cluster::stop waits for every actor, so it cannot go one by one).
  for (auto* c : {&layer, &bulk, &one_layer}) {
    if (c->decode)
      c->decode->stop();
    for (auto& p : c->prefill)
      p->stop();
  }
  sys.await_all_actors_done();
  for (auto* c : {&layer, &bulk, &one_layer})
    if (c->decode)
      c->decode->target->close();
  if (!ok)
    return std::nullopt;
  row.tail_bulk_ms = median(bulk_run.tails);
  row.tail_layer_ms = median(layer_run.tails);
  row.settled_bulk_ms = median(bulk_run.settled);
  row.settled_layer_ms = median(layer_run.settled);
  // The bulk tail is the whole transfer T (it starts at the forward's end);
  // T/L is one layer's share of it.
  row.layer_xfer_ms = row.tail_bulk_ms / shape.layers;
  row.layer_alone_ms = median(one_layer_run.tails);
  row.forward_none_ms = median(fwd_none);
  row.forward_layer_ms = median(fwd_layer);
  row.forward_cpu_pct = median(fwd_none_cpu);
  row.slowdown_pct = row.forward_none_ms > 0
                         ? (row.forward_layer_ms - row.forward_none_ms) / row.forward_none_ms * 100
                         : 0;
  row.notify_median_ns = percentile(notify, 0.5);
  row.notify_p99_ns = percentile(notify, 0.99);
  row.handling = handling;
  return row;
}

std::vector<bench_shape> shapes_of(const tail_bench_options& o) {
  auto layers = o.layers, rooms = o.rooms, cps = o.cp;
  if (o.quick) {
    if (layers.empty())
      layers = {32};
    if (rooms.empty())
      rooms = {1, 16};
    if (cps.empty())
      cps = {1};
  }
  if (layers.empty())
    layers = {32, 61, 80};
  if (rooms.empty())
    rooms = {1, 16, 256};
  if (cps.empty())
    cps = {1, 2};
  const std::vector<uint64_t> tokens = o.tokens.empty() ? std::vector<uint64_t>{0} : o.tokens;
  std::vector<bench_shape> out;
  for (auto t : tokens) {
    for (auto l : layers)
      for (auto r : rooms)
        out.push_back(shape_of(l, r, 1, t));
    for (auto cp : cps)
      if (cp > 1)
        for (auto l : layers)
          out.push_back(shape_of(l, 1, cp, t));
  }
  return out;
}

} // namespace

int run_tail_bench(const tail_bench_options& opts_in) {
  auto o = opts_in;
  if (o.quick) // the command line refuses --quick with --repetitions
    o.repetitions = 3;
  if (o.repetitions == 0 || o.layer_compute_us == 0) {
    std::cerr << "layerstream bench tail: --repetitions and --layer-compute-us must be > 0\n";
    return 2;
  }
  for (auto v : {&o.layers, &o.rooms, &o.cp})
    for (auto x : *v)
      if (x == 0 || x > 4096) {
        std::cerr << "layerstream bench tail: layers, rooms and cp must be in 1..4096, got " << x
                  << "\n";
        return 2;
      }
  for (auto t : o.tokens)
    if (t == 0 || t > (1u << 20)) {
      std::cerr << "layerstream bench tail: tokens must be in 1..1048576, got " << t << "\n";
      return 2;
    }
  // Three clusters (bulk, per-layer and the one-layer one) and the cp pools
  // of the no-transfer forward are up at once: refuse a shape whose pools
  // would not fit comfortably instead of failing halfway through.
  constexpr uint64_t max_pool_bytes = 4ull << 30;
  for (const auto& s : shapes_of(o)) {
    std::string why;
    auto cfg = make_config(o, s, true, why);
    if (!cfg) {
      std::cerr << "layerstream bench tail: " << why << "\n";
      return 2;
    }
    // Each of the cp prefill ranks and the decode node: every room's pages,
    // K and V, every layer. In double: the largest options overflow 64 bits.
    const double cluster_bytes = (s.cp + 1.0) * static_cast<double>(cfg->prefill.pool_pages) *
                                 static_cast<double>(cfg->model.item_len()) * 2 * cfg->model.layers;
    const double all_bytes =
        cluster_bytes * (2 + 1.0 / s.layers) + cluster_bytes * s.cp / (s.cp + 1.0);
    if (all_bytes > static_cast<double>(max_pool_bytes)) {
      std::cerr << "layerstream bench tail: L = " << s.layers << ", " << s.rooms << " rooms, cp "
                << s.cp << ", " << s.tokens << " tokens per room needs "
                << static_cast<uint64_t>(all_bytes / (1 << 20))
                << " MiB of KV pools (three clusters and the no-transfer forward's), more than "
                << (max_pool_bytes >> 20) << " MiB; use fewer tokens, rooms or layers\n";
      return 2;
    }
  }
  if (auto err = check_local_address("127.0.0.1")) {
    std::cerr << "layerstream bench tail: " << message_of(err) << "\n";
    return 2;
  }
  if (o.device != "cpu" && o.device != "gpu") {
    std::cerr << "layerstream bench tail: --device must be cpu or gpu, got '" << o.device << "'\n";
    return 2;
  }
  if (o.device == "gpu" && !built_with_cuda()) {
    std::cerr << "layerstream bench tail: --device gpu: this binary was built without CUDA\n";
    return 2;
  }
  log::set_level("warn");
  const int64_t spin_us = notify_spin_in_use(o);
  std::printf(
      "layerstream bench tail: provider '%s' (write_iov %u), device %s, %u us compute per layer "
      "(%s), last-layer spin %lld us, %u interleaved repetitions (medians); T = the bulk tail, "
      "T/L its share per layer, 1lay = one layer's transfer alone\n",
      o.provider.c_str(), o.write_iov, o.device.c_str(), o.layer_compute_us,
      o.device == "cpu" ? o.compute_wait.c_str() : "on the GPU", static_cast<long long>(spin_us),
      o.repetitions);
  std::printf("%6s %5s %3s %9s | %9s %9s %8s %8s | %7s %8s %7s | %8s %8s | %8s %8s %7s | %7s "
              "%7s | %9s %6s %9s %8s %6s %9s\n",
              "layers", "rooms", "cp", "KiB/layer", "tail_bulk", "tail_lay", "T/L", "1lay",
              "lay/T/L", "lay/1lay", "lay/blk", "set_bulk", "set_lay", "fwd_none", "fwd_lay",
              "slow%", "ntf_p50", "ntf_p99", "act_cpu", "act%", "act/room", "run_cpu", "run%",
              "hdl_lat");
  std::printf("%6s %5s %3s %9s | %9s %9s %8s %8s | %7s %8s %7s | %8s %8s | %8s %8s %7s | %7s "
              "%7s | %9s %6s %9s %8s %6s %9s\n",
              "", "", "", "", "ms", "ms", "ms", "ms", "", "", "", "ms", "ms", "ms", "ms", "", "ns",
              "ns", "us/layer", "", "ns/layer", "us/layer", "", "us");
  nlohmann::json configs = nlohmann::json::array();
  int rc = 0;
  for (const auto& shape : shapes_of(o)) {
    std::string why;
    auto row = run_config(o, shape, why);
    if (!row) {
      std::printf("%6u %5u %3u  FAILED: %s\n", shape.layers, shape.rooms, shape.cp, why.c_str());
      rc = 1;
      continue;
    }
    const double per_layer_ratio =
        row->layer_xfer_ms > 0 ? row->tail_layer_ms / row->layer_xfer_ms : 0;
    const double bulk_ratio = row->tail_bulk_ms > 0 ? row->tail_layer_ms / row->tail_bulk_ms : 0;
    const double alone_ratio =
        row->layer_alone_ms > 0 ? row->tail_layer_ms / row->layer_alone_ms : 0;
    const double hdl_pct = row->handling.cpu_us_per_layer / o.layer_compute_us * 100;
    const double act_pct = row->handling.handlers_us_per_layer / o.layer_compute_us * 100;
    const double act_per_room = row->handling.handlers_us_per_layer * 1000 / shape.rooms;
    std::printf(
        "%6u %5u %3u %9.0f | %9.2f %9.2f %8.3f %8.3f | %7.2f %8.2f %7.3f | %8.2f %8.2f | %8.2f "
        "%8.2f %7.2f | %7lld %7lld | %9.1f %6.2f %9.0f %8.1f %6.2f %9.1f\n",
        shape.layers, shape.rooms, shape.cp, static_cast<double>(row->layer_bytes) / 1024,
        row->tail_bulk_ms, row->tail_layer_ms, row->layer_xfer_ms, row->layer_alone_ms,
        per_layer_ratio, alone_ratio, bulk_ratio, row->settled_bulk_ms, row->settled_layer_ms,
        row->forward_none_ms, row->forward_layer_ms, row->slowdown_pct,
        static_cast<long long>(row->notify_median_ns), static_cast<long long>(row->notify_p99_ns),
        row->handling.handlers_us_per_layer, act_pct, act_per_room, row->handling.cpu_us_per_layer,
        hdl_pct, row->handling.latency_us_median);
    std::fflush(stdout);
    configs.push_back(
        {{"layers", shape.layers},
         {"rooms", shape.rooms},
         {"cp", shape.cp},
         {"tokens_per_room", shape.tokens},
         {"kv_bytes_per_layer", row->layer_bytes},
         {"layer_compute_ms", o.layer_compute_us / 1000.0},
         {"tail_bulk_ms", row->tail_bulk_ms},
         {"tail_layer_ms", row->tail_layer_ms},
         {"tail_bulk_settled_ms", row->settled_bulk_ms},
         {"tail_layer_settled_ms", row->settled_layer_ms},
         {"layer_xfer_ms", row->layer_xfer_ms},
         {"tail_layer_over_layer_xfer", per_layer_ratio},
         {"layer_alone_ms", row->layer_alone_ms},
         {"tail_layer_over_layer_alone", alone_ratio},
         {"tail_layer_over_tail_bulk", bulk_ratio},
         {"forward_none_ms", row->forward_none_ms},
         {"forward_cpu_pct", row->forward_cpu_pct},
         {"forward_layer_ms", row->forward_layer_ms},
         {"forward_slowdown_pct", row->slowdown_pct},
         {"notifier_ns_median", row->notify_median_ns},
         {"notifier_ns_p99", row->notify_p99_ns},
         {"actor_handlers_us_per_layer", row->handling.handlers_us_per_layer},
         {"actor_handlers_ns_per_room_layer", act_per_room},
         {"actor_handlers_pct_of_layer", act_pct},
         {"handling_cpu_us_per_layer", row->handling.cpu_us_per_layer},
         {"handling_ns_per_room_layer", row->handling.cpu_us_per_layer * 1000 / shape.rooms},
         {"handling_pct_of_layer", hdl_pct},
         {"handling_latency_us_median", row->handling.latency_us_median}});
  }
  if (!o.json_path.empty()) {
    nlohmann::json j{{"provider", o.provider},
                     {"write_iov", o.write_iov},
                     {"device", o.device},
                     {"repetitions", o.repetitions},
                     {"layer_compute_us", o.layer_compute_us},
                     {"compute_wait", o.compute_wait},
                     {"notify_spin_us", spin_us},
                     {"configs", configs}};
    if (!write_json_file(o.json_path, j)) {
      std::cerr << "layerstream bench tail: cannot write " << o.json_path << "\n";
      return 1;
    }
  }
  return rc;
}

} // namespace layerstream
