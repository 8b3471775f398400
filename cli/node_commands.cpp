#include "cli/node_commands.hpp"

#include <algorithm>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <functional>
#include <iostream>
#include <map>
#include <memory>
#include <mutex>
#include <thread>
#include <utility>
#include <variant>

#include <unistd.h>

#include <caf/all.hpp>
#include <caf/io/all.hpp>
#ifdef LAYERSTREAM_HAVE_TLS
#include <caf/openssl/manager.hpp>
#include <openssl/err.h>
#include <openssl/ssl.h>
#endif
#include <nlohmann/json.hpp>

#include "common/deadlines.hpp"
#include "common/json_file.hpp"
#include "common/log.hpp"
#include "common/net_guard.hpp"
#include "config/loader.hpp"
#include "node/actor_runtime.hpp"
#include "node/auth.hpp"
#include "node/nodes.hpp"
#include "node/stop_signals.hpp"
#include "node/watch.hpp"

namespace layerstream::cli {

namespace {

/// What rank `cp_rank` of a cluster configured by `cfg` says of itself in
/// its challenge (prefill), and what decode expects of the rank it lists at
/// that place.
rank_facts rank_facts_of(const deployment_config& cfg, uint32_t cp_rank) {
  return rank_facts{cp_rank, cfg.cluster.cp_size, static_cast<uint64_t>(cfg.timeouts.room.count()),
                    static_cast<uint64_t>(cfg.timeouts.submit.count())};
}

/// The config keys the command line set, each with the flag that set it: a
/// value a flag gave is blamed on the flag, not on the file.
using flag_keys = std::map<std::string, std::string>;
using config_tweak = std::function<void(deployment_config&, flag_keys&)>;

/// Why validate_for() refused `err`: on the flag where a flag set the key;
/// otherwise on the file, naming the flags that were in play.
std::string refusal_text(const config_error& err, const flag_keys& flags) {
  if (auto f = flags.find(err.key); f != flags.end())
    return f->second + ": " + err.key + ": " + err.reason + " (set by the flag, over " + err.file +
           ")";
  std::string text = err.to_string();
  if (flags.empty())
    return text;
  text += " (with the flags";
  for (const auto& [key, flag] : flags)
    text += " " + flag + " (" + key + ")";
  return text + ")";
}

/// The config for `role`: loaded and validated, or printed and nullopt.
std::optional<deployment_config> load(const std::string& path, config_role role,
                                      const config_tweak& tweak = {}) {
  // A node of a cluster runs from its own file; only the demo and the
  // benches fall back to the embedded one.
  if (path.empty() && (role == config_role::prefill || role == config_role::decode)) {
    std::cerr << "layerstream: --config: an empty path; a prefill or decode node needs its "
                 "config file\n";
    return std::nullopt;
  }
  auto res = path.empty() ? load_config_string(embedded_demo_config(), "<embedded demo config>")
                          : load_config_file(path);
  if (auto* err = std::get_if<config_error>(&res)) {
    std::cerr << "layerstream: " << err->to_string() << "\n";
    return std::nullopt;
  }
  auto cfg = std::get<deployment_config>(std::move(res));
  flag_keys flags;
  if (tweak)
    tweak(cfg, flags);
  if (auto err = validate_for(cfg, role, path.empty() ? "<embedded demo config>" : path)) {
    std::cerr << "layerstream: " << refusal_text(*err, flags) << "\n";
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
    tune_actor_runtime(*this);
    if (remoting) {
      load<caf::io::middleman>();
      // Both sides must set these, or a frozen peer is noticed only after 20 s+.
      set("middleman.heartbeat-interval", caf::timespan{dep.timeouts.heartbeat});
      set("middleman.connection-timeout", caf::timespan{dep.timeouts.connection});
#ifdef LAYERSTREAM_HAVE_TLS
      if (dep.tls.enabled()) {
        // With a CA file set, CAF's OpenSSL module verifies the peer on both
        // sides (SSL_VERIFY_PEER | SSL_VERIFY_FAIL_IF_NO_PEER_CERT): mutual TLS.
        load<caf::openssl::manager>();
        openssl_certificate = dep.tls.certificate;
        openssl_key = dep.tls.key;
        openssl_cafile = dep.tls.ca_file;
      }
#endif
    }
  }
};

/// [tls] usable? Refused: a build without CAF's OpenSSL module, or files
/// OpenSSL cannot load. Checked at start with what CAF's OpenSSL module does
/// on the first connection, where a bad file is an uncaught exception in
/// CAF's network thread that kills the process.
bool tls_ready(const deployment_config& cfg, const char* who) {
#ifdef LAYERSTREAM_HAVE_TLS
  if (!cfg.tls.enabled())
    return true;
  std::unique_ptr<SSL_CTX, void (*)(SSL_CTX*)> ctx{SSL_CTX_new(TLS_method()), SSL_CTX_free};
  auto refuse = [&](const std::string& key, const std::string& path, const char* what) {
    char text[256] = "no OpenSSL error";
    if (auto code = ERR_get_error())
      ERR_error_string_n(code, text, sizeof(text));
    ERR_clear_error();
    std::cerr << "layerstream " << who << ": tls." << key << " \"" << path << "\": " << what << " ("
              << text << ")\n";
    return false;
  };
  if (!ctx)
    return refuse("certificate", cfg.tls.certificate, "no TLS context");
  // A passphrase-protected key: OpenSSL's default callback would ask for the
  // passphrase on the terminal or stdin, and a service waits there for ever.
  // There is no passphrase setting, so the key is refused instead.
  bool asked_passphrase = false;
  SSL_CTX_set_default_passwd_cb(ctx.get(), [](char*, int, int, void* asked) {
    *static_cast<bool*>(asked) = true;
    return 0; // no passphrase
  });
  SSL_CTX_set_default_passwd_cb_userdata(ctx.get(), &asked_passphrase);
  if (SSL_CTX_use_certificate_chain_file(ctx.get(), cfg.tls.certificate.c_str()) != 1)
    return refuse("certificate", cfg.tls.certificate, "not a PEM certificate chain");
  if (SSL_CTX_use_PrivateKey_file(ctx.get(), cfg.tls.key.c_str(), SSL_FILETYPE_PEM) != 1)
    return refuse("key", cfg.tls.key,
                  asked_passphrase ? "is encrypted (passphrase-protected); layerstream takes an "
                                     "unencrypted PEM private key only"
                                   : "not an unencrypted PEM private key of tls.certificate");
  if (SSL_CTX_check_private_key(ctx.get()) != 1)
    return refuse("key", cfg.tls.key, "does not match tls.certificate");
  if (SSL_CTX_load_verify_locations(ctx.get(), cfg.tls.ca_file.c_str(), nullptr) != 1)
    return refuse("ca_file", cfg.tls.ca_file, "not a PEM CA certificate");
  return true;
#else
  if (!cfg.tls.enabled())
    return true;
  std::cerr << "layerstream " << who
            << ": [tls] is set, but this build has no TLS (CAF's OpenSSL module, caf_openssl, "
               "was not found at build time)\n";
  return false;
#endif
}

/// The middleman that carries the control plane: CAF's OpenSSL one where [tls] is set.
caf::io::middleman_actor control_plane(caf::actor_system& sys, const deployment_config& cfg) {
#ifdef LAYERSTREAM_HAVE_TLS
  if (cfg.tls.enabled())
    return sys.openssl_manager().actor_handle();
#else
  (void)cfg;
#endif
  return sys.middleman().actor_handle();
}

/// Publishes the gate on the prefill rank's host:port (plain caf-io or TLS).
caf::expected<uint16_t> publish_gate(caf::actor_system& sys, const gate_actor& gate,
                                     const deployment_config& cfg) {
  // SO_REUSEADDR: a rank restarted after a crash must get its configured port
  // back at once, although its predecessor's connections still hold it in
  // TIME_WAIT for up to 60 s (tests/cluster/crash.sh). A port another process
  // listens on is still refused.
  caf::scoped_actor self{sys};
  caf::expected<uint16_t> result{caf::sec::cannot_publish_invalid_actor};
  // A local bind and listen: bounded, so that a stuck middleman cannot hold
  // the rank before it serves.
  const auto wait = std::max<caf::timespan>(cfg.timeouts.connection, std::chrono::seconds(10));
  self->request(control_plane(sys, cfg), wait, caf::publish_atom::value, cfg.prefill.port,
                caf::actor_cast<caf::strong_actor_ptr>(gate), sys.message_types(gate),
                cfg.prefill.host, true)
      .receive([&](uint16_t port) { result = port; }, [&](caf::error& err) { result = err; });
  return result;
}

/// Why a control-plane handshake may fail, for the error line: TLS on one
/// side only, or a certificate of another CA, ends the handshake (or never
/// starts it).
std::string handshake_hint(const caf::error& err, const deployment_config& cfg) {
  if (err != caf::sec::request_timeout && err != caf::sec::disconnect_during_handshake)
    return "";
  auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(cfg.timeouts.connection).count();
  return std::string{" (no handshake within "} + std::to_string(ms) + " ms; TLS is " +
         (cfg.tls.enabled() ? "on" : "off") +
         " here: is [tls] the same on both sides, with certificates of one CA?)";
}

/// The gate of the prefill rank at host:port, within `timeout` (plain caf-io or
/// TLS). Bounded: a TLS server and a plain client (or the reverse) both wait
/// for the other's first bytes, so an unbounded connect would hang forever.
caf::expected<gate_actor> connect_gate(caf::actor_system& sys, const deployment_config& cfg,
                                       const std::string& host, uint16_t port,
                                       caf::timespan timeout) {
  caf::scoped_actor self{sys};
  caf::expected<gate_actor> result{caf::sec::cannot_connect_to_node};
  self->request(control_plane(sys, cfg), timeout, caf::connect_atom::value, host, port)
      .receive(
          [&](const caf::node_id&, caf::strong_actor_ptr& ptr, const std::set<std::string>& ifs) {
            if (!ptr)
              result = caf::make_error(caf::sec::no_actor_published_at_port);
            else if (!sys.assignable<gate_actor>(ifs))
              result = caf::make_error(caf::sec::unexpected_actor_messaging_interface);
            else
              result = caf::actor_cast<gate_actor>(std::move(ptr));
          },
          [&](caf::error& err) { result = std::move(err); });
  return result;
}

double median_ms(std::vector<int64_t> ns) {
  if (ns.empty())
    return 0;
  std::sort(ns.begin(), ns.end());
  return static_cast<double>(ns[ns.size() / 2]) / 1e6;
}

/// FNV-1a 64 (over words) of a whole pool, as 16 hex digits: equal pools, equal digests
/// (the cluster tests compare per-layer and bulk runs of one workload).
std::string pool_digest(const kv_pool& pool) {
  // FNV-1a over 8-byte words (then the tail bytes): 8x fewer steps.
  uint64_t h = 0xcbf29ce484222325ull;
  const uint64_t n = pool.bytes();
  uint64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    uint64_t w;
    std::memcpy(&w, pool.base() + i, 8);
    h = (h ^ w) * 0x100000001b3ull;
  }
  for (; i < n; ++i)
    h = (h ^ pool.base()[i]) * 0x100000001b3ull;
  char buf[17];
  std::snprintf(buf, sizeof(buf), "%016llx", static_cast<unsigned long long>(h));
  return buf;
}

/// `tail_ms`: forward end to the last byte delivery-complete (as the prefill
/// engine read it); `settled_ms`: to the prefill scheduler having settled the
/// batch, after the actor hops that report it (medians per batch).
int report(const workload_report& rep, const deployment_config& cfg, double tail_ms,
           double settled_ms, double forward_ms, const std::string& json_path, const char* mode,
           const std::string& digest = "") {
  const bool ok = rep.complete == rep.rooms && rep.bit_exact;
  std::cout << "layerstream " << mode << ": " << rep.complete << "/" << rep.rooms
            << " rooms complete, " << (rep.bit_exact ? "bit-exact" : "NOT bit-exact") << ", "
            << rep.bytes_written << " of " << rep.bytes_expected << " bytes, " << cfg.model.layers
            << " layers, cp " << cfg.cluster.cp_size << ", "
            << (cfg.transfer.per_layer ? "per-layer" : "bulk") << " transfer over '"
            << cfg.fabric.provider << "', device " << cfg.prefill.device << "\n";
  if (forward_ms > 0)
    std::cout << "  forward (median per batch) " << forward_ms << " ms, exposed tail (median) "
              << tail_ms << " ms (settled by prefill " << settled_ms << " ms), wall " << rep.wall_ms
              << " ms\n";
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
                     {"device", cfg.prefill.device},
                     {"bit_exact", rep.bit_exact},
                     {"bytes_expected", rep.bytes_expected},
                     {"bytes_written", rep.bytes_written},
                     {"tail_ms", tail_ms},
                     {"settled_tail_ms", settled_ms},
                     {"forward_ms", forward_ms},
                     {"wall_ms", rep.wall_ms},
                     {"failures", rep.failures}};
    if (!digest.empty())
      j["pool_digest"] = digest;
    // Failure texts come from peers: write_json_file replaces bytes that
    // are not UTF-8.
    if (!write_json_file(json_path, j)) {
      std::cerr << "layerstream: cannot write " << json_path << "\n";
      return 1;
    }
  }
  return ok ? 0 : 1;
}

