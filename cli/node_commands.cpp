#include "cli/node_commands.hpp"

#include <algorithm>
#include <csignal>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <thread>

#include <caf/all.hpp>
#include <caf/io/all.hpp>
#include <nlohmann/json.hpp>

#include "common/log.hpp"
#include "common/net_guard.hpp"
#include "config/loader.hpp"
#include "node/nodes.hpp"

namespace layerstream::cli {

namespace {

/// The config for `role`: loaded and validated, or printed and nullopt.
std::optional<deployment_config> load(const std::string& path, config_role role,
                                      const std::function<void(deployment_config&)>& tweak = {}) {
  auto res = path.empty() ? load_config_string(embedded_demo_config(), "<embedded demo config>")
                          : load_config_file(path);
  if (auto* err = std::get_if<config_error>(&res)) {
    std::cerr << "layerstream: " << err->to_string() << "\n";
    return std::nullopt;
  }
  auto cfg = std::get<deployment_config>(std::move(res));
  if (tweak)
    tweak(cfg);
  if (auto err = validate_for(cfg, role, path.empty() ? "<embedded demo config>" : path)) {
    std::cerr << "layerstream: " << err->to_string() << "\n";
    return std::nullopt;
  }
  return cfg;
}

struct system_config : caf::actor_system_config {
  system_config(const deployment_config& dep, bool remoting) {
    layerstream::add_message_types(
        *this); // qualified: the base class has a member template of that name
    set("logger.verbosity", caf::atom("quiet"));
    set("logger.console", caf::atom("none"));
    if (remoting) {
      load<caf::io::middleman>();
      // Both sides must set these, or a frozen peer is noticed only after 20 s+.
      set("middleman.heartbeat-interval", caf::timespan{dep.timeouts.heartbeat});
      set("middleman.connection-timeout", caf::timespan{dep.timeouts.connection});
    }
  }
};

double median_ms(std::vector<int64_t> ns) {
  if (ns.empty())
    return 0;
  std::sort(ns.begin(), ns.end());
  return static_cast<double>(ns[ns.size() / 2]) / 1e6;
}

/// FNV-1a 64 of a whole pool, as 16 hex digits: equal pools, equal digests
/// (the cluster tests compare per-layer and bulk runs of one workload).
std::string pool_digest(const kv_pool& pool) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (uint64_t i = 0; i < pool.bytes(); ++i)
    h = (h ^ pool.base()[i]) * 0x100000001b3ull;
  char buf[17];
  std::snprintf(buf, sizeof(buf), "%016llx", static_cast<unsigned long long>(h));
  return buf;
}

int report(const workload_report& rep, const deployment_config& cfg, double tail_ms,
           double forward_ms, const std::string& json_path, const char* mode,
           const std::string& digest = "") {
  const bool ok = rep.complete == rep.rooms && rep.bit_exact;
  std::cout << "layerstream " << mode << ": " << rep.complete << "/" << rep.rooms
            << " rooms complete, " << (rep.bit_exact ? "bit-exact" : "NOT bit-exact") << ", "
            << rep.bytes_written << " of " << rep.bytes_expected << " bytes, " << cfg.model.layers
            << " layers, cp " << cfg.cluster.cp_size << ", "
            << (cfg.transfer.per_layer ? "per-layer" : "bulk") << " transfer over '"
            << cfg.fabric.provider << "'\n";
  if (forward_ms > 0)
    std::cout << "  forward (median per batch) " << forward_ms << " ms, exposed tail (median) "
              << tail_ms << " ms, wall " << rep.wall_ms << " ms\n";
  for (auto& f : rep.failures)
    std::cout << "  failed: " << f << "\n";
  if (!digest.empty())
    std::cout << "  pool digest " << digest << "\n";
  if (!json_path.empty()) {
    nlohmann::json j{{"rooms", rep.rooms},
                     {"complete", rep.complete},
                     {"failed", rep.failed},
                     {"layers", cfg.model.layers},
                     {"cp", cfg.cluster.cp_size},
                     {"mla", cfg.model.mla},
                     {"per_layer", cfg.transfer.per_layer},
                     {"provider", cfg.fabric.provider},
                     {"bit_exact", rep.bit_exact},
                     {"bytes_expected", rep.bytes_expected},
                     {"bytes_written", rep.bytes_written},
                     {"tail_ms", tail_ms},
                     {"forward_ms", forward_ms},
                     {"wall_ms", rep.wall_ms},
                     {"failures", rep.failures}};
    if (!digest.empty())
      j["pool_digest"] = digest;
    std::ofstream out{json_path};
    out << j.dump(2) << "\n";
    if (!out) {
      std::cerr << "layerstream: cannot write " << json_path << "\n";
      return 1;
    }
  }
  return ok ? 0 : 1;
}

/// Prints a refused address (net_guard) and says whether it passed.
bool address_ok(const caf::error& err, const char* command) {
  if (!err)
    return true;
  std::cerr << "layerstream " << command << ": " << message_of(err) << "\n";
  return false;
}

network_scope scope_of(const deployment_config& cfg) {
  return cfg.cluster.network == "deployment" ? network_scope::deployment : network_scope::test;
}

void apply_log_level(const deployment_config& cfg, const std::optional<std::string>& flag) {
  log::set_level(flag ? *flag : cfg.log.level);
}

} // namespace

