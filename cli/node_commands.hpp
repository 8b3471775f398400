// `layerstream demo`, `prefill` and `decode`: the process-level jobs.
#pragma once

#include <optional>
#include <string>

#include "config/config.hpp"

namespace layerstream::cli {

/// `layerstream bench soak`: `rooms` rooms in demo-sized rounds with random
/// injected CQ errors; every room must end complete and bit-exact or failed
/// with a reason. Prints the counts and the resident-memory growth.
struct soak_options {
  std::string config_path;
  uint64_t rooms = 1000;
  double fault_rate = 0.01;
  std::optional<std::string> provider;
  std::optional<std::string> log_level;
  /// Fail (exit 1) when RSS grows more than this after the warm-up rounds
  /// (< 0: report only). RSS also grows as KV pool pages are first touched,
  /// so this is a coarse bound, not a leak detector.
  double max_rss_growth_mb = -1;
};
int run_soak(const soak_options& opts);

/// Flags of `layerstream demo`; each set one overrides the config.
struct demo_options {
  std::string config_path; // empty: the embedded default (config/demo.toml)
  std::optional<uint32_t> layers;
  std::optional<uint32_t> cp;
  std::optional<uint32_t> rooms;
  bool mla = false;
  std::optional<uint64_t> chunk_tokens;
  bool bulk = false;
  std::optional<std::string> provider;
  std::optional<std::string> device;
  std::optional<double> fault_rate;
  std::optional<std::string> log_level;
  std::string json_path;
  std::string trace_path;
};

/// Prefill and decode in one process on loopback. Exit 0 only if every room
/// completed bit-exactly; 1 otherwise; 2 for a bad config.
int run_demo(const demo_options& opts);

/// One prefill rank: publishes its authentication gate and serves until SIGINT/SIGTERM.
int run_prefill(const std::string& config_path, const std::optional<std::string>& log_level);

/// One decode node: connects to every prefill rank, runs the workload,
/// prints the report. Exit 0 only if every room completed bit-exactly.
/// `pool_digest`: also hash the whole decode pool into the report.
int run_decode(const std::string& config_path, const std::optional<std::string>& log_level,
               const std::string& json_path, bool pool_digest = false);

} // namespace layerstream::cli
