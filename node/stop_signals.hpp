// SIGINT and SIGTERM for a process that serves until told to stop (a prefill
// rank). The first asks for a clean stop. A second, or a clean stop that
// outlives its grace time, ends the process at once: a rank stuck in a
// device call, a blocking connect or a join still exits, with a line that
// says why, instead of ignoring every signal but SIGKILL.
#pragma once

#include <chrono>
#include <condition_variable>
#include <csignal>
#include <mutex>
#include <string>
#include <thread>

namespace layerstream {

class stop_signals {
 public:
  /// Blocks SIGINT and SIGTERM in the calling thread, hence in every thread
  /// it starts later, and starts the thread that takes them. Construct it
  /// before any other thread (CAF's, libfabric's). `who` starts the lines it
  /// writes to stderr ("layerstream prefill: rank 0").
  explicit stop_signals(std::string who);
  ~stop_signals();
  stop_signals(const stop_signals&) = delete;
  stop_signals& operator=(const stop_signals&) = delete;

  /// Blocks until the first SIGINT/SIGTERM or request_stop(); returns the
  /// signal's number, 0 for request_stop().
  int wait_first();

  /// The stop a signal asks for, from inside the process (any thread).
  void request_stop();

  /// The clean stop has begun: past `grace` from now, the process ends at
  /// once with exit code 1.
  void arm(std::chrono::milliseconds grace);

 private:
  void run();

  std::string who_;
  sigset_t set_{};
  std::mutex mutex_;
  std::condition_variable first_cv_;
  bool stop_asked_ = false;
  int first_signal_ = 0;
  bool armed_ = false;
  std::chrono::steady_clock::time_point deadline_{};
  std::chrono::milliseconds grace_{0};
  bool quit_ = false;
  std::thread thread_;
};

} // namespace layerstream
