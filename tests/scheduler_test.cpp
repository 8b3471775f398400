// The prefill scheduler against stand-in manager and transport actors: a
// real scheduler and its forward thread on a real actor system (so real
// threads and wall-clock deadlines of 1-3 s, not the CAF test DSL: the
// forward thread sends from outside the actor system).
// - When one of its requests goes unanswered, the silent actor may have
//   handed writes to the provider, so the room must answer writes_in_flight
//   (decode then keeps its pages, actors/receiver.hpp), never a plain timeout.
// - The exposed tail ends when the last byte was delivered, as the answers
//   say, not when the scheduler heard of it.
// - A forward that does not end fails its rooms at its deadline and the rank
//   refuses requests, with that reason, until it ends.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <functional>
#include <future>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <caf/actor_system.hpp>
#include <caf/actor_system_config.hpp>
#include <caf/scoped_actor.hpp>

#include "actors/scheduler.hpp"
#include "common/log.hpp"
#include "common/trace.hpp"
#include "tests/failing_device.hpp"

using namespace layerstream;
using namespace std::chrono_literals;

namespace {

struct scheduler_test_config : caf::actor_system_config {
  scheduler_test_config() { layerstream::add_message_types(*this); }
};

using deliver_atom = caf::atom_constant<caf::atom("deliver")>;

/// Answers held back, each until its own delayed {deliver_atom, seq}
/// (actor-only).
template <class Answer>
struct held_answers {
  uint64_t next = 0;
  std::map<uint64_t, std::pair<caf::typed_response_promise<Answer>, Answer>> out;

  /// Holds `answer`; returns the seq its deliver_atom must name.
  uint64_t hold(caf::typed_response_promise<Answer> rp, Answer answer) {
    out.emplace(next, std::make_pair(std::move(rp), std::move(answer)));
    return next++;
  }

  void deliver(uint64_t seq) {
    if (auto i = out.find(seq); i != out.end()) {
      i->second.first.deliver(i->second.second);
      out.erase(i);
    }
  }
};

/// What the stand-in manager answers, and the finishes it got.
struct manager_script {
  bool answer_setup = true;
  /// Rooms an answered setup refuses (duplicate_room), as the real manager
  /// refuses an id whose earlier context is still active; only from the
  /// setup numbered `refuse_from_setup` on (counting from 0).
  std::vector<room_id> refuse_setup;
  size_t refuse_from_setup = 0;
  std::atomic<size_t> setups{0};
  std::atomic<bool> answer_finish{false}; // a test may turn it on midway
  /// An answered finish says the room was delivered when the finish came,
  /// and goes out this much later.
  caf::timespan finish_delay{0};
  std::mutex mutex;
  std::vector<room_id> finished;

  bool got_finish(room_id room) {
    std::lock_guard<std::mutex> guard{mutex};
    return std::find(finished.begin(), finished.end(), room) != finished.end();
  }
};

/// get_atom -> ok_atom: a barrier (every message the manager got before it
/// was handled).
using stand_in_manager_actor =
    manager_actor::extend<caf::reacts_to<deliver_atom, uint64_t>,
                          caf::replies_to<caf::get_atom>::with<caf::ok_atom>>;

/// Answers setup (or not) and finish (or not, or late); a silent answer is a
/// response promise dropped undelivered, which the requester sees as a
/// request timeout.
stand_in_manager_actor::behavior_type stand_in_manager(stand_in_manager_actor::pointer self,
                                                       std::shared_ptr<manager_script> script) {
  auto held = std::make_shared<held_answers<finish_result>>();
  return {
      [self, script](const setup& msg) -> caf::result<setup_result> {
        if (!script->answer_setup)
          return self->make_response_promise<setup_result>();
        setup_result res;
        if (script->setups++ < script->refuse_from_setup)
          return res;
        for (const auto& req : msg.batch)
          if (std::count(script->refuse_setup.begin(), script->refuse_setup.end(), req.room) > 0)
            res.refused.push_back(
                {req.room, make_error(lserr::duplicate_room, "still active here (test)")});
        return res;
      },
      [](const layer_end&) {},
      [self, script, held](const finish& msg) -> caf::result<finish_result> {
        {
          std::lock_guard<std::mutex> guard{script->mutex};
          script->finished.push_back(msg.room);
        }
        if (!script->answer_finish)
          return self->make_response_promise<finish_result>();
        finish_result res{msg.room, {}, 2, 0, {}, steady_ns()};
        if (script->finish_delay == caf::timespan{0})
          return res;
        auto rp = self->make_response_promise<finish_result>();
        self->delayed_send(self, script->finish_delay, deliver_atom::value, held->hold(rp, res));
        return rp;
      },
      [held](deliver_atom, uint64_t seq) { held->deliver(seq); },
      [](caf::get_atom) { return caf::ok_atom::value; },
  };
}

using stand_in_transport_actor = transport_actor::extend<caf::reacts_to<deliver_atom, uint64_t>>;

/// Connects every peer. Without `answer_delay` it never answers a submit (a
/// transport stuck on a stalled link); with it, it answers each submit that
/// much later, as delivered when it came plus layer x answer_delay / 2 (a
/// later layer's bytes land later, still before the answer).
stand_in_transport_actor::behavior_type stand_in_transport(stand_in_transport_actor::pointer self,
                                                           caf::timespan answer_delay) {
  auto held = std::make_shared<held_answers<submit_done>>();
  return {
      [self, held, answer_delay](const submit& msg) -> caf::result<submit_done> {
        auto rp = self->make_response_promise<submit_done>();
        if (answer_delay == caf::timespan{0})
          return rp;
        uint64_t bytes = 0;
        for (const auto& b : msg.blocks)
          bytes += b.len;
        const auto landed =
            steady_ns() + msg.layer * std::chrono::nanoseconds{answer_delay / 2}.count();
        auto seq = held->hold(rp, submit_done{msg.room, msg.layer, {}, bytes, landed});
        self->delayed_send(self, answer_delay, deliver_atom::value, seq);
        return rp;
      },
      [held](deliver_atom, uint64_t seq) { held->deliver(seq); },
      [self](const submit_batch&) -> caf::result<submit_batch_done> {
        return self->make_response_promise<submit_batch_done>();
      },
      [](const connect_peer&) { return peer_id{1}; },
  };
}

class SchedulerWithStandIns : public ::testing::Test {
 protected:
  void SetUp() override { log::set_level("off"); } // the failures are expected

