// cuda_event_source on a real device (skips without one).
#include "device/cuda_event.hpp"

#include <atomic>
#include <chrono>
#include <future>
#include <memory>
#include <thread>

#include <gtest/gtest.h>

#include "cuda_skip.hpp"
#include "device/host_event.hpp"
#include "test_kernels.hpp"
#include "wait_for_event.hpp"

using namespace layerstream;
using namespace std::chrono_literals;

using test::wait_for;

TEST(CudaEventSource, EventsComeFromThePoolAndGoBackToIt) {
  SKIP_WITHOUT_CUDA();
  auto src = cuda_event_source::create(4);
  ASSERT_TRUE(src) << describe(src.error());
  auto stream = cuda_stream::create();
  ASSERT_TRUE(stream) << describe(stream.error());
  for (int i = 0; i < 100; ++i) {
    auto ev = (*src)->record(stream->handle());
    ASSERT_FALSE(wait_for(ev));
  }
  for (int i = 0; i < 50; ++i) {
    std::vector<event_ptr> batch;
    for (int j = 0; j < 4; ++j)
      batch.push_back((*src)->record(stream->handle()));
    for (auto& ev : batch)
      ASSERT_FALSE(wait_for(ev));
  }
  const auto deadline = std::chrono::steady_clock::now() + 5s;
  while ((*src)->pending() > 0 && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(1ms);
  auto c = (*src)->counters();
  EXPECT_EQ(c.recorded, 300u);
  EXPECT_EQ(c.failed, 0u);
  EXPECT_EQ(c.created, 4u) << "the pool grew although at most 4 events were in flight";
  EXPECT_EQ(c.free, 4u) << "events did not return to the pool";
}

TEST(CudaEventSource, RecordDoesNotWaitAndTheCallbackRunsOnceAfterTheStreamWork) {
  SKIP_WITHOUT_CUDA();
  auto src = cuda_event_source::create(8);
  ASSERT_TRUE(src) << describe(src.error());
  auto stream = cuda_stream::create();
  ASSERT_TRUE(stream) << describe(stream.error());
  ASSERT_EQ(gpu_testing::launch_spin(200, stream->handle()), 0);
  const auto t0 = std::chrono::steady_clock::now();
  auto ev = (*src)->record(stream->handle());
  const auto record_time = std::chrono::steady_clock::now() - t0;
  EXPECT_LT(record_time, 50ms) << "record() waited for the device";
  auto host = std::dynamic_pointer_cast<host_event>(ev);
  ASSERT_NE(host, nullptr);
  EXPECT_FALSE(host->done()) << "complete before a 200 ms kernel ahead of it finished";
  // Shared, not on this frame: after a timed-out wait the callback may
  // still come, once this test has returned.
  auto calls = std::make_shared<std::atomic<int>>(0);
  auto ran = std::make_shared<std::promise<void>>();
  auto ran_future = ran->get_future();
  ev->on_complete([calls, ran](const caf::error& err) {
    EXPECT_FALSE(err) << describe(err);
    if (++*calls == 1)
      ran->set_value();
  });
  ASSERT_EQ(ran_future.wait_for(10s), std::future_status::ready);
  std::this_thread::sleep_for(20ms);
  EXPECT_EQ(calls->load(), 1);
  EXPECT_GE(std::chrono::steady_clock::now() - t0, 150ms);
  int late = 0;
  ev->on_complete([&](const caf::error&) { ++late; }); // already complete: at once
  EXPECT_EQ(late, 1);
}

TEST(CudaEventSource, AnExhaustedPoolGrowsInsteadOfBlocking) {
  SKIP_WITHOUT_CUDA();
  auto src = cuda_event_source::create(2);
  ASSERT_TRUE(src) << describe(src.error());
  auto stream = cuda_stream::create();
  ASSERT_TRUE(stream) << describe(stream.error());
  ASSERT_EQ(gpu_testing::launch_spin(100, stream->handle()), 0);
  std::vector<event_ptr> evs;
  for (int i = 0; i < 5; ++i)
    evs.push_back((*src)->record(stream->handle()));
  for (auto& ev : evs)
    EXPECT_FALSE(wait_for(ev));
  EXPECT_EQ((*src)->counters().created, 5u);
}
