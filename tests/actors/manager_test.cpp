// Scripted message sequences of the manager actor and its contexts.
#define CAF_SUITE manager
#include "fixture.hpp"

using namespace layerstream;
using namespace layerstream::testing;

namespace {

struct manager_fixture : actor_fixture {
  manager_actor mgr;

  manager_fixture() {
    mgr = sys.spawn(manager_impl, transport, manager_config{});
    run();
  }

  void setup_batch(std::vector<request_transfer> batch) {
    self->request(mgr, caf::infinite, setup{std::move(batch)});
    expect((setup), from(self).to(mgr));
    expect((setup_result), from(mgr).to(self).with(setup_result{}));
  }

  /// Sends a setup and returns the manager's answer.
  setup_result setup_answer(std::vector<request_transfer> batch) {
    auto hdl = self->request(mgr, caf::infinite, setup{std::move(batch)});
    sched.run();
    setup_result out;
    // The answer is in self's mailbox already: this receive does not block.
    hdl.receive([&](setup_result& res) { out = std::move(res); },
                [](caf::error& err) { CAF_FAIL("setup: " << describe(err)); });
    return out;
  }

  /// Answers to finish requests, in arrival order.
  std::shared_ptr<std::vector<finish_result>> answers =
      std::make_shared<std::vector<finish_result>>();

  /// Sends finish{room} from a short-lived actor that records the answer
  /// (a scoped actor cannot take a response without blocking the test thread).
  void ask_finish(room_id room) {
    auto out = answers;
    auto m = mgr;
    // CAF 0.17 spawns a function without arguments through a null pointer
    // (UBSan flags it): the room goes in as an argument.
    sys.spawn(
        [out, m](caf::event_based_actor* asker, room_id r) {
          asker->request(m, std::chrono::seconds(1000), finish{r})
              .then([out](finish_result& res) { out->push_back(res); },
                    [out, r](caf::error& err) {
                      out->push_back(finish_result{r, err, 0, 0});
                    });
        },
        room);
  }

  finish_result finish_room(room_id room) {
    auto before = answers->size();
    ask_finish(room);
    run();
    CAF_REQUIRE_EQUAL(answers->size(), before + 1);
    return answers->back();
  }
};

} // namespace

CAF_TEST_FIXTURE_SCOPE(manager_tests, manager_fixture)

CAF_TEST(one layer_end is fanned out to every active context with the same event) {
  // Two forward batches in flight: one context each.
  setup_batch({make_request(1, 2, 2), make_request(2, 3, 2), make_request(3, 1, 2)});
  setup_batch({make_request(4, 2, 2)});
  auto ev = std::static_pointer_cast<host_event>(events.record(0));
  self->send(mgr, layer_end{0, ev});
  expect((layer_end), from(self).to(mgr));
  sched.run();
  // Each context waits on the one recorded event once, for all its rooms.
  CAF_CHECK_EQUAL(ev->waiting(), 2u);
  CAF_CHECK_EQUAL(events.count(), 1u);
  ev->signal();
  run();
  // The three-room batch sends one submit_batch; the lone room a plain submit.
  CAF_CHECK_EQUAL(script->batch_sizes, std::vector<size_t>{3});
  CAF_CHECK_EQUAL(script->received.size(), 4u);
}

CAF_TEST(a context stops only when every room of its batch is finished) {
  auto a = make_request(21, 2, 1), b = make_request(22, 2, 1, 40, 400);
  setup_batch({a, b});
  auto ev = std::static_pointer_cast<host_event>(events.record(0));
  self->send(mgr, layer_end{0, ev});
  ev->signal();
  run();
  CAF_CHECK_EQUAL(finish_room(21), (finish_result{21, caf::error{}, 1, expected_bytes(a, 0)}));
  // Room 22's context is still there: it answers.
  CAF_CHECK_EQUAL(finish_room(22), (finish_result{22, caf::error{}, 1, expected_bytes(b, 0)}));
  // Now the context is gone: a later layer_end reaches nobody.
  auto late = std::static_pointer_cast<host_event>(events.record(0));
  self->send(mgr, layer_end{0, late});
  run();
  CAF_CHECK_EQUAL(late->waiting(), 0u);
}

CAF_TEST(a layer_end with no active context is a no - op) {
  auto ev = std::static_pointer_cast<host_event>(events.record(0));
  self->send(mgr, layer_end{0, ev});
  expect((layer_end), from(self).to(mgr));
  sched.run();
  CAF_CHECK_EQUAL(ev->waiting(), 0u);
  ev->signal();
  run();
  CAF_CHECK(script->received.empty());
}

CAF_TEST(finish removes the context and a repeated finish gets the same answer) {
  auto req = make_request(11, 4, 1);
  setup_batch({req});
  auto ev = std::static_pointer_cast<host_event>(events.record(0));
  self->send(mgr, layer_end{0, ev});
  ev->signal();
  run();
  CAF_REQUIRE_EQUAL(script->received.size(), 1u);
  auto want = finish_result{11, caf::error{}, 1, expected_bytes(req, 0)};
  CAF_CHECK_EQUAL(finish_room(11), want);
  // The context is gone: a later layer_end reaches nobody.
  auto late = std::static_pointer_cast<host_event>(events.record(0));
  self->send(mgr, layer_end{0, late});
  run();
  CAF_CHECK_EQUAL(late->waiting(), 0u);
  // And the answer is remembered.
  CAF_CHECK_EQUAL(finish_room(11), want);
}

