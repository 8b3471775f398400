// stop_signals: the first SIGINT/SIGTERM (or request_stop) is handed to the
// waiting thread; a second signal, or a stop past its grace time, ends the
// process at once with exit code 1 and a line saying why. Each case runs in
// a child process (a death test): the class blocks signals process-wide.
#include <sys/types.h>
#include <unistd.h>

#include <chrono>
#include <csignal>
#include <cstdlib>
#include <thread>

#include <gtest/gtest.h>

#include "node/stop_signals.hpp"

namespace layerstream {
namespace {

using namespace std::chrono_literals;

class StopSignals : public ::testing::Test {
 protected:
  // The children re-run this binary: no fork of a process with threads.
  void SetUp() override { GTEST_FLAG_SET(death_test_style, "threadsafe"); }
};

TEST_F(StopSignals, TheFirstSignalIsHandedToTheWaiterAndACleanStopExitsNormally) {
  EXPECT_EXIT(
      {
        stop_signals signals{"test"};
        ::kill(::getpid(), SIGTERM);
        const int sig = signals.wait_first();
        signals.arm(30s); // a clean stop well inside its grace time
        std::exit(sig == SIGTERM ? 0 : 3);
      },
      ::testing::ExitedWithCode(0), "");
}

TEST_F(StopSignals, ARequestFromInsideStopsAsASignalWould) {
  EXPECT_EXIT(
      {
        stop_signals signals{"test"};
        std::thread asker{[&] { signals.request_stop(); }};
        const int sig = signals.wait_first();
        asker.join();
        std::exit(sig == 0 ? 0 : 3);
      },
      ::testing::ExitedWithCode(0), "");
}

TEST_F(StopSignals, ASecondSignalEndsTheProcessAtOnce) {
  EXPECT_EXIT(
      {
        stop_signals signals{"rank 7"};
        ::kill(::getpid(), SIGTERM);
        signals.wait_first();
        ::kill(::getpid(), SIGINT);
        std::this_thread::sleep_for(20s); // a stop that hangs
        std::exit(0);
      },
      ::testing::ExitedWithCode(1), "rank 7: signal 2 while stopping: exiting at once");
}

TEST_F(StopSignals, AStopPastItsGraceEndsTheProcessAtOnce) {
  EXPECT_EXIT(
      {
        stop_signals signals{"rank 3"};
        signals.request_stop();
        signals.wait_first();
        signals.arm(300ms);
        std::this_thread::sleep_for(20s); // a stop that hangs
        std::exit(0);
      },
      ::testing::ExitedWithCode(1), "rank 3: still stopping 300 ms after the stop began");
}

} // namespace
} // namespace layerstream
