#include "model/cpu_forward.hpp"

#include <sys/prctl.h>

#include <algorithm>
#include <string>
#include <thread>

#include "common/error.hpp"

namespace layerstream {

void spin_until(std::chrono::steady_clock::time_point until) {
  while (std::chrono::steady_clock::now() < until) {
    // busy
  }
}

void spin_for(std::chrono::microseconds d) {
  spin_until(std::chrono::steady_clock::now() + d);
}

caf::expected<compute_wait> parse_compute_wait(const std::string& text) {
  if (text == "spin")
    return compute_wait::spin;
  if (text == "sleep")
    return compute_wait::sleep;
  return make_error(lserr::bad_input,
                    "model.compute_wait: \"" + text + "\" is neither \"spin\" nor \"sleep\"");
}

namespace {

/// Returns at `until` (true): busy all the way, or asleep to `margin` before
/// it. Returns early (false) once `stopped` says so: a sleep looks every
/// 10 ms, a spin on every turn.
template <class Stopped>
bool pass_compute(std::chrono::steady_clock::time_point until, compute_wait wait,
                  std::chrono::microseconds margin, Stopped stopped) {
  if (wait == compute_wait::sleep) {
    const auto wake = until - margin;
    for (auto now = std::chrono::steady_clock::now(); now < wake;
         now = std::chrono::steady_clock::now()) {
      if (stopped())
        return false;
      std::this_thread::sleep_until(std::min(wake, now + std::chrono::milliseconds(10)));
    }
  }
  while (std::chrono::steady_clock::now() < until)
    if (stopped())
      return false;
  return true;
}

} // namespace

cpu_forward::cpu_forward(kv_pool& pool, std::chrono::microseconds layer_compute, compute_wait wait,
                         notify_fn notify, done_fn done)
    : forward_thread(std::move(notify), std::move(done)), pool_(pool),
      layer_compute_(layer_compute), wait_(wait) {
  start();
}

cpu_forward::~cpu_forward() {
  stop();
}

void cpu_forward::execute(const forward_batch& batch) {
  // The kernel's default 50 us of timer slack would make every layer's
  // sleep overshoot its margin (this thread only; harmless if refused).
  if (wait_ == compute_wait::sleep)
    ::prctl(PR_SET_TIMERSLACK, 1000UL, 0UL, 0UL, 0UL);
  forward_timing timing;
  timing.start = std::chrono::steady_clock::now();
  timing.layer_written.reserve(pool_.layers());
  timing.notify_ns.reserve(pool_.layers());
  for (uint32_t layer = 0; layer < pool_.layers(); ++layer) {
    auto t0 = steady_ns();
    if (!pass_compute(std::chrono::steady_clock::now() + layer_compute_, wait_, sleep_margin,
                      [this] { return stop_requested(); })) {
      // No notify: the layer's contexts never see it; the batch fails.
      timing.status =
          make_error(lserr::cancelled, "forward stopped in layer " + std::to_string(layer) +
                                           " of " + std::to_string(pool_.layers()));
      break;
    }
    for (auto& item : batch.items)
      pool_.write_layer(item.room, layer, item.pages, item.first_token, item.last_token,
                        item.prompt_tokens);
    layer_written(timing, layer, t0, "compute");
  }
  timing.end = std::chrono::steady_clock::now();
  finish(batch.id, std::move(timing));
}

} // namespace layerstream
