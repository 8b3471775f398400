// The notifier: one event and one message per layer, nothing else.
#define CAF_SUITE notifier
#include "fixture.hpp"

#include <future>
#include <thread>

#include "actors/notifier.hpp"

using namespace layerstream;
using namespace layerstream::testing;

CAF_TEST_FIXTURE_SCOPE(notifier_tests, actor_fixture)

CAF_TEST(the notifier records one event and sends one layer_end to the manager) {
  auto mgr = sys.spawn(manager_impl, transport, manager_config{});
  run();
  // Two batches in flight: two contexts.
  self->request(mgr, caf::infinite, setup{{make_request(1, 2, 3)}});
  self->request(mgr, caf::infinite, setup{{make_request(2, 2, 3)}});
  run();
  layer_notifier notify{mgr, events};
  notify(2);
  CAF_CHECK_EQUAL(events.count(), 1u);
  expect((layer_end), from(_).to(mgr).with(layer_end{2, events.recorded(0)}));
  disallow((layer_end), from(_).to(mgr));
  // The manager, not the notifier, fans out: both contexts wait on the one event.
  sched.run();
  CAF_CHECK_EQUAL(events.recorded(0)->waiting(), 2u);
}

CAF_TEST_FIXTURE_SCOPE_END()

// The offloaded notifier runs with real threads (the forward thread, its
// drain thread, CAF's workers), so these tests use a real actor system; every
// wait has a deadline.
namespace {

/// Complete events, counted.
struct counting_event_source final : event_source {
  completed_event_source inner;
  size_t recorded = 0;
  event_ptr record(stream_handle stream) override {
    ++recorded;
    return inner.record(stream);
  }
  size_t count() const { return recorded; }
};

struct offload_fixture {
  test_config cfg;
  caf::actor_system sys{cfg};
  caf::scoped_actor self{sys};
  std::shared_ptr<transport_script> script = std::make_shared<transport_script>();
  submit_sink transport = caf::actor_cast<submit_sink>(sys.spawn(scripted_transport, script));
  manager_actor mgr = sys.spawn(manager_impl, transport, manager_config{});
  counting_event_source events;

  void set_up(std::vector<request_transfer> reqs) {
    self->request(mgr, std::chrono::seconds(10), setup{std::move(reqs)})
        .receive([](const setup_result& res) { CAF_REQUIRE(res.refused.empty()); },
                 [](caf::error& err) { CAF_FAIL(describe(err)); });
  }

  /// Waits (10 s at most) until every layer_end notified so far was sent.
  void wait_sent(layer_notifier& notify) {
    auto sent = std::make_shared<std::promise<void>>();
    auto future = sent->get_future();
    notify.then([sent] { sent->set_value(); });
    CAF_REQUIRE(future.wait_for(std::chrono::seconds(10)) == std::future_status::ready);
  }

  finish_result finish_room(room_id room) {
    finish_result out;
    self->request(mgr, std::chrono::seconds(10), finish{room})
        .receive([&](finish_result& res) { out = res; },
                 [](caf::error& err) { CAF_FAIL(describe(err)); });
    return out;
  }

  /// Finishes `room` and checks it completed with all `layers` sent.
  void expect_all_layers_sent(room_id room, uint32_t layers) {
    auto res = finish_room(room);
    CAF_CHECK(!res.status);
    CAF_CHECK_EQUAL(res.layers_sent, layers);
  }

  ~offload_fixture() {
    self->send_exit(mgr, caf::exit_reason::user_shutdown);
    self->send_exit(caf::actor_cast<caf::actor>(transport), caf::exit_reason::user_shutdown);
  }
};

} // namespace

CAF_TEST_FIXTURE_SCOPE(notifier_offload_tests, offload_fixture)

CAF_TEST(an offloaded notifier delivers every layer before its continuation) {
  constexpr uint32_t layers = 40;
  auto a = make_request(1, 3, layers);
  auto b = make_request(2, 5, layers, 50, 500);
  set_up({a, b});
  notifier_options opts;
  opts.poll = std::chrono::microseconds(50);
  layer_notifier notify{mgr, events, opts};
  for (uint32_t l = 0; l < layers; ++l)
    notify(l);
  // A finish sent from the continuation must find every layer handed over.
  wait_sent(notify);
  for (auto& req : {a, b}) {
    auto res = finish_room(req.room);
    CAF_CHECK(!res.status);
    CAF_CHECK_EQUAL(res.layers_sent, layers);
    uint64_t bytes = 0;
    for (uint32_t l = 0; l < layers; ++l)
      bytes += expected_bytes(req, l);
    CAF_CHECK_EQUAL(res.bytes, bytes);
  }
  CAF_CHECK_EQUAL(events.count(), layers);                   // one event per layer, not per room
  CAF_CHECK_EQUAL(notify.counters().offloaded, layers + 1u); // + the continuation
  CAF_CHECK_EQUAL(notify.counters().overflowed, 0u);
}

