#include "node/stop_signals.hpp"

#include <cerrno>
#include <cstdlib>
#include <ctime>
#include <string>
#include <utility>

#include <pthread.h>
#include <unistd.h>

namespace layerstream {

namespace {
// How often the signal thread looks at the grace deadline and at quit_.
constexpr long poll_ns = 100'000'000;
} // namespace

stop_signals::stop_signals(std::string who) : who_{std::move(who)} {
  sigemptyset(&set_);
  sigaddset(&set_, SIGINT);
  sigaddset(&set_, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &set_, nullptr);
  thread_ = std::thread{[this] { run(); }};
}

stop_signals::~stop_signals() {
  {
    std::lock_guard<std::mutex> guard{mutex_};
    quit_ = true;
  }
  thread_.join();
}

int stop_signals::wait_first() {
  std::unique_lock<std::mutex> lock{mutex_};
  first_cv_.wait(lock, [this] { return stop_asked_; });
  return first_signal_;
}

void stop_signals::request_stop() {
  std::lock_guard<std::mutex> guard{mutex_};
  if (stop_asked_)
    return;
  stop_asked_ = true;
  first_cv_.notify_all();
}

void stop_signals::arm(std::chrono::milliseconds grace) {
  std::lock_guard<std::mutex> guard{mutex_};
  armed_ = true;
  grace_ = grace;
  deadline_ = std::chrono::steady_clock::now() + grace;
}

void stop_signals::run() {
  const timespec poll{0, poll_ns};
  for (;;) {
    const int sig = sigtimedwait(&set_, nullptr, &poll);
    std::string why; // set: end the process now
    {
      std::lock_guard<std::mutex> guard{mutex_};
      if (sig > 0 && !stop_asked_) {
        stop_asked_ = true;
        first_signal_ = sig;
        first_cv_.notify_all();
      } else if (sig > 0) {
        why = "signal " + std::to_string(sig) + " while stopping";
      } else if (armed_ && std::chrono::steady_clock::now() >= deadline_) {
        why = "still stopping " + std::to_string(grace_.count()) +
              " ms after the stop began (a forward or device call that does not end?)";
      } else if (quit_) {
        return;
      }
    }
    if (!why.empty()) {
      // Unlocked (a full stderr pipe must not hold request_stop() too), one
      // write(2), then _Exit: no destructor may run, one may be what hangs.
      const std::string line = who_ + ": " + why + ": exiting at once, without a clean shutdown\n";
      [[maybe_unused]] auto n = ::write(STDERR_FILENO, line.data(), line.size());
      std::_Exit(1);
    }
  }
}

} // namespace layerstream
