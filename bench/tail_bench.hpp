// `layerstream bench tail`: the exposed transfer tail of the bulk path and of
// the per-layer path, side by side in one process on the same workload, over
// loopback with a real libfabric provider (bench/README.md says how to read it).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace layerstream {

struct tail_bench_options {
  /// Layers, concurrent rooms and CP sizes; every layers x rooms pair runs at
  /// CP 1, and each CP > 1 runs with one room (empty: the defaults).
  std::vector<uint32_t> layers;
  std::vector<uint32_t> rooms;
  std::vector<uint32_t> cp;
  /// Prompt tokens per room, which set the KV bytes per layer; each value
  /// runs every config (empty: 256 tokens for one room, 16 for many).
  std::vector<uint64_t> tokens;
  /// Interleaved repetitions per config (each: no-transfer forward, bulk,
  /// per-layer, one layer alone).
  uint32_t repetitions = 5;
  /// Simulated compute of one layer.
  uint32_t layer_compute_us = 1000;
  std::string provider = "tcp;ofi_rxm";
  /// fabric.write_iov of every run (0: the provider's limit; 1: a write per block).
  uint32_t write_iov = 0;
  /// transfer.notify_spin_us of every run (unset: the config's default), to
  /// compare the last-layer spin against none (0).
  std::optional<uint32_t> notify_spin_us;
  /// prefill.device of every run ("cpu" or "gpu").
  std::string device = "cpu";
  /// model.compute_wait of every run on the cpu device: "spin" (the forward
  /// threads keep their cores) or "sleep" (they leave them, as a host thread
  /// waiting for a GPU does).
  std::string compute_wait = "spin";
  /// L = 32 with 1 and 16 rooms, 3 repetitions: under a minute.
  bool quick = false;
  std::string json_path;
};

/// Runs the benchmark and prints the table. 0: every room of every run
/// completed bit-exactly; 1: a run failed (no numbers are reported for it);
/// 2: bad options.
int run_tail_bench(const tail_bench_options& opts);

} // namespace layerstream