/// Prints a refused address (net_guard) and says whether it passed.
/// `key` names the setting the address came from.
bool address_ok(const caf::error& err, const char* command, const std::string& key) {
  if (!err)
    return true;
  std::cerr << "layerstream " << command << ": " << key << ": " << message_of(err) << "\n";
  return false;
}

network_scope scope_of(const deployment_config& cfg) {
  return cfg.cluster.network == "deployment" ? network_scope::deployment : network_scope::test;
}

/// Sets the level and logs the config the process runs with (debug: every
/// key, the token redacted). The flag is already in cfg.log.level (each
/// command's load() override), so validate_for() has refused an unknown
/// level with exit 2 before this runs.
void start_log(const deployment_config& cfg) {
  log::set_level(cfg.log.level);
  LS_DEBUG("effective config (file and command-line flags):\n{}", to_toml(cfg));
}

/// The load() override of `--log-level`, for the commands with no other flags.
config_tweak log_level_flag(const std::optional<std::string>& flag) {
  return [flag](deployment_config& c, flag_keys& flags) {
    if (flag) {
      c.log.level = *flag;
      flags.emplace("log.level", "--log-level");
    }
  };
}

/// `field = *value` when the flag was given, noting which key it set.
template <class Field, class Value>
void set_by_flag(Field& field, const std::optional<Value>& value, flag_keys& flags, const char* key,
                 const char* flag) {
  if (!value)
    return;
  field = *value;
  flags.emplace(key, flag);
}

} // namespace