int run_demo(const demo_options& opts) {
  auto cfg = load(opts.config_path, config_role::demo, [&](deployment_config& c) {
    if (opts.layers)
      c.model.layers = *opts.layers;
    if (opts.cp)
      c.cluster.cp_size = *opts.cp;
    if (opts.rooms)
      c.workload.rooms = *opts.rooms;
    if (opts.mla) {
      c.model.mla = true;
      c.model.kv_heads = 1;
    }
    if (opts.chunk_tokens)
      c.transfer.chunk_tokens = *opts.chunk_tokens;
    if (opts.bulk)
      c.transfer.per_layer = false;
    if (opts.provider)
      c.fabric.provider = *opts.provider;
    if (opts.log_level)
      c.log.level = *opts.log_level;
  });
  if (!cfg)
    return 2;
  apply_log_level(*cfg, opts.log_level);
  if (!address_ok(check_bind(cfg->fabric.bind_address, scope_of(*cfg)), "demo"))
    return 2;
  std::shared_ptr<trace_recorder> trace;
  if (!opts.trace_path.empty())
    trace = std::make_shared<trace_recorder>();
  system_config scfg{*cfg, false};
  caf::actor_system sys{scfg};
  int rc = 1;
  local_cluster cluster;
  if (auto err = cluster.start(sys, *cfg, trace)) {
    std::cerr << "layerstream demo: " << message_of(err) << "\n";
  } else {
    auto rep = run_workload(sys, cluster.decode->receiver, *cfg);
    std::vector<int64_t> tails, forwards;
    caf::scoped_actor self{sys};
    for (auto& p : cluster.prefill)
      self->request(p->scheduler, std::chrono::seconds(5), stats_query{})
          .receive(
              [&](scheduler_stats& s) {
                tails.insert(tails.end(), s.tail_ns.begin(), s.tail_ns.end());
                forwards.insert(forwards.end(), s.forward_ns.begin(), s.forward_ns.end());
              },
              [](caf::error&) {});
    rc = report(rep, *cfg, median_ms(tails), median_ms(forwards), opts.json_path, "demo");
  }
  cluster.stop(sys);
  if (trace) {
    if (!trace->write(opts.trace_path)) {
      std::cerr << "layerstream demo: cannot write " << opts.trace_path << "\n";
      return 1;
    }
    std::cout << "  trace: " << trace->size() << " events in " << opts.trace_path << "\n";
  }
  return rc;
}

