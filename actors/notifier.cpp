#include "actors/notifier.hpp"

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <thread>

#include "common/spsc_ring.hpp"
#include <caf/send.hpp>

namespace layerstream {

namespace {

/// One ring slot: a layer_end to send, or a continuation to run in order.
/// One cache line each (64 bytes with libstdc++), so a push dirties one
/// line the drain thread reads.
struct alignas(64) slot {
  layer_end msg;
  std::function<void()> then;
  /// When the forward thread pushed a layer_end: the layer gaps the
  /// last-layer spin is timed by, free of the drain thread's own lateness.
  std::chrono::steady_clock::time_point pushed{};
};

} // namespace

class layer_notifier::drain {
 public:
  drain(manager_actor manager, notifier_options opts)
      : manager_(std::move(manager)), opts_(opts), ring_(opts.capacity),
        thread_([this] { loop(); }) {
    // nop
  }

  ~drain() {
    stopping_.store(true);
    wake();
    thread_.join();
  }

  drain(const drain&) = delete;
  drain& operator=(const drain&) = delete;

  /// Producer side (the forward thread). False when the ring is full.
  /// Moves `s` in, or leaves it as it was when the ring is full.
  bool push(slot& s) {
    if (!ring_.try_push(s))
      return false;
    // No fence between the ring's (release) head store and this load: a
    // fence costs the forward thread ~1 us (it waits for the lines to come
    // over from the drain thread's core). The price: a push that races the
    // drain thread's falling asleep may read "awake" while the drain thread
    // reads "empty". The drain thread never sleeps longer than idle_recheck,
    // so such a push waits at most that long; it is never lost.
    if (sleeping_.load(std::memory_order_relaxed)) {
      bump(wakeups_);
      wake();
    }
    return true;
  }

  notifier_counters counters() const {
    // In this order, against the drain thread's (spins_ up before the flag
    // goes up; the flag down before spin_timeouts_ goes up): a snapshot that
    // shows a timeout shows the flag down, one that shows the flag up shows
    // the spin counted.
    const uint64_t timeouts = spin_timeouts_.load();
    const bool spinning = spinning_.load();
    const uint64_t spins = spins_.load();
    return {ring_.pushed(), overflowed_.load(), wakeups_.load(), sleeping_.load(),
            spins,          timeouts,           spinning};
  }

  void count_overflow() { bump(overflowed_); }

 private:
  /// Each counter has a single writer (the forward thread, or the drain
  /// thread for its spin counters): a plain store, no locked add.
  static void bump(std::atomic<uint64_t>& n) {
    n.store(n.load(std::memory_order_relaxed) + 1, std::memory_order_release);
  }

  void wake() {
    std::lock_guard<std::mutex> guard{mtx_};
    cv_.notify_one();
  }

  /// Sends everything queued; true if there was anything.
  bool send_all() {
    bool any = false;
    slot s;
    while (ring_.try_pop(s)) {
      any = true;
      // Any slot ends a spin; the second-to-last layer arms one.
      end_spin(false);
      if (s.then) {
        s.then();
        continue;
      }
      const uint32_t layer = s.msg.layer;
      caf::anon_send(manager_, std::move(s.msg));
      // The gap is known only if the layer before came through the ring
      // just before this one (not from an earlier forward, not sent directly
      // because the ring was full).
      if (layer + 2 == opts_.layers && layer > 0 && last_layer_ == layer - 1 &&
          opts_.last_layer_spin.count() > 0)
        arm_spin(s.pushed, s.pushed - last_layer_pushed_);
      last_layer_ = layer;
      last_layer_pushed_ = s.pushed;
    }
    return any;
  }

  // Drain thread only (the counters are atomics for readers elsewhere).

  /// The last layer should come one layer gap (`gap`, between the forward
  /// thread's pushes of the two layers before it) after `pushed`, when it
  /// pushed the layer before it. The spin starts a quarter of that gap (at
  /// most half the spin limit) before then, not at once: until then the
  /// drain thread polls as usual and leaves the cores to the transfer of the
  /// layers before (with many rooms, a spin over the whole gap slowed that
  /// transfer). With slow layers the window then straddles the due time, so
  /// a last layer a little late still finds the spin.
  void arm_spin(std::chrono::steady_clock::time_point pushed,
                std::chrono::steady_clock::duration gap) {
    const std::chrono::steady_clock::duration limit = opts_.last_layer_spin;
    spin_from_ = pushed + gap - std::min(gap / 4, limit / 2);
    spin_armed_ = true;
  }

  /// True while the drain thread should yield, not sleep, for a last layer.
  bool spin_now() {
    if (!spin_armed_)
      return false;
    const auto now = std::chrono::steady_clock::now();
    if (now < spin_from_)
      return false;
    if (!spinning_.load(std::memory_order_relaxed)) {
      spin_until_ = now + opts_.last_layer_spin;
      bump(spins_); // before the flag: a reader that sees it sees the count
      spinning_.store(true, std::memory_order_release);
    }
    if (now < spin_until_)
      return true;
    end_spin(true);
    return false;
  }