  /// Spawns the scheduler over `device` (default: a cpu_device) and asks it
  /// for room 5 (8 tokens, 2 pages); the answer, or a test failure.
  kv_ready ask(bool per_layer, std::unique_ptr<prefill_device> device = nullptr) {
    if (!start(per_layer, std::move(device)))
      return {};
    return ask_again(5);
  }

  /// The model of every test: 2 layers, 4-token pages of 32 bytes a buffer.
  static model_config tiny_model() {
    model_config model;
    model.layers = 2;
    model.kv_heads = 1;
    model.head_dim = 4;
    model.page_size = 4;
    model.layer_compute = 1ms;
    return model;
  }

  /// A cpu_device of tiny_model with 16 pages, or null (and a test failure).
  static std::unique_ptr<cpu_device> tiny_cpu() {
    auto cpu = cpu_device::create(tiny_model(), 16);
    EXPECT_TRUE(static_cast<bool>(cpu)) << describe(cpu.error());
    return cpu ? std::move(*cpu) : nullptr;
  }

  /// Spawns the scheduler over `device` (default: a cpu_device); false (and a
  /// test failure) if there is no device.
  bool start(bool per_layer, std::unique_ptr<prefill_device> device = nullptr) {
    if (!device && !(device = tiny_cpu()))
      return false;
    device_ = std::move(device);
    scheduler_config cfg;
    cfg.model = tiny_model();
    cfg.transfer.per_layer = per_layer;
    cfg.transfer.per_layer_min_tokens = per_layer_min_tokens_;
    cfg.transfer.chunk_tokens = chunk_tokens_;
    cfg.timeouts.room = 1s;   // setup wait 1 s, finish wait 3 s
    cfg.timeouts.submit = 1s; // bulk submit wait 2 s
    cfg.pool_pages = 16;
    cfg.stats_batches_max = stats_batches_max_;
    manager_ = caf::actor_cast<manager_actor>(sys_.spawn(stand_in_manager, script_));
    transport_ = caf::actor_cast<transport_actor>(sys_.spawn(stand_in_transport, transport_delay_));
    scheduler_ = sys_.spawn(scheduler_impl, cfg, device_.get(), transport_, manager_);

    transfer_info info;
    info.room = 5;
    info.prompt_tokens = 8;
    info.decode = fabric_peer{"test", {1, 2, 3}, {{0x10000, 1 << 20, 7}}};
    info.dst_pages = {3, 1};
    info.dst_k_ptrs = {0x10000, 0x20000};
    info.dst_v_ptrs = {0x30000, 0x40000};
    info.item_lens = device_->layout().item_lens();
    info.cp_size = 1;
    info_ = info;
    return true;
  }

  /// The same request for `room` to the scheduler `start` spawned.
  kv_ready ask_again(room_id room) { return ask_all({{room, 8}}).front(); }

