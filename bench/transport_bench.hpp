// `layerstream bench transport`: the transport actor path against a plain
// libfabric write loop on the same provider, message size and window, both
// with FI_DELIVERY_COMPLETE on every write, both into a target kept
// progressing by a target-mode worker (loopback, one process).
//
// Repetitions of the two paths are interleaved in one run (raw, actor, raw,
// actor, ...) so drift on a shared machine hits both; the table shows medians.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace layerstream {

struct transport_bench_options {
  /// Providers to measure; one missing here is reported and skipped.
  std::vector<std::string> providers = {"shm", "tcp;ofi_rxm"};
  /// Write (message) sizes in bytes.
  std::vector<uint64_t> sizes = {64ull << 10, 1ull << 20, 4ull << 20};
  /// Bytes moved per repetition and path (rounded up to whole messages).
  uint64_t bytes_per_rep = 64ull << 20;
  /// Writes in flight in both paths.
  uint64_t window = 16;
  /// The actor path sends this many submits at once ("layers"), splitting the bytes.
  uint64_t submits_per_rep = 4;
  /// Interleaved repetitions per path (median reported).
  int repetitions = 7;
  /// Compare target memory with the source after one repetition of each path.
  bool verify = true;
  /// Also write {"provider": ..., "results": [...]} here when not empty.
  std::string json_path;
};

/// Runs the benchmark, prints a table; 0 on success, 1 on a failed write or
/// verification, 2 on a bad option or when no provider could be measured.
int run_transport_bench(const transport_bench_options& opts);

} // namespace layerstream