int run_demo(const demo_options& opts) {
  auto cfg = load(opts.config_path, config_role::demo, [&](deployment_config& c, flag_keys& f) {
    set_by_flag(c.model.layers, opts.layers, f, "model.layers", "--layers");
    set_by_flag(c.cluster.cp_size, opts.cp, f, "cluster.cp_size", "--cp");
    set_by_flag(c.workload.rooms, opts.rooms, f, "workload.rooms", "--rooms");
    if (opts.mla) {
      c.model.mla = true;
      c.model.kv_heads = 1;
      f.emplace("model.mla", "--mla");
      f.emplace("model.kv_heads", "--mla");
    }
    set_by_flag(c.transfer.chunk_tokens, opts.chunk_tokens, f, "transfer.chunk_tokens",
                "--chunk-tokens");
    if (opts.bulk) {
      c.transfer.per_layer = false;
      f.emplace("transfer.per_layer", "--bulk");
    }
    set_by_flag(c.fabric.provider, opts.provider, f, "fabric.provider", "--provider");
    set_by_flag(c.prefill.device, opts.device, f, "prefill.device", "--device");
    set_by_flag(c.workload.fault_rate, opts.fault_rate, f, "workload.fault_rate", "--fault-rate");
    set_by_flag(c.log.level, opts.log_level, f, "log.level", "--log-level");
  });
  if (!cfg)
    return 2;
  start_log(*cfg);
  if (!address_ok(check_bind(cfg->fabric.bind_address, scope_of(*cfg)), "demo",
                  "fabric.bind_address"))
    return 2;
  if (cfg->tls.enabled())
    LS_WARN("demo: [tls] is set but unused: prefill and decode run in this one process and "
            "their control plane never leaves it");
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
    auto rep = run_workload(sys, cluster.decode->receiver, *cfg, cfg->workload.first_room);
    std::vector<int64_t> tails, settled, forwards;
    caf::scoped_actor self{sys};
    for (auto& p : cluster.prefill)
      self->request(p->scheduler, std::chrono::seconds(5), stats_query{})
          .receive(
              [&](scheduler_stats& s) {
                tails.insert(tails.end(), s.tail_ns.begin(), s.tail_ns.end());
                settled.insert(settled.end(), s.settled_tail_ns.begin(), s.settled_tail_ns.end());
                forwards.insert(forwards.end(), s.forward_ns.begin(), s.forward_ns.end());
              },
              [](caf::error&) {});
    rc = report(rep, *cfg, median_ms(tails), median_ms(settled), median_ms(forwards),
                opts.json_path, "demo");
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

namespace {
/// Resident set size of this process, bytes (0 if /proc is unreadable).
uint64_t rss_bytes() {
  std::ifstream statm{"/proc/self/statm"};
  uint64_t size = 0, resident = 0;
  statm >> size >> resident;
  return resident * static_cast<uint64_t>(sysconf(_SC_PAGESIZE));
}
} // namespace

int run_soak(const soak_options& opts) {
  auto cfg = load(opts.config_path, config_role::demo, [&](deployment_config& c, flag_keys& f) {
    c.workload.fault_rate = opts.fault_rate; // the flag's default is soak's, not the file's
    f.emplace("workload.fault_rate", "--fault-rate (0.01 when not given)");
    set_by_flag(c.fabric.provider, opts.provider, f, "fabric.provider", "--provider");
    set_by_flag(c.log.level, opts.log_level, f, "log.level", "--log-level");
  });
  if (!cfg)
    return 2;
  start_log(*cfg);
  if (!address_ok(check_bind(cfg->fabric.bind_address, scope_of(*cfg)), "bench soak",
                  "fabric.bind_address"))
    return 2;
  system_config scfg{*cfg, false};
  caf::actor_system sys{scfg};
  local_cluster cluster;
  if (auto err = cluster.start(sys, *cfg)) {
    std::cerr << "layerstream bench soak: " << message_of(err) << "\n";
    cluster.stop(sys);
    return 1;
  }
  const uint64_t batch = std::max<uint64_t>(cfg->workload.rooms, 1);
  const uint64_t rounds = (opts.rooms + batch - 1) / batch;
  const uint64_t warmup = std::max<uint64_t>(rounds / 10, 1);
  uint64_t complete = 0, failed = 0, unreasoned = 0, not_exact = 0, lost = 0;
  uint64_t rss_warm = 0;
  size_t actors_warm = 0;
  std::vector<std::string> samples;
  const auto t0 = std::chrono::steady_clock::now();
  const uint64_t seed = cfg->workload.seed;
  for (uint64_t round = 0; round < rounds; ++round) {
    auto rcfg = *cfg;
    rcfg.workload.rooms = static_cast<uint32_t>(std::min(batch, opts.rooms - round * batch));
    rcfg.workload.seed = seed + round;
    auto rep =
        run_workload(sys, cluster.decode->receiver, rcfg, cfg->workload.first_room + round * batch);
    complete += rep.complete;
    failed += rep.failed;
    lost += rep.rooms - rep.complete - rep.failed;
    if (rep.complete > 0 && !rep.bit_exact)
      ++not_exact;
    for (auto& f : rep.failures) {
      if (f.find(": ") == std::string::npos || f.find("no answer") != std::string::npos)
        ++unreasoned;
      if (samples.size() < 3)
        samples.push_back(f);
    }
    if (round + 1 == warmup) {
      rss_warm = rss_bytes();
      actors_warm = sys.registry().running();
    }
  }
  const double wall_s =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const uint64_t rss_end = rss_bytes();
  uint64_t prefill_settled = 0, rooms_held = 0, pages_held = 0;
  // Contexts live only while their room does: the same actors run now as
  // after the warm-up (the scoped actor below is not counted yet).
  // A stopped context may take a moment to be gone: bounded wait.
  for (auto until = std::chrono::steady_clock::now() + std::chrono::seconds(2);
       sys.registry().running() > actors_warm && std::chrono::steady_clock::now() < until;)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  const size_t actors_end = sys.registry().running();
  {
    // Scoped: the actor system waits for this actor too in cluster.stop().
    caf::scoped_actor self{sys};
    for (auto& p : cluster.prefill)
      self->request(p->scheduler, std::chrono::seconds(5), stats_query{})
          .receive(
              [&](scheduler_stats& s) {
                prefill_settled += s.rooms_complete + s.rooms_failed;
                rooms_held += s.rooms_open;
                pages_held += s.pages_total - s.pages_free;
              },
              [&](caf::error&) { ++rooms_held; });
  }
  cluster.stop(sys);
  const double growth_mb = (static_cast<double>(rss_end) - static_cast<double>(rss_warm)) / 1e6;
  std::cout << "layerstream bench soak: " << opts.rooms << " rooms, fault rate " << opts.fault_rate
            << ": " << complete << " complete (bit-exact: " << (not_exact == 0 ? "yes" : "NO")
            << "), " << failed << " failed, " << lost << " lost, " << unreasoned
            << " without a reason; prefill settled " << prefill_settled << "; " << wall_s << " s\n"
            << "  RSS after warm-up (" << warmup * batch << " rooms) " << rss_warm / 1000000.0
            << " MB, at the end " << rss_end / 1000000.0 << " MB, growth " << growth_mb
            << " MB (limit " << opts.max_rss_growth_mb << ")\n";
  std::cout << "  held at the end: " << rooms_held << " rooms and " << pages_held
            << " src pages on the prefill ranks; " << actors_end << " actors running (after "
            << "the warm-up: " << actors_warm << ")\n";
  for (auto& s : samples)
    std::cout << "  e.g. failed: " << s << "\n";
  const bool ok = complete + failed == opts.rooms && lost == 0 && unreasoned == 0 &&
                  not_exact == 0 && prefill_settled == opts.rooms * cfg->cluster.cp_size &&
                  rooms_held == 0 && pages_held == 0 && actors_end <= actors_warm &&
                  (opts.max_rss_growth_mb < 0 || growth_mb <= opts.max_rss_growth_mb);
  return ok ? 0 : 1;
}

int run_prefill(const std::string& config_path, const std::optional<std::string>& log_level) {
  auto cfg = load(config_path, config_role::prefill, log_level_flag(log_level));
  if (!cfg)
    return 2;
  if (!tls_ready(*cfg, "prefill"))
    return 2;
  start_log(*cfg);
  // Where this process may bind, checked before any socket or endpoint opens.
  if (!address_ok(check_bind(cfg->prefill.host, scope_of(*cfg)), "prefill", "prefill.host") ||
      !address_ok(check_bind(cfg->fabric.bind_address, scope_of(*cfg)), "prefill",
                  "fabric.bind_address"))
    return 2;
  // Before any thread starts, so that every thread inherits its mask. The
  // first SIGINT/SIGTERM stops the rank cleanly (below); a second, or a stop
  // that takes longer than a forward may run, ends it at once. Declared
  // before the actor system: it outlives every actor that may call it.
  stop_signals signals{"layerstream prefill: rank " + std::to_string(cfg->prefill.cp_rank)};
  system_config scfg{*cfg, true};
  caf::actor_system sys{scfg};
  // Past here an early exit still stops the actor system, which may wait on
  // what failed (a stuck middleman): bounded like any stop.
  const auto early_exit_grace = std::chrono::seconds(10);
  auto node = prefill_node::start(sys, *cfg, cfg->prefill.cp_rank);
  if (!node) {
    std::cerr << "layerstream prefill: " << describe(node.error()) << "\n";
    signals.arm(early_exit_grace);
    return 1;
  }
  // Peers reach the scheduler only through the gate's authenticated sessions.
  gate_config gcfg;
  gcfg.token = cfg->cluster.token;
  gcfg.scheduler = (*node)->scheduler;
  gcfg.session_timeout = session_answer_wait(cfg->timeouts.room, cfg->timeouts.submit);
  gcfg.challenge_ttl = std::max<caf::timespan>(cfg->timeouts.connection, std::chrono::seconds(5));
  gcfg.name = "rank " + std::to_string(cfg->prefill.cp_rank);
  gcfg.rank = rank_facts_of(*cfg, cfg->prefill.cp_rank);
  auto gate = sys.spawn(gate_impl, std::move(gcfg));
  // A rank without its scheduler, manager, transport or gate serves no room:
  // the first one down ends the process (exit 1, with the reason) through
  // the stop below, so that a supervisor restarts it.
  auto down = std::make_shared<std::pair<std::mutex, std::string>>();
  auto watcher = watch_critical(sys,
                                {{"the scheduler", caf::actor_cast<caf::actor>((*node)->scheduler)},
                                 {"the manager", caf::actor_cast<caf::actor>((*node)->manager)},
                                 {"the transport", caf::actor_cast<caf::actor>((*node)->transport)},
                                 {"the gate", caf::actor_cast<caf::actor>(gate)}},
                                [down, &signals](std::string why) {
                                  {
                                    std::lock_guard<std::mutex> guard{down->first};
                                    down->second = std::move(why);
                                  }
                                  signals.request_stop();
                                });
  // The gate takes an exit only from an actor of this process (node/auth.cpp:
  // an anonymous one is what a peer could send), and the node's device
  // outlives the actors that use it: every actor is done before return.
  auto stop_all = [&] {
    caf::scoped_actor stopper{sys};
    stopper->send_exit(watcher, caf::exit_reason::user_shutdown);
    stopper->send_exit(gate, caf::exit_reason::user_shutdown);
    (*node)->stop();
  };
  auto port = publish_gate(sys, gate, *cfg);
  if (!port) {
    std::cerr << "layerstream prefill: cannot publish on " << cfg->prefill.host << ":"
              << cfg->prefill.port << ": " << sys.render(port.error()) << "\n";
    signals.arm(early_exit_grace);
    stop_all();
    sys.await_all_actors_done();
    return 1;
  }
  LS_INFO("prefill rank {} serving on {}:{}", cfg->prefill.cp_rank, cfg->prefill.host, *port);
  std::cout << "layerstream prefill: rank " << cfg->prefill.cp_rank << " listening on "
            << cfg->prefill.host << ":" << *port << std::endl;
  const int sig = signals.wait_first();
  // The longest a clean stop may take: the stats query (5 s), the forward
  // thread's join (a GPU batch runs on after its deadline fails its rooms;
  // batches are bounded by room_ms in all), then closing the fabric, pools
  // and middleman (seconds).
  signals.arm(std::chrono::duration_cast<std::chrono::milliseconds>(cfg->timeouts.room) +
              std::chrono::seconds(15));
  // Why a critical actor went down, empty while none did.
  auto down_reason = [&down] {
    std::lock_guard<std::mutex> guard{down->first};
    return down->second;
  };
  if (auto died = down_reason(); !died.empty()) {
    std::cerr << "layerstream prefill: rank " << cfg->prefill.cp_rank << ": " << died
              << "; exiting\n";
    stop_all();
    sys.await_all_actors_done();
    return 1;
  }
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
                        << " ms, exposed tail (median) " << median_ms(s.tail_ns)
                        << " ms, settled (median) " << median_ms(s.settled_tail_ns) << " ms"
                        << std::endl;
            },
            [&](caf::error& err) {
              std::cerr << "layerstream prefill: no stats: " << sys.render(err) << "\n";
            });
  }
  stop_all();
  sys.await_all_actors_done();
  // A critical actor that went down as the signal came is still a failure.
  if (auto died = down_reason(); !died.empty()) {
    std::cerr << "layerstream prefill: rank " << cfg->prefill.cp_rank << ": " << died
              << " (while stopping)\n";
    return 1;
  }
  return 0;
}