  /// Requests for `rooms` (id, prompt tokens: 4 a page; decode pages 3, 1,
  /// then 4, 5, ...), all sent before the first answer is awaited; their
  /// answers in that order. `after_send` runs once all are sent.
  std::vector<kv_ready> ask_all(const std::vector<std::pair<room_id, uint64_t>>& rooms,
                                const std::function<void()>& after_send = {}) {
    caf::scoped_actor self{sys_};
    std::vector<decltype(self->request(scheduler_, 30s, info_))> asked;
    for (auto [room, tokens] : rooms) {
      auto info = info_;
      info.room = room;
      info.prompt_tokens = tokens;
      info.dst_pages.resize((tokens + 3) / 4);
      for (size_t k = 2; k < info.dst_pages.size(); ++k)
        info.dst_pages[k] = k + 2;
      asked.push_back(self->request(scheduler_, 30s, std::move(info)));
    }
    if (after_send)
      after_send();
    std::vector<kv_ready> out(rooms.size());
    for (size_t k = 0; k < asked.size(); ++k)
      asked[k].receive([&](kv_ready& ready) { out[k] = std::move(ready); },
                       [&](caf::error& err) { ADD_FAILURE() << "no kv_ready: " << describe(err); });
    return out;
  }

  void TearDown() override {
    for (auto& gate : gates_)
      gate->open(); // no forward thread waits on past its test
    caf::anon_send_exit(scheduler_, caf::exit_reason::user_shutdown);
    caf::anon_send_exit(manager_, caf::exit_reason::user_shutdown);
    caf::anon_send_exit(transport_, caf::exit_reason::user_shutdown);
    sys_.await_all_actors_done(); // the scheduler's forward thread stops before the device goes
    device_.reset();
  }

  /// Starts per layer over a cpu_device whose batch 1 stalls before its
  /// layer 1 until the returned gate opens; null (and a test failure) if
  /// there is no device.
  std::shared_ptr<layerstream::testing::forward_gate> start_stalled() {
    auto cpu = tiny_cpu();
    if (!cpu)
      return nullptr;
    auto gate = new_gate();
    if (!start(true,
               std::make_unique<layerstream::testing::stalling_device>(std::move(cpu), 1, 1, gate)))
      return nullptr;
    return gate;
  }

  /// A gate for a stalling or failing device; TearDown opens it at the
  /// latest (a test that stops early must not leave a forward thread held).
  std::shared_ptr<layerstream::testing::forward_gate> new_gate() {
    gates_.push_back(std::make_shared<layerstream::testing::forward_gate>());
    return gates_.back();
  }

  /// The scheduler's stats (after the room answered: its batch settled).
  scheduler_stats stats() {
    scheduler_stats out;
    caf::scoped_actor self{sys_};
    self->request(scheduler_, 10s, stats_query{})
        .receive([&](scheduler_stats& s) { out = std::move(s); },
                 [&](caf::error& err) { ADD_FAILURE() << "no stats: " << describe(err); });
    return out;
  }

  /// The one batch's tail ends when its last byte was delivered (as the
  /// answers said): at least `min_tail` after the forward, and at least
  /// `min_hops` before the scheduler settled the batch.
  void expect_tail_ends_at_delivery(caf::timespan min_tail, caf::timespan min_hops) {
    auto s = stats();
    ASSERT_EQ(s.tail_ns.size(), 1u);
    ASSERT_EQ(s.settled_tail_ns.size(), 1u);
    const auto tail = std::chrono::nanoseconds{s.tail_ns[0]};
    const auto hops = std::chrono::nanoseconds{s.settled_tail_ns[0] - s.tail_ns[0]};
    EXPECT_GT(tail.count(), 0);
    EXPECT_GE(tail, min_tail) << "not the latest delivery of the batch";
    EXPECT_GE(hops, min_hops) << "the tail ran to the settle, not to the delivery: tail "
                              << s.tail_ns[0] << " ns, settled " << s.settled_tail_ns[0] << " ns";
  }

  static bool mentions(const caf::error& err, const std::string& text) {
    return describe(err).find(text) != std::string::npos;
  }