CAF_TEST(a full ring falls back to direct sends and loses no layer) {
  constexpr uint32_t layers = 64;
  auto a = make_request(1, 2, layers);
  set_up({a});
  notifier_options opts;
  opts.poll = std::chrono::milliseconds(20); // the drain thread lags far behind
  opts.capacity = 2;
  layer_notifier notify{mgr, events, opts};
  for (uint32_t l = 0; l < layers; ++l)
    notify(l);
  CAF_CHECK_GREATER(notify.counters().overflowed, 0u);
  wait_sent(notify);
  expect_all_layers_sent(a.room, layers);
}

CAF_TEST(an idle drain thread sleeps and the next notify wakes it) {
  auto a = make_request(1, 2, 2);
  set_up({a});
  notifier_options opts;
  opts.poll = std::chrono::microseconds(50);
  opts.idle_sleep = std::chrono::milliseconds(5);
  layer_notifier notify{mgr, events, opts};
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (!notify.counters().sleeping && std::chrono::steady_clock::now() < deadline)
    std::this_thread::yield();
  CAF_REQUIRE(notify.counters().sleeping);
  notify(0);
  notify(1);
  wait_sent(notify);
  // Woken at most once per notify that found it asleep, and never missed:
  // both layers (and the continuation) arrived well inside the idle wait.
  CAF_CHECK_GREATER_OR_EQUAL(notify.counters().wakeups, 1u);
  expect_all_layers_sent(a.room, 2);
}

namespace {

/// Waits (10 s at most) until `pred(counters)` holds; false if it never did.
template <class Pred>
bool wait_for_counters(const layer_notifier& notify, Pred pred) {
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (!pred(notify.counters())) {
    if (std::chrono::steady_clock::now() >= deadline)
      return false;
    std::this_thread::yield();
  }
  return true;
}

/// A drain thread polling every 50 us that spins for the last of `layers`
/// layers for at most `limit`.
notifier_options spin_options(std::chrono::microseconds limit, uint32_t layers = 4) {
  notifier_options opts;
  opts.poll = std::chrono::microseconds(50);
  opts.layers = layers;
  opts.last_layer_spin = limit;
  return opts;
}

/// Pushes layers 0 and 1, then layer 2 `gap` after layer 1; checks that no
/// spin started in the next 100 ms, waits for one, and returns how long
/// after layer 2's push it was seen.
std::chrono::steady_clock::duration spin_start_after_gap(layer_notifier& notify,
                                                         std::chrono::milliseconds gap) {
  notify(0);
  notify(1);
  std::this_thread::sleep_for(gap);
  const auto pushed = std::chrono::steady_clock::now();
  notify(2);
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  CAF_CHECK(!notify.counters().spinning);
  CAF_CHECK_EQUAL(notify.counters().spins, 0u);
  CAF_REQUIRE(wait_for_counters(notify, [](const notifier_counters& c) { return c.spins == 1; }));
  return std::chrono::steady_clock::now() - pushed;
}

} // namespace

CAF_TEST(the drain thread spins only while it waits for the last layer) {
  constexpr uint32_t layers = 4;
  auto a = make_request(1, 2, layers);
  set_up({a});
  // A limit longer than any wait below.
  layer_notifier notify{mgr, events, spin_options(std::chrono::seconds(30))};
  notify(0);
  notify(1);
  wait_sent(notify);
  CAF_CHECK_EQUAL(notify.counters().spins, 0u); // no spin before layers - 2
  notify(2);
  CAF_REQUIRE(wait_for_counters(notify, [](const notifier_counters& c) { return c.spinning; }));
  CAF_CHECK_EQUAL(notify.counters().spins, 1u);
  // Still spinning a while later: only the last layer (or the 30 s) ends it.
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  CAF_CHECK(notify.counters().spinning);
  notify(3);
  CAF_REQUIRE(wait_for_counters(notify, [](const notifier_counters& c) { return !c.spinning; }));
  wait_sent(notify);
  auto c = notify.counters();
  CAF_CHECK_EQUAL(c.spins, 1u);
  CAF_CHECK_EQUAL(c.spin_timeouts, 0u);
  expect_all_layers_sent(a.room, layers);
}

