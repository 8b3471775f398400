// watch_critical (node/watch.hpp): the first watched actor down reports its
// name and reason once; a watcher ended first reports nothing. run_workload
// (node/nodes.hpp) stops waiting as soon as its receiver is down.
#include <gtest/gtest.h>

#include <chrono>
#include <future>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include <caf/all.hpp>

#include "messages/messages.hpp"
#include "node/nodes.hpp"
#include "node/watch.hpp"

using namespace layerstream;
using namespace std::chrono_literals;

namespace {

/// Does nothing but live. (It takes an argument: CAF 0.17 spawning a
/// function without arguments dereferences a null argument tuple.)
caf::behavior idle(caf::event_based_actor*, int) {
  return {[](caf::ok_atom) {}};
}

struct WatchCritical : ::testing::Test {
  caf::actor_system_config cfg;
  caf::actor_system sys{cfg};
  caf::scoped_actor self{sys};
  caf::actor a = sys.spawn(idle, 1);
  caf::actor b = sys.spawn(idle, 2);
  std::mutex mutex;
  std::vector<std::string> reports;

  caf::actor watch() {
    return watch_critical(sys, {{"actor a", a}, {"actor b", b}}, [this](std::string why) {
      std::lock_guard<std::mutex> guard{mutex};
      reports.push_back(std::move(why));
    });
  }

  /// `who` has exited, or does so within 10 s.
  bool ends(const caf::actor& who) {
    self->monitor(who);
    bool down = false;
    self->receive([&](caf::down_msg& dm) { down = dm.source == who.address(); },
                  caf::after(10s) >> [] {});
    return down;
  }

  ~WatchCritical() override {
    self->send_exit(a, caf::exit_reason::user_shutdown);
    self->send_exit(b, caf::exit_reason::user_shutdown);
  }
};

} // namespace

TEST_F(WatchCritical, TheFirstActorDownIsReportedOnceByNameAndReason) {
  auto watcher = watch();
  self->send_exit(b, caf::exit_reason::user_shutdown);
  ASSERT_TRUE(ends(watcher)) << "the watcher lives on after b went down";
  self->send_exit(a, caf::exit_reason::user_shutdown);
  ASSERT_TRUE(ends(a));
  std::lock_guard<std::mutex> guard{mutex};
  ASSERT_EQ(reports.size(), 1u);
  EXPECT_NE(reports[0].find("actor b is down ("), std::string::npos) << reports[0];
  EXPECT_NE(reports[0].find("user_shutdown"), std::string::npos) << reports[0];
}

TEST_F(WatchCritical, AWatcherEndedFirstReportsNothing) {
  auto watcher = watch();
  self->send_exit(watcher, caf::exit_reason::user_shutdown);
  ASSERT_TRUE(ends(watcher));
  self->send_exit(a, caf::exit_reason::user_shutdown);
  ASSERT_TRUE(ends(a));
  std::lock_guard<std::mutex> guard{mutex};
  EXPECT_TRUE(reports.empty()) << reports.front();
}

namespace {

/// Takes `rooms` open_room messages without answering, then dies: a decode
/// receiver that crashed with rooms open.
caf::behavior dies_after_opens(caf::event_based_actor* self, uint32_t rooms) {
  auto seen = std::make_shared<uint32_t>(0);
  return {[self, rooms, seen](const open_room&) -> caf::result<room_result> {
    if (++*seen == rooms)
      self->quit(caf::exit_reason::user_shutdown);
    return caf::delegated<room_result>{}; // no answer
  }};
}

} // namespace

TEST(Workload, AReceiverThatDiesEndsTheWaitAtOnceWithItsReason) {
  caf::actor_system_config cfg;
  caf::actor_system sys{cfg};
  deployment_config dep;
  dep.workload.rooms = 3;
  dep.timeouts.room = 60s; // the wait would otherwise last 2 x 60 s + 5 s
  auto receiver = caf::actor_cast<receiver_actor>(sys.spawn(dies_after_opens, 3u));
  const auto start = std::chrono::steady_clock::now();
  auto rep = run_workload(sys, receiver, dep, 1);
  const auto took = std::chrono::steady_clock::now() - start;
  EXPECT_LT(took, 30s) << "run_workload waited out its deadline for a dead receiver";
  EXPECT_EQ(rep.rooms, 3u);
  EXPECT_EQ(rep.failed, 3u);
  EXPECT_EQ(rep.complete, 0u);
  ASSERT_FALSE(rep.failures.empty());
  EXPECT_NE(rep.failures.back().find("no answer for 3 rooms: the receiver is down"),
            std::string::npos)
      << rep.failures.back();
}