  std::shared_ptr<manager_script> script_ = std::make_shared<manager_script>();
  scheduler_test_config cfg_;
  caf::actor_system sys_{cfg_};
  std::unique_ptr<prefill_device> device_;
  /// The stand-in transport's answer delay (0: it never answers).
  caf::timespan transport_delay_{0};
  size_t stats_batches_max_ = scheduler_config{}.stats_batches_max;
  /// transfer.per_layer_min_tokens: shorter rooms go by the bulk path.
  uint64_t per_layer_min_tokens_ = 0;
  /// transfer.chunk_tokens (0: a room is one chunk).
  uint64_t chunk_tokens_ = 0;
  transfer_info info_;
  std::vector<std::shared_ptr<layerstream::testing::forward_gate>> gates_;
  manager_actor manager_;
  transport_actor transport_;
  scheduler_full_actor scheduler_;
};

TEST_F(SchedulerWithStandIns, AnAnsweredFinishCompletesTheRoom) {
  // The control: the same room completes when the manager answers.
  script_->answer_finish = true;
  auto ready = ask(true);
  EXPECT_EQ(ready.room, 5u);
  EXPECT_FALSE(ready.status) << describe(ready.status);
}

TEST_F(SchedulerWithStandIns, StatsKeepTheFirstBatchesSamplesOnlyAndCountOn) {
  script_->answer_finish = true;
  stats_batches_max_ = 2;
  for (room_id room : {5, 6, 7}) {
    auto ready = room == 5 ? ask(true) : ask_again(room);
    EXPECT_EQ(ready.room, room);
    EXPECT_FALSE(ready.status) << describe(ready.status);
  }
  auto s = stats();
  EXPECT_EQ(s.rooms_complete, 3u); // one batch each: they came one at a time
  EXPECT_EQ(s.forward_ns.size(), 2u);
  EXPECT_EQ(s.tail_ns.size(), 2u);
  EXPECT_EQ(s.settled_tail_ns.size(), 2u);
}

TEST_F(SchedulerWithStandIns, APerLayerTailEndsAtTheLastDeliveryNotAtTheLateFinish) {
  script_->answer_finish = true;
  script_->finish_delay = 200ms;
  auto ready = ask(true);
  EXPECT_FALSE(ready.status) << describe(ready.status);
  // Delivered when the finish came; answered 200 ms later.
  expect_tail_ends_at_delivery(0ms, 190ms);
}

TEST_F(SchedulerWithStandIns, ABulkTailEndsAtTheLastDeliveryNotAtTheLateAnswer) {
  transport_delay_ = 200ms;
  auto ready = ask(false);
  EXPECT_FALSE(ready.status) << describe(ready.status);
  // Layer 1 landed 100 ms after its submit (so at least 100 ms after the
  // forward), and was answered 100 ms after that; layer 0 landed earlier.
  expect_tail_ends_at_delivery(100ms, 90ms);
}

TEST_F(SchedulerWithStandIns, AFinishTheManagerNeverAnswersSaysWritesInFlight) {
  auto ready = ask(true);
  EXPECT_TRUE(is(ready.status, lserr::writes_in_flight)) << describe(ready.status);
  EXPECT_TRUE(mentions(ready.status, "finish:")) << describe(ready.status);
  EXPECT_TRUE(script_->got_finish(5));
}

TEST_F(SchedulerWithStandIns, ABulkSubmitTheTransportNeverAnswersSaysWritesInFlight) {
  auto ready = ask(false);
  EXPECT_TRUE(is(ready.status, lserr::writes_in_flight)) << describe(ready.status);
  EXPECT_TRUE(mentions(ready.status, "bulk submit of layer")) << describe(ready.status);
}

TEST_F(SchedulerWithStandIns, ASetupTheManagerNeverAnswersSaysWritesInFlightAndFinishesTheRoom) {
  script_->answer_setup = false;
  auto ready = ask(true);
  EXPECT_TRUE(is(ready.status, lserr::writes_in_flight)) << describe(ready.status);
  EXPECT_TRUE(mentions(ready.status, "setup:")) << describe(ready.status);
  // The manager may have set the context up after all: it gets a finish so
  // that the orphan winds down (bounded wait: the finish is a plain send).
  const auto by = std::chrono::steady_clock::now() + 10s;
  while (!script_->got_finish(5) && std::chrono::steady_clock::now() < by)
    std::this_thread::sleep_for(1ms);
  EXPECT_TRUE(script_->got_finish(5));
}

TEST_F(SchedulerWithStandIns, ARoomTheManagerRefusesFailsAloneAndTheRestOfItsBatchCompletes) {
  // Rooms 5, 6 and 7 share one batch; the manager refuses room 6 (its id
  // still has an earlier request's context there).
  script_->answer_finish = true;
  script_->refuse_setup = {6};
  ASSERT_TRUE(start(true));
  caf::anon_send(scheduler_, hold_forward{3, 1, caf::timespan{10s}});
  auto answers = ask_all({{5, 8}, {6, 8}, {7, 8}});
  EXPECT_FALSE(answers[0].status) << describe(answers[0].status);
  EXPECT_TRUE(is(answers[1].status, lserr::duplicate_room)) << describe(answers[1].status);
  EXPECT_TRUE(mentions(answers[1].status, "still active here (test)"))
      << describe(answers[1].status);
  EXPECT_FALSE(answers[2].status) << describe(answers[2].status);
  // No finish for the refused room: the manager's context under that id
  // belongs to the earlier request, whose answer it would have been.
  EXPECT_TRUE(script_->got_finish(5));
  EXPECT_FALSE(script_->got_finish(6));
  EXPECT_TRUE(script_->got_finish(7));
  auto s = stats();
  EXPECT_EQ(s.rooms_complete, 2u);
  EXPECT_EQ(s.rooms_failed, 1u);
  EXPECT_EQ(s.forward_ns.size(), 1u); // one forward, for the two it kept
}

TEST_F(SchedulerWithStandIns, ARefusedRoomLeavesABatchWithABulkRoomWhichIsStillSent) {
  // Room 5 (8 tokens) goes per layer and is refused; room 6 (4 tokens) goes
  // by the bulk path after the same forward, which runs for it alone.
  script_->answer_finish = true;
  script_->refuse_setup = {5};
  transport_delay_ = 20ms; // the stand-in transport answers bulk submits
  per_layer_min_tokens_ = 8;
  ASSERT_TRUE(start(true));
  caf::anon_send(scheduler_, hold_forward{2, 1, caf::timespan{10s}});
  auto answers = ask_all({{5, 8}, {6, 4}});
  EXPECT_TRUE(is(answers[0].status, lserr::duplicate_room)) << describe(answers[0].status);
  EXPECT_FALSE(answers[1].status) << describe(answers[1].status);
  EXPECT_GT(answers[1].bytes, 0u);
  EXPECT_FALSE(script_->got_finish(5));
  auto s = stats();
  EXPECT_EQ(s.forward_ns.size(), 1u);
  EXPECT_EQ(s.pages_free, s.pages_total); // the refused room's pages came back too
}

TEST_F(SchedulerWithStandIns, ARoomRefusedAtItsSecondChunkFailsAndGetsNoFinishForIt) {
  // Room 5 (8 tokens) in two chunks of one page: the first chunk's setup
  // is taken and finished, the second's refused. The room fails with the
  // manager's reason; only the first chunk was finished.
  script_->answer_finish = true;
  script_->refuse_setup = {5};
  script_->refuse_from_setup = 1;
  chunk_tokens_ = 4;
  ASSERT_TRUE(start(true));
  auto ready = ask_again(5);
  EXPECT_TRUE(is(ready.status, lserr::duplicate_room)) << describe(ready.status);
  EXPECT_EQ(script_->setups.load(), 2u);
  {
    std::lock_guard<std::mutex> guard{script_->mutex};
    EXPECT_EQ(std::count(script_->finished.begin(), script_->finished.end(), room_id{5}), 1);
  }
  auto s = stats();
  EXPECT_EQ(s.forward_ns.size(), 1u); // the second chunk's forward never ran
  EXPECT_EQ(s.pages_free, s.pages_total);
}

TEST_F(SchedulerWithStandIns, ABatchWhoseRoomsAreAllRefusedRunsNoForwardAndTheNextOneDoes) {
  script_->answer_finish = true;
  script_->refuse_setup = {5, 6};
  ASSERT_TRUE(start(true));
  caf::anon_send(scheduler_, hold_forward{2, 1, caf::timespan{10s}});
  auto answers = ask_all({{5, 8}, {6, 8}});
  EXPECT_TRUE(is(answers[0].status, lserr::duplicate_room)) << describe(answers[0].status);
  EXPECT_TRUE(is(answers[1].status, lserr::duplicate_room)) << describe(answers[1].status);
  EXPECT_EQ(stats().forward_ns.size(), 0u);
  // The rank is not left busy: a later room runs and completes.
  auto ready = ask_again(7);
  EXPECT_FALSE(ready.status) << describe(ready.status);
  EXPECT_EQ(stats().forward_ns.size(), 1u);
}

TEST_F(SchedulerWithStandIns, AnUnansweredSetupFailsABulkRoomWithAPlainTimeout) {
  // Room 5 (8 tokens) goes per layer, room 6 (4 tokens) by the bulk path.
  // Neither setup is answered: room 5's context may exist and must wind
  // down (writes_in_flight, a finish); room 6 has none, and nothing of it
  // was sent, so decode need not hold its pages.
  script_->answer_setup = false;
  per_layer_min_tokens_ = 8;
  ASSERT_TRUE(start(true));
  caf::anon_send(scheduler_, hold_forward{2, 1, caf::timespan{10s}}); // one batch for both
  auto answers = ask_all({{5, 8}, {6, 4}});
  EXPECT_TRUE(is(answers[0].status, lserr::writes_in_flight)) << describe(answers[0].status);
  EXPECT_TRUE(is(answers[1].status, lserr::timeout)) << describe(answers[1].status);
  EXPECT_TRUE(mentions(answers[1].status, "setup:")) << describe(answers[1].status);
  // The scheduler sent any finish before it answered: past this barrier the
  // manager has handled it.
  caf::scoped_actor self{sys_};
  self->request(caf::actor_cast<stand_in_manager_actor>(manager_), 10s, caf::get_atom::value)
      .receive([](caf::ok_atom) {},
               [](caf::error& err) { ADD_FAILURE() << "no barrier: " << describe(err); });
  EXPECT_TRUE(script_->got_finish(5));
  EXPECT_FALSE(script_->got_finish(6));
}

TEST_F(SchedulerWithStandIns,
       AFailedForwardWithAnUnansweredFinishSaysWritesInFlightAfterItsReason) {
  auto cpu = tiny_cpu();
  ASSERT_TRUE(cpu);
  // Batch 1 fails after notifying its first layer: that layer's writes may
  // be out, and the finish that would tell goes unanswered.
  auto ready = ask(true, std::make_unique<layerstream::testing::failing_device>(
                             std::move(cpu), std::vector<uint64_t>{1}, 1));
  EXPECT_TRUE(is(ready.status, lserr::writes_in_flight)) << describe(ready.status);
  EXPECT_TRUE(mentions(ready.status, "kv_fill launch failed (test)")) << describe(ready.status);
}

TEST_F(SchedulerWithStandIns,
       AForwardPastItsDeadlineFailsItsRoomsAndTheRankRefusesRequestsUntilItEnds) {
  script_->answer_finish = true;
  // Batch 1 (room 5, 2 pages) hangs before its last layer; its deadline is
  // timeouts.room (1 s). Room 6 (1 page) waits in the queue behind it.
  auto gate = start_stalled();
  ASSERT_TRUE(gate);
  auto answers = ask_all({{5, 8}, {6, 4}});
  for (const auto& ready : answers) {
    EXPECT_TRUE(is(ready.status, lserr::timeout)) << ready.room << ": " << describe(ready.status);
    EXPECT_TRUE(mentions(ready.status, "the forward of batch 1 has not ended"))
        << ready.room << ": " << describe(ready.status);
  }
  EXPECT_TRUE(script_->got_finish(5));  // its context winds down
  EXPECT_FALSE(script_->got_finish(6)); // never in a batch

  // The forward thread is still in batch 1: a new request is refused with
  // the same reason before it takes anything (its 15 pages are more than
  // the pool has left), and room 5's pages (only those) stay out of the pool.
  auto refused = ask_all({{7, 60}}).front();
  EXPECT_TRUE(is(refused.status, lserr::timeout)) << describe(refused.status);
  EXPECT_TRUE(mentions(refused.status, "the forward of batch 1 has not ended"))
      << describe(refused.status);
  auto held = stats();
  EXPECT_EQ(held.pages_free + 2, held.pages_total);
  EXPECT_EQ(held.rooms_open, 0u);

  // Once it ends, the pages come back and the rank serves again.
  gate->open();
  const auto by = std::chrono::steady_clock::now() + 10s;
  auto s = stats();
  while (s.pages_free != s.pages_total && std::chrono::steady_clock::now() < by) {
    std::this_thread::sleep_for(1ms);
    s = stats();
  }
  EXPECT_EQ(s.pages_free, s.pages_total);
  auto served = ask_again(8);
  EXPECT_FALSE(served.status) << describe(served.status);
}

TEST_F(SchedulerWithStandIns, ARoomWhoseDecodePagesAreBadIsRefusedBeforeItTakesAnything) {
  script_->answer_finish = true;
  ASSERT_TRUE(start(true));
  const auto good = info_;
  auto refused = [&](const std::string& text) {
    auto ready = ask_again(5);
    EXPECT_TRUE(is(ready.status, lserr::bad_input)) << describe(ready.status);
    EXPECT_TRUE(mentions(ready.status, text)) << describe(ready.status);
    info_ = good;
  };
  // Decode's one region is [0x10000, +1 MiB). Layer 1's V buffer starts 3
  // pages before its end: page 1 fits, page 3 does not.
  const uint64_t page = info_.item_lens[0];
  const uint64_t region_end = 0x10000 + (1 << 20);
  info_.dst_v_ptrs[1] = region_end - 3 * page;
  refused("V page 3 of layer 1 [" + std::to_string(region_end) + ", +" + std::to_string(page) +
          ") lies outside every region decode advertised");
  info_.dst_k_ptrs[0] = UINT64_MAX - 20;
  refused("K page 1 of layer 0 passes 2^64");
  info_.dst_pages = {2, 2};
  refused("dst_pages names page 2 twice");
  // Two regions that meet inside page 1 of layer 0's K buffer.
  info_.decode.regions = {{0x10000, page + page / 2, 7},
                          {0x10000 + page + page / 2, (1 << 20) - page - page / 2, 8}};
  refused("K page 1 of layer 0 [" + std::to_string(0x10000 + page) + ", +" + std::to_string(page) +
          ") lies outside every region decode advertised");
  // Nothing was taken, connected or run for them.
  auto s = stats();
  EXPECT_EQ(s.pages_free, s.pages_total);
  EXPECT_EQ(s.rooms_open, 0u);
  EXPECT_EQ(s.forward_ns.size(), 0u);
  EXPECT_FALSE(script_->got_finish(5));
  // The controls: pages 1 and 3 of a V buffer that ends where the region
  // does; two regions that meet between page 1 and page 3 (no block spans
  // both).
  info_.dst_v_ptrs[1] = region_end - 4 * page;
  auto served = ask_again(5);
  EXPECT_FALSE(served.status) << describe(served.status);
  info_ = good;
  info_.decode.regions = {{0x10000, 2 * page, 7}, {0x10000 + 2 * page, (1 << 20) - 2 * page, 8}};
  served = ask_again(6);
  EXPECT_FALSE(served.status) << describe(served.status);
}

} // namespace

