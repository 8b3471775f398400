// layerstream command line: one CLI11 app, one subcommand per job.
#include <cerrno>
#include <charconv>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <iostream>
#include <string>
#include <type_traits>

#include <CLI/CLI.hpp>
#include <unistd.h>

#include "bench/tail_bench.hpp"
#include "bench/transport_bench.hpp"
#include "cli/blocks_command.hpp"
#include "cli/node_commands.hpp"

namespace {

/// Every unsigned option's check: CLI11 2.1 reads "-16" into a uint64_t as
/// 2^64 - 16, clamps 2^65 to 2^64 - 1 and reads "010" as octal, silently; a
/// value must be decimal digits that fit in 64 bits, and goes on to CLI11 as
/// the number read here (narrower types are range-checked by CLI11 too).
std::string check_unsigned(std::string& text) {
  uint64_t value = 0;
  const char* end = text.data() + text.size();
  auto [stop, ec] = std::from_chars(text.data(), end, value);
  if (text.empty() || ec != std::errc{} || stop != end)
    return "expected an unsigned integer below 2^64, got \"" + text + "\"";
  text = std::to_string(value);
  return {};
}

const CLI::Validator unsigned_value{check_unsigned, "UINT"};

/// A report or trace path: checked before the run, so that a typo does not
/// cost a whole run and then fail at the write. The file itself is written
/// (created or replaced) only at the end.
std::string check_output_path(std::string& path) {
  namespace fs = std::filesystem;
  if (path.empty())
    return "an empty path";
  std::error_code ec;
  if (fs::is_directory(path, ec))
    return "\"" + path + "\" is a directory, not a file";
  const fs::path dir =
      fs::path{path}.parent_path().empty() ? fs::path{"."} : fs::path{path}.parent_path();
  if (!fs::is_directory(dir, ec))
    return "the directory of \"" + path + "\" does not exist";
  if (::access(dir.c_str(), W_OK) != 0)
    return "the directory of \"" + path + "\" is not writable: " + std::strerror(errno);
  if (fs::exists(path, ec) && ::access(path.c_str(), W_OK) != 0)
    return "\"" + path + "\" exists and is not writable: " + std::strerror(errno);
  return {};
}

const CLI::Validator output_path{check_output_path, "FILE"};

/// CLI11 option that fills a std::optional<T>.
template <class T>
CLI::Option* add_optional(CLI::App* app, const std::string& name, std::optional<T>& out,
                          const std::string& help) {
  auto* opt = app->add_option_function<T>(
      name, [&out](const T& v) { out = v; }, help);
  if constexpr (std::is_unsigned_v<T>)
    opt->transform(unsigned_value);
  return opt;
}

int run(int argc, char** argv) {
  CLI::App app{
      "layerstream: per-layer, overlapped KV-cache transfer for disaggregated LLM serving"};
  app.require_subcommand(1);

  std::string blocks_input;
  auto* blocks = app.add_subcommand(
      "blocks", "Print the (src, dst, len) blocks of one request and layer as JSON "
                "(SGLang/Mooncake transfer math)");
  blocks->add_option("--input", blocks_input, "JSON file: one input object or an array of them")
      ->required();

  layerstream::cli::demo_options demo_opts;
  auto* demo = app.add_subcommand(
      "demo", "Prefill and decode together on loopback (embedded default config); exit 0 only "
              "if every room completed bit-exactly");
  demo->add_option("--config", demo_opts.config_path, "TOML config (default: the embedded demo)");
  add_optional(demo, "--layers", demo_opts.layers, "model layers");
  add_optional(demo, "--cp", demo_opts.cp, "prefill ranks (context parallelism)");
  add_optional(demo, "--rooms", demo_opts.rooms, "requests (rooms)");
  demo->add_flag("--mla", demo_opts.mla, "MLA: one fused KV buffer per layer, one KV head");
  add_optional(demo, "--chunk-tokens", demo_opts.chunk_tokens,
               "chunked prefill: tokens per chunk (a multiple of the page size)");
  demo->add_flag("--bulk", demo_opts.bulk, "per-layer off: classic transfer after the forward");
  add_optional(demo, "--provider", demo_opts.provider,
               "libfabric provider (fabric.provider): tcp;ofi_rxm, net, shm, sockets, "
               "verbs;ofi_rxm, efa, udp;ofi_rxd");
  add_optional(demo, "--device", demo_opts.device,
               "where the forward runs: cpu, or gpu (a CUDA build and a visible device)");
  add_optional(demo, "--fault-rate", demo_opts.fault_rate,
               "TESTING: probability that a write completion becomes a CQ error");
  add_optional(demo, "--log-level", demo_opts.log_level, "trace, debug, info, warn, error, off");
  demo->add_option("--json", demo_opts.json_path, "write the report as JSON to this file")
      ->check(output_path);
  demo->add_option("--trace", demo_opts.trace_path,
                   "write the run's timeline as Chrome trace JSON (Perfetto)")
      ->check(output_path);

  std::string prefill_config;
  std::optional<std::string> prefill_log;
  auto* prefill = app.add_subcommand(
      "prefill",
      "One prefill rank: publish its authentication gate and serve until SIGINT/SIGTERM");
  prefill->add_option("--config", prefill_config, "TOML config of this rank")->required();
  add_optional(prefill, "--log-level", prefill_log, "trace, debug, info, warn, error, off");

  std::string decode_config, decode_json;
  std::optional<std::string> decode_log;
  auto* decode = app.add_subcommand(
      "decode", "One decode node: connect to the prefill ranks, run the workload, report");
  decode->add_option("--config", decode_config, "TOML config of this node")->required();
  add_optional(decode, "--log-level", decode_log, "trace, debug, info, warn, error, off");
  decode->add_option("--json", decode_json, "write the report as JSON to this file")
      ->check(output_path);
  bool decode_digest = false;
  decode->add_flag("--pool-digest", decode_digest,
                   "report a hash of the whole decode pool (compare two runs' pools)");

  auto* bench = app.add_subcommand("bench", "Benchmarks");
  bench->require_subcommand(1);
  layerstream::transport_bench_options tb;
  bool tb_quick = false;
  auto* bench_transport = bench->add_subcommand(
      "transport", "Transport actor path against a plain libfabric write loop (same provider, "
                   "size, window, FI_DELIVERY_COMPLETE), interleaved, medians");
  bench_transport->add_option("--provider", tb.providers, "providers (default: shm tcp;ofi_rxm)");
  auto* tb_repetitions =
      bench_transport->add_option("--repetitions", tb.repetitions, "interleaved repetitions");
  // --quick sets the repetitions itself: both given would drop one silently.
  bench_transport->add_flag("--quick", tb_quick, "a short smoke run: 8 MiB, 3 repetitions")
      ->excludes(tb_repetitions);
  bench_transport->add_option("--json", tb.json_path, "write the results as JSON to this file")
      ->check(output_path);

  layerstream::tail_bench_options tail_opts;
  auto* bench_tail = bench->add_subcommand(
      "tail", "Exposed transfer tail: bulk path against per-layer path on the same workload, "
              "side by side (interleaved repetitions, medians); forward slowdown; notifier and "
              "actor handling cost");
  bench_tail->add_option("--layers", tail_opts.layers, "model layers (default: 32 61 80)")
      ->transform(unsigned_value);
  bench_tail->add_option("--rooms", tail_opts.rooms, "concurrent rooms (default: 1 16 256)")
      ->transform(unsigned_value);
  bench_tail->add_option("--cp", tail_opts.cp, "CP sizes; CP > 1 runs with one room (default: 1 2)")
      ->transform(unsigned_value);
  bench_tail
      ->add_option("--tokens", tail_opts.tokens,
                   "prompt tokens per room, which set the KV bytes per layer; each value "
                   "runs every config (default: 256 for one room, 16 for many)")
      ->transform(unsigned_value);
  auto* tail_repetitions =
      bench_tail->add_option("--repetitions", tail_opts.repetitions, "interleaved repetitions")
          ->transform(unsigned_value);
  bench_tail
      ->add_option("--layer-compute-us", tail_opts.layer_compute_us,
                   "simulated compute per layer, us")
      ->transform(unsigned_value);
  bench_tail->add_option("--provider", tail_opts.provider, "libfabric provider");
  bench_tail
      ->add_option("--write-iov", tail_opts.write_iov,
                   "blocks of a room per write (fabric.write_iov; 0: the provider's limit)")
      ->transform(unsigned_value);
  bench_tail
      ->add_option_function<uint32_t>(
          "--notify-spin-us", [&tail_opts](uint32_t us) { tail_opts.notify_spin_us = us; },
          "transfer.notify_spin_us of every run (default: the config's); 0 compares against no "
          "last-layer spin")
      ->transform(unsigned_value);
  bench_tail->add_option("--device", tail_opts.device, "where the forward runs: cpu or gpu");
  bench_tail->add_option("--compute-wait", tail_opts.compute_wait,
                         "device cpu: how a forward thread passes a layer's compute: spin (busy, "
                         "the default) or sleep (asleep to just before the layer's end, as a host "
                         "waiting for a GPU)");
  bench_tail
      ->add_flag("--quick", tail_opts.quick,
                 "L = 32 with 1 and 16 rooms, 3 repetitions (under a minute)")
      ->excludes(tail_repetitions);
  bench_tail->add_option("--json", tail_opts.json_path, "write the results as JSON to this file")
      ->check(output_path);

  layerstream::cli::soak_options soak_opts;
  auto* bench_soak = bench->add_subcommand(
      "soak", "Many rooms with random injected CQ errors: each complete and bit-exact or failed "
              "with a reason; counts and memory growth");
  bench_soak->add_option("--config", soak_opts.config_path, "TOML config (default: embedded demo)");
  bench_soak
      ->add_option("--rooms", soak_opts.rooms, "rooms in all (run in rounds of workload.rooms)")
      ->transform(unsigned_value)
      ->check(CLI::Range(uint64_t{1}, uint64_t{1} << 32));
  bench_soak->add_option("--fault-rate", soak_opts.fault_rate,
                         "probability that a write completion becomes a CQ error");
  add_optional(bench_soak, "--provider", soak_opts.provider, "libfabric provider");
  add_optional(bench_soak, "--log-level", soak_opts.log_level,
               "trace, debug, info, warn, error, off");
  bench_soak->add_option("--max-rss-growth-mb", soak_opts.max_rss_growth_mb,
                         "fail when resident memory grows more than this after the warm-up "
                         "(below 0, the default: report only)");

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    // --help prints and exits 0; every other parse error is a usage error (2).
    auto code = app.exit(e);
    return code == 0 ? 0 : 2;
  }
  if (*blocks)
    return layerstream::cli::run_blocks(blocks_input, std::cout, std::cerr);
  if (*demo)
    return layerstream::cli::run_demo(demo_opts);
  if (*prefill)
    return layerstream::cli::run_prefill(prefill_config, prefill_log);
  if (*decode)
    return layerstream::cli::run_decode(decode_config, decode_log, decode_json, decode_digest);
  if (*bench_tail)
    return layerstream::run_tail_bench(tail_opts);
  if (*bench_soak)
    return layerstream::cli::run_soak(soak_opts);
  if (*bench_transport) {
    if (tb_quick) {
      tb.bytes_per_rep = 8 << 20;
      tb.repetitions = 3;
    }
    return layerstream::run_transport_bench(tb);
  }
  return 2;
}

} // namespace

int main(int argc, char** argv) {
  // What nothing below caught (out of memory, a library's throw) ends the
  // process with its text and exit 1, not with std::terminate's abort.
  try {
    return run(argc, argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "layerstream: unexpected error: %s\n", e.what());
  } catch (...) {
    std::fprintf(stderr, "layerstream: unexpected error (not a std::exception)\n");
  }
  return 1;
}
