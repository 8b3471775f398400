// event_waiter without a GPU: fake wait/release functions stand in for
// cudaEventSynchronize and the event pool.
#include "device/event_waiter.hpp"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <functional>
#include <future>
#include <mutex>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "common/error.hpp"

using namespace layerstream;
using namespace std::chrono_literals;

namespace {

/// Handles complete when the test opens them; handle 13 fails.
struct fake_device {
  std::mutex mtx;
  std::condition_variable cv;
  std::vector<event_waiter::handle> open;
  std::vector<event_waiter::handle> waited;
  std::vector<event_waiter::handle> released;

  caf::error wait(event_waiter::handle h) {
    std::unique_lock<std::mutex> guard{mtx};
    cv.wait(guard, [&] { return std::find(open.begin(), open.end(), h) != open.end(); });
    waited.push_back(h);
    if (h == 13)
      return make_error(lserr::event_failed, "cudaEventSynchronize(ev) failed: fake fault");
    return caf::error{};
  }

  void release(event_waiter::handle h) {
    std::lock_guard<std::mutex> guard{mtx};
    released.push_back(h);
  }

  void complete(event_waiter::handle h) {
    {
      std::lock_guard<std::mutex> guard{mtx};
      open.push_back(h);
    }
    cv.notify_all();
  }
};

bool wait_until(const std::function<bool()>& pred) {
  const auto until = std::chrono::steady_clock::now() + 5s;
  while (!pred()) {
    if (std::chrono::steady_clock::now() > until)
      return false;
    std::this_thread::sleep_for(1ms);
  }
  return true;
}

} // namespace

TEST(EventWaiterTest, CompletesEachEventOnceAndReleasesItsHandleAfterTheCallback) {
  fake_device dev;
  std::atomic<int> calls{0};
  std::atomic<size_t> released_at_callback{99};
  {
    event_waiter waiter{[&dev](event_waiter::handle h) { return dev.wait(h); },
                        [&dev](event_waiter::handle h) { dev.release(h); }};
    auto ev = std::make_shared<host_event>();
    ev->on_complete([&](const caf::error& err) {
      EXPECT_FALSE(err);
      std::lock_guard<std::mutex> guard{dev.mtx};
      released_at_callback = dev.released.size();
      ++calls;
    });
    waiter.push(7, ev);
    std::this_thread::sleep_for(20ms);
    EXPECT_EQ(calls.load(), 0) << "completed before the device finished";
    EXPECT_EQ(waiter.pending(), 1u);
    dev.complete(7);
    ASSERT_TRUE(wait_until([&] { return waiter.pending() == 0; }));
    EXPECT_EQ(calls.load(), 1);
    EXPECT_EQ(released_at_callback.load(), 0u) << "handle released before the callback ran";
    // A late callback runs at once, on this thread, and never touches the handle.
    int late = 0;
    ev->on_complete([&](const caf::error&) { ++late; });
    EXPECT_EQ(late, 1);
  }
  EXPECT_EQ(calls.load(), 1);
  EXPECT_EQ(dev.released, std::vector<event_waiter::handle>{7});
}

TEST(EventWaiterTest, WaitsInRecordOrder) {
  fake_device dev;
  event_waiter waiter{[&dev](event_waiter::handle h) { return dev.wait(h); },
                      [&dev](event_waiter::handle h) { dev.release(h); }};
  std::vector<std::shared_ptr<host_event>> evs;
  for (event_waiter::handle h = 1; h <= 5; ++h) {
    evs.push_back(std::make_shared<host_event>());
    waiter.push(h, evs.back());
  }
  for (event_waiter::handle h = 5; h >= 1; --h)
    dev.complete(h); // all done on the device, in any order
  ASSERT_TRUE(wait_until([&] { return waiter.pending() == 0; }));
  std::lock_guard<std::mutex> guard{dev.mtx};
  EXPECT_EQ(dev.waited, (std::vector<event_waiter::handle>{1, 2, 3, 4, 5}));
  EXPECT_EQ(dev.released, (std::vector<event_waiter::handle>{1, 2, 3, 4, 5}));
  for (auto& ev : evs)
    EXPECT_TRUE(ev->done());
}

TEST(EventWaiterTest, AFailedWaitFailsThatEventWithTheErrorTextAndLaterOnesStillComplete) {
  fake_device dev;
  event_waiter waiter{[&dev](event_waiter::handle h) { return dev.wait(h); },
                      [&dev](event_waiter::handle h) { dev.release(h); }};
  auto bad = std::make_shared<host_event>();
  auto good = std::make_shared<host_event>();
  std::promise<caf::error> bad_status;
  bad->on_complete([&](const caf::error& err) { bad_status.set_value(err); });
  waiter.push(13, bad);
  waiter.push(14, good);
  dev.complete(13);
  dev.complete(14);
  auto fut = bad_status.get_future();
  ASSERT_EQ(fut.wait_for(5s), std::future_status::ready) << "a failed event must not hang";
  auto err = fut.get();
  EXPECT_TRUE(is(err, lserr::event_failed));
  EXPECT_NE(message_of(err).find("fake fault"), std::string::npos) << describe(err);
  ASSERT_TRUE(wait_until([&] { return good->done(); }));
  std::lock_guard<std::mutex> guard{dev.mtx};
  EXPECT_EQ(dev.released.size(), 2u);
}

TEST(EventWaiterTest, DestructionWaitsForEveryQueuedEvent) {
  fake_device dev;
  std::vector<std::shared_ptr<host_event>> evs;
  std::thread opener;
  {
    event_waiter waiter{[&dev](event_waiter::handle h) { return dev.wait(h); },
                        [&dev](event_waiter::handle h) { dev.release(h); }};
    for (event_waiter::handle h = 1; h <= 3; ++h) {
      evs.push_back(std::make_shared<host_event>());
      waiter.push(h, evs.back());
    }
    opener = std::thread{[&] {
      std::this_thread::sleep_for(20ms);
      for (event_waiter::handle h = 1; h <= 3; ++h)
        dev.complete(h);
    }};
  } // joins after all three completed
  opener.join();
  for (auto& ev : evs)
    EXPECT_TRUE(ev->done());
  EXPECT_EQ(dev.released.size(), 3u);
}