TEST_F(SchedulerWithStandIns, ARoomThatFindsTooFewFreePagesWaitsForThemInArrivalOrder) {
  script_->answer_finish = true;
  // Room 5 takes 10 of the 16 pages; its forward (batch 1) is held until
  // every request is in. Room 6 needs 10 and waits for room 5 to settle.
  // Room 7 needs 1, which is free, but it came after room 6: it waits
  // behind it, so that a large room is not starved by small ones.
  auto gate = start_stalled();
  ASSERT_TRUE(gate);
  auto answers = ask_all({{5, 40}, {6, 40}, {7, 4}}, [&] {
    // Handled after the three requests (one mailbox, in order).
    EXPECT_EQ(stats().rooms_waited_for_pages, 2u);
    gate->open();
  });
  for (const auto& ready : answers)
    EXPECT_FALSE(ready.status) << ready.room << ": " << describe(ready.status);
  auto s = stats();
  EXPECT_EQ(s.rooms_complete, 3u);
  EXPECT_EQ(s.rooms_failed, 0u);
  EXPECT_EQ(s.rooms_waited_for_pages, 2u);
  EXPECT_EQ(s.pages_free, s.pages_total);
  EXPECT_EQ(s.rooms_open, 0u);
}

TEST_F(SchedulerWithStandIns, AWaitingRoomFailsWhenItCouldNoLongerStartAndNoRoomWaitsInVain) {
  // Room 5 (10 of 16 pages) never hears its finish answered: it fails with
  // writes_in_flight after the finish wait (3 s), and its pages stay held.
  // Room 6 (10 pages) waits for them until it could no longer start in
  // timeouts.room (1 s): it fails first, with a plain timeout, and decode
  // may reuse its pages.
  ASSERT_TRUE(start(true));
  auto answers = ask_all({{5, 40}, {6, 40}});
  EXPECT_TRUE(is(answers[0].status, lserr::writes_in_flight)) << describe(answers[0].status);
  EXPECT_TRUE(is(answers[1].status, lserr::timeout)) << describe(answers[1].status);
  EXPECT_TRUE(mentions(answers[1].status, "ms for prefill pages")) << describe(answers[1].status);
  EXPECT_TRUE(mentions(answers[1].status, "not started")) << describe(answers[1].status);
  EXPECT_FALSE(script_->got_finish(6)); // never in a batch

  // With room 5's 10 pages held for good, a room needing 7 would wait in
  // vain: it is refused at once, and so is one larger than the pool.
  auto refused = ask_all({{7, 28}, {8, 68}});
  EXPECT_TRUE(is(refused[0].status, lserr::bad_input)) << describe(refused[0].status);
  EXPECT_TRUE(mentions(refused[0].status,
                       "needs 7 src pages on this rank, the pool has 6 pages besides the 10 held"))
      << describe(refused[0].status);
  EXPECT_TRUE(is(refused[1].status, lserr::bad_input)) << describe(refused[1].status);
  EXPECT_TRUE(mentions(refused[1].status, "needs 17 src pages")) << describe(refused[1].status);
  auto s = stats();
  EXPECT_EQ(s.rooms_waited_for_pages, 1u);
  EXPECT_EQ(s.pages_free + 10, s.pages_total);
  EXPECT_EQ(s.rooms_open, 0u);
  // A room that fits still runs.
  script_->answer_finish = true;
  auto served = ask_all({{9, 24}}).front();
  EXPECT_FALSE(served.status) << describe(served.status);
}