CAF_TEST(a reused room id keeps its latest answer as long as any other room) {
  manager_config small;
  small.finished_memory = 2;
  mgr = sys.spawn(manager_impl, transport, small);
  run();
  auto finish_one = [&](const request_transfer& req) {
    setup_batch({req});
    auto ev = std::static_pointer_cast<host_event>(events.record(0));
    self->send(mgr, layer_end{0, ev});
    ev->signal();
    run();
    return finish_room(req.room);
  };
  // Room 7 twice (a chunked room: each chunk is a setup of its own), then 8.
  auto first = finish_one(make_request(7, 4, 1));
  auto second = finish_one(make_request(7, 2, 1));
  CAF_CHECK_NOT_EQUAL(first.bytes, second.bytes);
  finish_one(make_request(8, 4, 1));
  // Room 7's second answer is one of the two newest: a repeated finish gets it.
  CAF_CHECK_EQUAL(finish_room(7), second);
}

CAF_TEST(two finish calls in flight get one answer each) {
  script->hold = true;
  auto req = make_request(12, 2, 1);
  setup_batch({req});
  auto ev = std::static_pointer_cast<host_event>(events.record(0));
  self->send(mgr, layer_end{0, ev});
  ev->signal();
  sched.run(); // no timeouts: the held submit stays pending
  ask_finish(12);
  ask_finish(12);
  sched.run();
  CAF_CHECK(answers->empty());
  release(12, 0);
  sched.run();
  auto want = finish_result{12, caf::error{}, 1, expected_bytes(req, 0)};
  CAF_REQUIRE_EQUAL(answers->size(), 2u);
  CAF_CHECK_EQUAL(answers->at(0), want);
  CAF_CHECK_EQUAL(answers->at(1), want);
}

CAF_TEST(finish of a room never set up fails with unknown_room) {
  auto res = finish_room(99);
  CAF_CHECK(is(res.status, lserr::unknown_room));
}

CAF_TEST(a setup naming an active room refuses that room alone) {
  setup_batch({make_request(1, 2, 1)});
  auto answer = setup_answer({make_request(2, 2, 1), make_request(1, 2, 1)});
  CAF_REQUIRE_EQUAL(answer.refused.size(), 1u);
  CAF_CHECK_EQUAL(answer.refused[0].room, 1u);
  CAF_CHECK(is(answer.refused[0].reason, lserr::duplicate_room));
  // Room 2 got a context of its own; room 1 still has only its first one.
  auto ev = std::static_pointer_cast<host_event>(events.record(0));
  self->send(mgr, layer_end{0, ev});
  run();
  CAF_CHECK_EQUAL(ev->waiting(), 2u);
  ev->signal();
  run();
  CAF_CHECK_EQUAL(finish_room(2).status, caf::error{});
  CAF_CHECK_EQUAL(finish_room(1).status, caf::error{});
}

CAF_TEST(
    an id given twice in one setup and a room with bad pointers are refused and the rest set up) {
  auto bad = make_request(4, 2, 1);
  bad.ptrs.dst_k.pop_back(); // one pointer short
  auto answer =
      setup_answer({make_request(3, 2, 1), make_request(5, 2, 1), bad, make_request(3, 1, 1)});
  CAF_REQUIRE_EQUAL(answer.refused.size(), 2u);
  CAF_CHECK_EQUAL(answer.refused[0].room, 3u); // once, though given twice
  CAF_CHECK(is(answer.refused[0].reason, lserr::duplicate_room));
  CAF_CHECK_EQUAL(answer.refused[1].room, 4u);
  CAF_CHECK(is(answer.refused[1].reason, lserr::bad_input));
  // Only room 5 was set up.
  CAF_CHECK(is(finish_room(3).status, lserr::unknown_room));
  CAF_CHECK(is(finish_room(4).status, lserr::unknown_room));
  auto ev = std::static_pointer_cast<host_event>(events.record(0));
  self->send(mgr, layer_end{0, ev});
  run();
  CAF_CHECK_EQUAL(ev->waiting(), 1u);
}

CAF_TEST(many rooms interleaved each get every layer exactly once) {
  constexpr uint32_t layers = 4;
  std::vector<request_transfer> batch;
  for (room_id r = 1; r <= 8; ++r)
    batch.push_back(make_request(r, r % 3 == 0 ? 0 : r, layers, 10 * r, 500 + 20 * r));
  setup_batch(batch);
  // Layers end in order, but their events complete in reverse order.
  std::vector<std::shared_ptr<host_event>> evs;
  for (uint32_t l = 0; l < layers; ++l) {
    evs.push_back(std::static_pointer_cast<host_event>(events.record(0)));
    self->send(mgr, layer_end{l, evs.back()});
    sched.run();
  }
  for (auto i = evs.rbegin(); i != evs.rend(); ++i) {
    (*i)->signal();
    sched.run();
  }
  std::set<std::pair<room_id, uint32_t>> seen;
  for (auto& s : script->received) {
    CAF_CHECK(seen.emplace(s.room, s.layer).second);
    auto& req = batch[s.room - 1];
    CAF_CHECK_EQUAL(s, expected_submit(req, s.layer));
  }
  size_t non_empty = 0;
  for (auto& req : batch) {
    non_empty += req.plan.empty() ? 0 : 1;
    uint64_t bytes = 0;
    for (uint32_t l = 0; l < layers; ++l)
      bytes += expected_bytes(req, l);
    auto res = finish_room(req.room);
    CAF_CHECK_EQUAL(res,
                    (finish_result{req.room, caf::error{}, req.plan.empty() ? 0 : layers, bytes}));
  }
  CAF_CHECK_EQUAL(seen.size(), non_empty * layers);
}

CAF_TEST_FIXTURE_SCOPE_END()
