// A timeline of one run as Chrome trace events ({"traceEvents": [...]},
// opens in Perfetto / chrome://tracing).
//
// Thread-safe: the forward thread and actors append; each call takes a
// mutex, so it is meant for demo and debugging runs, and is off (nullptr)
// otherwise. Timestamps are steady-clock nanoseconds; the file shows
// microseconds from the first event.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

namespace layerstream {

/// Nanoseconds of the steady clock (timestamps in messages and traces).
inline int64_t steady_ns(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(t.time_since_epoch()).count();
}

inline int64_t steady_ns() {
  return steady_ns(std::chrono::steady_clock::now());
}

class trace_recorder {
 public:
  /// A span [start_ns, end_ns) named `name` in process `pid` (e.g. a prefill
  /// rank), lane `tid` (0: forward thread; room id: that room's transfers).
  void span(std::string name, std::string category, uint32_t pid, uint64_t tid, int64_t start_ns,
            int64_t end_ns);
  /// A point in time.
  void instant(std::string name, std::string category, uint32_t pid, uint64_t tid, int64_t at_ns);
  /// Names a process lane (shown instead of its number).
  void name_process(uint32_t pid, std::string name);

  /// Writes the trace to `path`; false if the file cannot be written.
  bool write(const std::string& path) const;
  size_t size() const;

 private:
  struct event {
    std::string name;
    std::string category;
    char phase;
    uint32_t pid;
    uint64_t tid;
    int64_t start_ns;
    int64_t end_ns;
  };
  mutable std::mutex mtx_;
  std::vector<event> events_;
  std::vector<std::pair<uint32_t, std::string>> process_names_;
};

} // namespace layerstream