TEST_F(SchedulerWithStandIns, ALostDeviceFailsEveryRoomAndStopsTheScheduler) {
  auto cpu = tiny_cpu();
  ASSERT_TRUE(cpu);
  // Batch 1 (room 5, 10 of 16 pages) reports its device lost after its first
  // layer went out, once room 6 (10 pages) waits for pages.
  auto gate = new_gate();
  ASSERT_TRUE(
      start(true, std::make_unique<layerstream::testing::failing_device>(
                      std::move(cpu), std::vector<uint64_t>{1}, 1, lserr::device_lost, gate)));
  caf::scoped_actor self{sys_};
  self->monitor(scheduler_);
  auto answers = ask_all({{5, 40}, {6, 40}}, [&] {
    EXPECT_EQ(stats().rooms_waited_for_pages, 1u);
    gate->open();
  });
  EXPECT_TRUE(is(answers[0].status, lserr::writes_in_flight)) << describe(answers[0].status);
  EXPECT_TRUE(mentions(answers[0].status, "the rank stops")) << describe(answers[0].status);
  EXPECT_TRUE(mentions(answers[0].status, "kv_fill launch failed (test)"))
      << describe(answers[0].status);
  EXPECT_TRUE(is(answers[1].status, lserr::device_lost)) << describe(answers[1].status);
  // The scheduler sent the finish before it answered: past this barrier the
  // manager has handled it.
  self->request(caf::actor_cast<stand_in_manager_actor>(manager_), 10s, caf::get_atom::value)
      .receive([](caf::ok_atom) {},
               [](caf::error& err) { ADD_FAILURE() << "no barrier: " << describe(err); });
  EXPECT_TRUE(script_->got_finish(5)); // its context winds down
  EXPECT_FALSE(script_->got_finish(6));
  // The scheduler quits with the reason: the process watches it and exits 1.
  bool down = false;
  self->receive(
      [&](const caf::down_msg& msg) {
        down = true;
        EXPECT_TRUE(is(msg.reason, lserr::device_lost)) << describe(msg.reason);
      },
      caf::after(std::chrono::seconds(10)) >>
          [] { ADD_FAILURE() << "the scheduler did not quit"; });
  EXPECT_TRUE(down);
}