  void end_spin(bool timed_out) {
    if (!spin_armed_)
      return; // no store: this runs for every slot
    spin_armed_ = false;
    if (!spinning_.load(std::memory_order_relaxed))
      return;
    spinning_.store(false, std::memory_order_release);
    if (timed_out)
      bump(spin_timeouts_); // after the flag: a reader that sees it sees the flag down
  }

  void loop() {
    auto last_activity = std::chrono::steady_clock::now();
    for (;;) {
      if (send_all()) {
        // Awake and working: a push that came after a recheck found the ring
        // empty is drained here, so say so (or every push meanwhile would
        // take the mutex to wake a thread that is not asleep).
        if (sleeping_.load(std::memory_order_relaxed))
          sleeping_.store(false, std::memory_order_relaxed);
        last_activity = std::chrono::steady_clock::now();
        continue;
      }
      if (stopping_.load()) {
        send_all(); // whatever was pushed before the stop
        return;
      }
      if (spin_now()) {
        // Not a pure spin: the other threads of the transfer share these
        // cores, and yield lets any of them run first.
        std::this_thread::yield();
        continue;
      }
      // An armed spin keeps the drain thread polling, not asleep.
      if (spin_armed_ || std::chrono::steady_clock::now() - last_activity < opts_.idle_sleep) {
        std::this_thread::sleep_for(opts_.poll);
        continue;
      }
      sleeping_.store(true, std::memory_order_seq_cst);
      if (ring_.empty() && !stopping_.load()) {
        std::unique_lock<std::mutex> guard{mtx_};
        // Bounded by idle_recheck: a push that raced this (see push) is
        // found at the next recheck at the latest.
        cv_.wait_for(guard, opts_.idle_recheck,
                     [this] { return !ring_.empty() || stopping_.load(); });
      }
      if (ring_.empty() && !stopping_.load())
        continue; // still idle: look again, still asleep in the counters
      sleeping_.store(false, std::memory_order_relaxed);
      last_activity = std::chrono::steady_clock::now();
    }
  }

  manager_actor manager_;
  notifier_options opts_;
  spsc_ring<slot> ring_;
  // Read by the forward thread on every push, written by the drain thread
  // only when it falls asleep or wakes.
  alignas(64) std::atomic<bool> sleeping_{false};
  std::atomic<bool> stopping_{false};
  // The last-layer spin: drain thread only, written at most three times
  // per forward (arm, start, end), so it may share the flags' line.
  std::atomic<uint64_t> spins_{0};
  std::atomic<uint64_t> spin_timeouts_{0};
  std::chrono::steady_clock::time_point spin_from_{};
  std::chrono::steady_clock::time_point spin_until_{};
  std::atomic<bool> spinning_{false};
  bool spin_armed_ = false; // a last layer is due: spin from spin_from_
  // Written by the forward thread only, and rarely (a full ring, a wake-up):
  // on a line away from the flags the drain thread polls. The pushes are
  // counted by the ring's own index, at no cost per push.
  alignas(64) std::atomic<uint64_t> overflowed_{0};
  std::atomic<uint64_t> wakeups_{0};
  // Drain thread only, written for every layer sent: away from the flags
  // the forward thread reads on every push. The layer sent last (none yet:
  // the largest value) and its push time.
  std::chrono::steady_clock::time_point last_layer_pushed_{};
  uint32_t last_layer_ = UINT32_MAX;
  std::mutex mtx_;
  std::condition_variable cv_;
  std::thread thread_; // last: starts after everything it uses
};

layer_notifier::layer_notifier(manager_actor manager, event_source& events, notifier_options opts,
                               stream_handle stream)
    : manager_(manager), events_(events), stream_(stream) {
  if (opts.poll.count() > 0)
    drain_ = std::make_shared<drain>(std::move(manager), opts);
}

void layer_notifier::operator()(uint32_t layer) {
  slot s{layer_end{layer, events_.record(stream_)}, {}, {}};
  if (drain_) {
    // The push time serves the drain thread's last-layer spin only (one
    // vDSO clock read, tens of ns).
    s.pushed = std::chrono::steady_clock::now();
    if (drain_->push(s)) // untouched when it fails
      return;
    drain_->count_overflow();
  }
  caf::anon_send(manager_, std::move(s.msg));
}

void layer_notifier::then(std::function<void()> fn) {
  if (drain_) {
    slot s{{}, std::move(fn), {}};
    if (drain_->push(s))
      return;
    // Full ring: the continuation must not overtake queued layer_ends, and
    // this is the end of a batch (not the per-layer hot path), so wait for
    // room. Bounded: the drain thread empties the ring every poll interval.
    drain_->count_overflow();
    while (!drain_->push(s))
      std::this_thread::yield();
    return;
  }
  fn();
}

notifier_counters layer_notifier::counters() const {
  return drain_ ? drain_->counters() : notifier_counters{};
}

} // namespace layerstream