int run_decode(const std::string& config_path, const std::optional<std::string>& log_level,
               const std::string& json_path, bool with_digest) {
  auto cfg = load(config_path, config_role::decode, log_level_flag(log_level));
  if (!cfg)
    return 2;
  if (!tls_ready(*cfg, "decode"))
    return 2;
  start_log(*cfg);
  // Where this process may bind and connect, checked before any socket opens.
  if (!address_ok(check_bind(cfg->fabric.bind_address, scope_of(*cfg)), "decode",
                  "fabric.bind_address"))
    return 2;
  std::vector<endpoint_parts> ranks; // as decode.prefill (validate() checked the syntax too)
  for (auto& endpoint : cfg->decode.prefill) {
    auto parts = split_endpoint(endpoint);
    if (auto* why = std::get_if<std::string>(&parts)) {
      std::cerr << "layerstream decode: decode.prefill endpoint " << endpoint << ": " << *why
                << "\n";
      return 2;
    }
    ranks.push_back(std::get<endpoint_parts>(std::move(parts)));
    if (!address_ok(check_connect(ranks.back().host, scope_of(*cfg)), "decode",
                    "decode.prefill endpoint " + endpoint))
      return 2;
  }
  system_config scfg{*cfg, true};
  caf::actor_system sys{scfg};
  // Sends our proofs; each rank's session ends when it is gone (this
  // process exits or stops it), also before any room (node/auth.hpp).
  auth_presence presence{sys};
  std::vector<scheduler_actor> schedulers;
  std::vector<std::vector<uint8_t>> session_keys; // one per rank, as schedulers
  for (size_t rank = 0; rank < ranks.size(); ++rank) {
    const auto& [host, port] = ranks[rank];
    const auto& endpoint = cfg->decode.prefill[rank];
    // The prefill ranks may still be starting: retry until the connection timeout.
    auto deadline = std::chrono::steady_clock::now() + cfg->timeouts.connection;
    for (;;) {
      // Each attempt ends by the deadline: a TLS mismatch never answers at all.
      auto left =
          std::chrono::duration_cast<caf::timespan>(deadline - std::chrono::steady_clock::now());
      auto h = connect_gate(sys, *cfg, host, port,
                            std::max<caf::timespan>(left, std::chrono::milliseconds(100)));
      if (h) {
        // Both sides prove the cluster token before any fabric address or key moves.
        auto session =
            authenticate(sys, presence, *h, cfg->cluster.token, cfg->timeouts.connection);
        if (!session) {
          LS_ERROR("decode: prefill rank at {}: {}", endpoint, describe(session.error()));
          std::cerr << "layerstream decode: prefill rank at " << endpoint << ": "
                    << describe(session.error()) << "\n";
          return 1;
        }
        if (auto err =
                check_rank_facts(session->rank, rank_facts_of(*cfg, static_cast<uint32_t>(rank)))) {
          LS_ERROR("decode: prefill rank at {}: {}", endpoint, describe(err));
          std::cerr << "layerstream decode: prefill rank at " << endpoint << ": " << describe(err)
                    << "\n";
          return 1;
        }
        LS_INFO("decode: authenticated with prefill rank at {}", endpoint);
        schedulers.push_back(session->session);
        session_keys.push_back(std::move(session->key));
        break;
      }
      if (std::chrono::steady_clock::now() >= deadline) {
        std::cerr << "layerstream decode: cannot reach prefill rank at " << endpoint << ": "
                  << sys.render(h.error()) << handshake_hint(h.error(), *cfg) << "\n";
        if (h.error() == caf::sec::request_timeout) {
          // CAF 0.17's middleman connects in a blocking call and its shutdown
          // waits for it: to a host that drops packets, the kernel's SYN
          // retries (134 s measured here, against a 3 s connection_ms). No
          // room is open yet, so ending now loses nothing; a rank already
          // authenticated sees this process go, as at any exit.
          spdlog::default_logger()->flush();
          std::cout.flush();
          std::_Exit(1);
        }
        return 1;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
  }
  auto node = decode_node::start(sys, *cfg, schedulers, std::move(session_keys));
  if (!node) {
    std::cerr << "layerstream decode: " << describe(node.error()) << "\n";
    return 1;
  }
  auto rep = run_workload(sys, (*node)->receiver, *cfg, cfg->workload.first_room);
  (*node)->stop();
  presence.stop();
  sys.await_all_actors_done();
  // Closed first: a failed room's late write must not land while we hash.
  (*node)->target->close();
  // The digest reads the whole pool: only when asked (the cluster tests).
  auto digest = with_digest ? pool_digest(*(*node)->pool) : std::string{};
  return report(rep, *cfg, 0, 0, 0, json_path, "decode", digest);
}

} // namespace layerstream::cli