TEST_F(SchedulerWithStandIns, ARoomBehindAWaiterThatTimedOutTakesTheFreePagesAtOnce) {
  // Room 5 (per layer, 10 of 16 pages) never hears its finish answered: it
  // holds its pages for 3 s. Room 6 needs 10 and waits until it can no
  // longer start (about 0.9 s). Room 7 (bulk, 1 page) comes 100 ms after
  // it: the 6 free pages fit it, and it takes them when room 6 leaves the
  // queue, without waiting for a page to come back (or to its own end, 100
  // ms later).
  per_layer_min_tokens_ = 8;
  transport_delay_ = 1ms;
  ASSERT_TRUE(start(true));
  auto late = std::async(std::launch::async, [this] {
    std::this_thread::sleep_for(100ms);
    return ask_all({{7, 4}}).front();
  });
  auto answers = ask_all({{5, 40}, {6, 40}});
  auto seven = late.get();
  EXPECT_TRUE(is(answers[0].status, lserr::writes_in_flight)) << describe(answers[0].status);
  EXPECT_TRUE(mentions(answers[1].status, "ms for prefill pages")) << describe(answers[1].status);
  EXPECT_FALSE(seven.status) << describe(seven.status);
  EXPECT_EQ(stats().rooms_waited_for_pages, 2u);
}

