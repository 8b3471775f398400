// The cpu device's forward: every layer lasts at least its compute time and
// writes its KV, whether the thread spins through it or sleeps
// (model.compute_wait); a sleeping forward leaves its core to other threads.
#include <gtest/gtest.h>

#include <sys/resource.h>

#include <chrono>
#include <future>
#include <optional>
#include <string>
#include <thread>

#include "model/prefill_device.hpp"

using namespace layerstream;
using namespace std::chrono_literals;

namespace {

/// CPU time of the whole process so far (every thread).
std::chrono::microseconds process_cpu() {
  rusage ru{};
  getrusage(RUSAGE_SELF, &ru);
  return std::chrono::seconds{ru.ru_utime.tv_sec + ru.ru_stime.tv_sec} +
         std::chrono::microseconds{ru.ru_utime.tv_usec + ru.ru_stime.tv_usec};
}

struct forward_run {
  forward_timing timing;
  std::vector<uint32_t> notified;
  std::chrono::microseconds cpu{0};
  uint64_t bad_rows = 0;
};

/// The tests' model: 6 layers, 2 heads of 4 elements, 4-token pages,
/// compute passed by `wait`.
model_config six_layer_model(const std::string& wait) {
  model_config model;
  model.layers = 6;
  model.kv_heads = 2;
  model.head_dim = 4;
  model.page_size = 4;
  model.compute_wait = wait;
  return model;
}

/// One batch (room 9, 10 tokens on pages 3, 0, 5) of 6 layers of `compute`
/// each, passed by `wait`.
forward_run run_one(const std::string& wait, std::chrono::microseconds compute) {
  const model_config model = six_layer_model(wait);
  forward_run out;
  auto dev = cpu_device::create(model, 8);
  EXPECT_TRUE(dev) << describe(dev.error());
  if (!dev)
    return out;
  std::promise<forward_timing> done;
  auto fwd = (*dev)->make_forward(
      compute, [&out](uint32_t layer) { out.notified.push_back(layer); },
      [&done](uint64_t, forward_timing t) { done.set_value(std::move(t)); });
  EXPECT_TRUE(fwd) << describe(fwd.error());
  if (!fwd)
    return out;
  const std::vector<uint64_t> pages{3, 0, 5};
  const auto cpu0 = process_cpu();
  (*fwd)->run(forward_batch{1, {forward_item{9, pages, 0, 10, 10}}});
  auto got = done.get_future();
  if (got.wait_for(30s) != std::future_status::ready) {
    ADD_FAILURE() << "the forward did not end in 30 s";
    return out; // stop() in the forward's destructor cuts the batch short
  }
  out.timing = got.get();
  out.cpu = process_cpu() - cpu0;
  (*fwd)->stop();
  out.bad_rows = (*dev)->pool().check_room(9, pages, 0, 10, 10);
  return out;
}

void expect_layers_on_time(const forward_run& run, std::chrono::microseconds compute) {
  EXPECT_FALSE(run.timing.status);
  EXPECT_EQ(run.notified, (std::vector<uint32_t>{0, 1, 2, 3, 4, 5}));
  EXPECT_EQ(run.bad_rows, 0u);
  ASSERT_EQ(run.timing.layer_written.size(), 6u);
  // No layer ends early: each KV write comes a whole compute after the
  // previous one (the first: after the forward's start).
  auto prev = run.timing.start;
  for (auto t : run.timing.layer_written) {
    EXPECT_GE(t - prev, compute);
    prev = t;
  }
}

} // namespace

TEST(CpuForward, ASpinningForwardWritesEveryLayerAfterItsCompute) {
  auto run = run_one("spin", 5ms);
  expect_layers_on_time(run, 5ms);
}

TEST(CpuForward, ASleepingForwardWritesEveryLayerAfterItsComputeAndLeavesItsCore) {
  auto run = run_one("sleep", 20ms);
  expect_layers_on_time(run, 20ms);
  // 120 ms of compute, of which the thread spins 150 us a layer (~1 ms)
  // plus the KV writes: far under half of it. A spinning forward's CPU
  // time is its whole wall time, whenever it runs.
  const auto wall =
      std::chrono::duration_cast<std::chrono::microseconds>(run.timing.end - run.timing.start);
  EXPECT_LT(run.cpu, wall / 2) << "cpu " << run.cpu.count() << " us over " << wall.count() << " us";
}

namespace {

/// A forward of 6 layers of 60 s each, passed by `wait`, stopped `after`
/// its batch was queued: how long stop() took, and the batch's timing if
/// it had started (a batch still queued at stop() is dropped unanswered).
struct stopped_run {
  std::chrono::steady_clock::duration stop_took{};
  std::optional<forward_timing> timing;
};

stopped_run stop_long_forward(const std::string& wait, std::chrono::milliseconds after) {
  const model_config model = six_layer_model(wait);
  stopped_run out;
  auto dev = cpu_device::create(model, 8);
  EXPECT_TRUE(dev) << describe(dev.error());
  if (!dev)
    return out;
  std::promise<forward_timing> done;
  auto fwd = (*dev)->make_forward(
      60s, [](uint32_t) { ADD_FAILURE() << "a layer cut short was reported"; },
      [&done](uint64_t, forward_timing t) { done.set_value(std::move(t)); });
  EXPECT_TRUE(fwd) << describe(fwd.error());
  if (!fwd)
    return out;
  (*fwd)->run(forward_batch{1, {forward_item{9, {3, 0, 5}, 0, 10, 10}}});
  std::this_thread::sleep_for(after);
  const auto t0 = std::chrono::steady_clock::now();
  (*fwd)->stop();
  out.stop_took = std::chrono::steady_clock::now() - t0;
  auto got = done.get_future();
  if (got.wait_for(0s) == std::future_status::ready)
    out.timing = got.get();
  return out;
}

} // namespace

TEST(CpuForward, StopEndsABatchInTheMiddleOfALongLayer) {
  // stop() runs in the scheduler's exit: it must not wait out a long
  // compute (here 6 minutes). The batch ends with a reason, and the layer
  // cut short is not reported.
  for (const std::string wait : {"spin", "sleep"}) {
    SCOPED_TRACE(wait);
    stopped_run run;
    // Stopped before the forward thread took the batch, it is dropped:
    // wait longer until it was taken.
    for (auto after : {50ms, 250ms, 1000ms, 3000ms}) {
      run = stop_long_forward(wait, after);
      EXPECT_LT(run.stop_took, 10s) << "stop() waited for the batch's compute";
      if (run.timing)
        break;
    }
    ASSERT_TRUE(run.timing) << "the forward thread never took the batch within 3 s";
    EXPECT_TRUE(is(run.timing->status, lserr::cancelled)) << describe(run.timing->status);
    EXPECT_NE(describe(run.timing->status).find("forward stopped in layer 0 of 6"),
              std::string::npos)
        << describe(run.timing->status);
    EXPECT_TRUE(run.timing->layer_written.empty());
  }
}

TEST(CpuForward, AnUnknownComputeWaitIsRefused) {
  model_config model;
  model.compute_wait = "nap";
  auto dev = cpu_device::create(model, 8);
  ASSERT_FALSE(dev);
  EXPECT_TRUE(is(dev.error(), lserr::bad_input));
  EXPECT_NE(describe(dev.error()).find("\"nap\" is neither \"spin\" nor \"sleep\""),
            std::string::npos)
      << describe(dev.error());
}