CAF_TEST(the spin starts a quarter layer gap before the last layer is due) {
  constexpr uint32_t layers = 4;
  auto a = make_request(1, 2, layers);
  set_up({a});
  layer_notifier notify{mgr, events, spin_options(std::chrono::seconds(30))};
  // A 400 ms gap between the pushes of layers 1 and 2: the drain thread
  // expects layer 3 400 ms after layer 2's push and spins from 300 ms after
  // it (timed by the pushes, not by when it sent them).
  CAF_CHECK_GREATER_OR_EQUAL(spin_start_after_gap(notify, std::chrono::milliseconds(400)),
                             std::chrono::milliseconds(300));
  notify(3);
  wait_sent(notify);
  auto c = notify.counters();
  CAF_CHECK_EQUAL(c.spins, 1u);
  CAF_CHECK_EQUAL(c.spin_timeouts, 0u);
  CAF_CHECK(!c.spinning);
  expect_all_layers_sent(a.room, layers);
}

CAF_TEST(a last layer that does not come ends the spin at its limit) {
  constexpr uint32_t layers = 4;
  auto a = make_request(1, 2, layers);
  set_up({a});
  layer_notifier notify{mgr, events, spin_options(std::chrono::milliseconds(20))};
  for (uint32_t l = 0; l + 1 < layers; ++l)
    notify(l);
  // The flag goes down before the count goes up.
  CAF_REQUIRE(
      wait_for_counters(notify, [](const notifier_counters& c) { return c.spin_timeouts == 1; }));
  auto c = notify.counters();
  CAF_CHECK(!c.spinning);
  CAF_CHECK_EQUAL(c.spins, 1u);
  // The late last layer still goes through, from a drain thread that polls.
  notify(layers - 1);
  wait_sent(notify);
  CAF_CHECK_EQUAL(notify.counters().spins, 1u);
  expect_all_layers_sent(a.room, layers);
}

CAF_TEST(a layer gap longer than the spin limit still times the spin) {
  constexpr uint32_t layers = 4;
  auto a = make_request(1, 2, layers);
  set_up({a});
  layer_notifier notify{mgr, events, spin_options(std::chrono::milliseconds(50))};
  // Layers 400 ms apart, a 50 ms limit: the spin starts half the limit
  // before the last layer is due (375 ms after layer 2's push), not at once.
  CAF_CHECK_GREATER_OR_EQUAL(spin_start_after_gap(notify, std::chrono::milliseconds(400)),
                             std::chrono::milliseconds(375));
  notify(3);
  wait_sent(notify);
  expect_all_layers_sent(a.room, layers);
}

CAF_TEST(without a layer count or a gap or a spin limit the drain thread never spins) {
  // No room is set up: the manager drops these layer_ends.
  notifier_options unknown_layers = spin_options(std::chrono::seconds(30), 0);
  unknown_layers.idle_sleep = std::chrono::milliseconds(5);
  notifier_options no_gap = unknown_layers; // layer 0 is the second-to-last
  no_gap.layers = 2;
  notifier_options no_spin = unknown_layers;
  no_spin.layers = 4;
  no_spin.last_layer_spin = std::chrono::microseconds(0);
  for (const auto& opts : {unknown_layers, no_gap, no_spin}) {
    layer_notifier notify{mgr, events, opts};
    // Every layer but the last (three when the count is unknown).
    const uint32_t pushes = opts.layers == 0 ? 3 : opts.layers - 1;
    for (uint32_t l = 0; l < pushes; ++l)
      notify(l);
    // Long enough for the drain thread to have sent them and started a
    // spin it should not start (a continuation now would end one).
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    CAF_CHECK_EQUAL(notify.counters().spins, 0u);
    CAF_CHECK(!notify.counters().spinning);
    // Nothing armed either: an armed spin keeps the drain thread polling.
    CAF_CHECK(wait_for_counters(notify, [](const notifier_counters& c) { return c.sleeping; }));
    wait_sent(notify);
  }
  // Layer 1 never came through the ring: no gap to time layer 2's spin by.
  notifier_options skipped = unknown_layers;
  skipped.layers = 4;
  layer_notifier notify{mgr, events, skipped};
  notify(0);
  notify(2);
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  CAF_CHECK_EQUAL(notify.counters().spins, 0u);
  CAF_CHECK(wait_for_counters(notify, [](const notifier_counters& c) { return c.sleeping; }));
}

CAF_TEST_FIXTURE_SCOPE_END()