TEST_F(SchedulerWithStandIns, AnEarlierWaitsTimerDoesNotFailALaterRoomWithTheSameId) {
  // Every room goes by the bulk path, its submits answered 300 ms later.
  // Room 5 waits behind room 4 (its timer is due about 0.9 s after it
  // came), gets its pages and completes. Then room 5 comes again and waits
  // behind room 6: the first timer fires during that second wait and must
  // not end it.
  per_layer_min_tokens_ = 1000;
  transport_delay_ = 300ms;
  ASSERT_TRUE(start(true));
  const auto t0 = std::chrono::steady_clock::now();
  for (const auto& ready : ask_all({{4, 40}, {5, 40}}))
    EXPECT_FALSE(ready.status) << ready.room << ": " << describe(ready.status);
  const auto first_wait_ended = std::chrono::steady_clock::now() - t0;
  auto again = ask_all({{6, 40}, {5, 40}});
  for (const auto& ready : again)
    EXPECT_FALSE(ready.status) << ready.room << ": " << describe(ready.status);
  EXPECT_EQ(stats().rooms_waited_for_pages, 2u);
  // The second wait spanned the first timer (else the test proves nothing).
  EXPECT_LT(first_wait_ended, 900ms);
  EXPECT_GT(std::chrono::steady_clock::now() - t0, 900ms);
}