int run_prefill(const std::string& config_path, std::optional<std::string> log_level) {
  auto cfg = load(config_path, config_role::prefill);
  if (!cfg)
    return 2;
  apply_log_level(*cfg, log_level);
  // Where this process may bind, checked before any socket or endpoint opens.
  if (!address_ok(check_bind(cfg->prefill.host, scope_of(*cfg)), "prefill") ||
      !address_ok(check_bind(cfg->fabric.bind_address, scope_of(*cfg)), "prefill"))
    return 2;
  // Block the signals we wait for before any thread starts, so that every
  // thread inherits the mask and sigwait below sees them.
  sigset_t sigs;
  sigemptyset(&sigs);
  sigaddset(&sigs, SIGINT);
  sigaddset(&sigs, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &sigs, nullptr);
  system_config scfg{*cfg, true};
  caf::actor_system sys{scfg};
  auto node = prefill_node::start(sys, *cfg, cfg->prefill.cp_rank);
  if (!node) {
    std::cerr << "layerstream prefill: " << describe(node.error()) << "\n";
    return 1;
  }
  auto port =
      sys.middleman().publish((*node)->scheduler, cfg->prefill.port, cfg->prefill.host.c_str());
  if (!port) {
    std::cerr << "layerstream prefill: cannot publish on " << cfg->prefill.host << ":"
              << cfg->prefill.port << ": " << sys.render(port.error()) << "\n";
    (*node)->stop();
    return 1;
  }
  LS_INFO("prefill rank {} serving on {}:{}", cfg->prefill.cp_rank, cfg->prefill.host, *port);
  std::cout << "layerstream prefill: rank " << cfg->prefill.cp_rank << " listening on "
            << cfg->prefill.host << ":" << *port << std::endl;
  int sig = 0;
  sigwait(&sigs, &sig);
  LS_INFO("prefill rank {}: signal {}, shutting down", cfg->prefill.cp_rank, sig);
  {
    // What this rank did, for whoever reads its output (the cluster tests).
    caf::scoped_actor self{sys};
    self->request((*node)->scheduler, std::chrono::seconds(5), stats_query{})
        .receive(
            [&](scheduler_stats& s) {
              std::cout << "layerstream prefill: rank " << cfg->prefill.cp_rank << ": "
                        << s.rooms_complete << " rooms complete, " << s.rooms_failed << " failed, "
                        << s.bytes << " bytes, " << s.tail_ns.size()
                        << " batches, forward (median) " << median_ms(s.forward_ns)
                        << " ms, exposed tail (median) " << median_ms(s.tail_ns) << " ms"
                        << std::endl;
            },
            [&](caf::error& err) {
              std::cerr << "layerstream prefill: no stats: " << sys.render(err) << "\n";
            });
  }
  (*node)->stop();
  sys.await_all_actors_done();
  return 0;
}

int run_decode(const std::string& config_path, std::optional<std::string> log_level,
               const std::string& json_path) {
  auto cfg = load(config_path, config_role::decode);
  if (!cfg)
    return 2;
  apply_log_level(*cfg, log_level);
  // Where this process may bind and connect, checked before any socket opens.
  if (!address_ok(check_bind(cfg->fabric.bind_address, scope_of(*cfg)), "decode"))
    return 2;
  for (auto& endpoint : cfg->decode.prefill) {
    auto host = endpoint.substr(0, endpoint.rfind(':'));
    if (!address_ok(check_connect(host, scope_of(*cfg)), "decode"))
      return 2;
  }
  system_config scfg{*cfg, true};
  caf::actor_system sys{scfg};
  std::vector<scheduler_actor> schedulers;
  for (auto& endpoint : cfg->decode.prefill) {
    auto colon = endpoint.rfind(':');
    auto host = endpoint.substr(0, colon);
    auto port = static_cast<uint16_t>(std::stoul(endpoint.substr(colon + 1)));
    // The prefill ranks may still be starting: retry until the connection timeout.
    auto deadline = std::chrono::steady_clock::now() + cfg->timeouts.connection;
    for (;;) {
      auto h = sys.middleman().remote_actor<scheduler_actor>(host, port);
      if (h) {
        schedulers.push_back(*h);
        break;
      }
      if (std::chrono::steady_clock::now() >= deadline) {
        std::cerr << "layerstream decode: cannot reach prefill rank at " << endpoint << ": "
                  << sys.render(h.error()) << "\n";
        return 1;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
  }
  auto node = decode_node::start(sys, *cfg, schedulers);
  if (!node) {
    std::cerr << "layerstream decode: " << describe(node.error()) << "\n";
    return 1;
  }
  auto rep = run_workload(sys, (*node)->receiver, *cfg);
  auto rc = report(rep, *cfg, 0, 0, json_path, "decode", pool_digest(*(*node)->pool));
  (*node)->stop();
  sys.await_all_actors_done();
  (*node)->target->close();
  return rc;
}

} // namespace layerstream::cli
