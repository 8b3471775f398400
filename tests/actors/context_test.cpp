// Scripted message sequences of the context actor.
#define CAF_SUITE context
#include "fixture.hpp"

using namespace layerstream;
using namespace layerstream::testing;

namespace {

struct context_fixture : actor_fixture {
  context_config cfg;

  context_actor spawn_context(const request_transfer& req) { return spawn_batch({req}); }

  /// One context for a forward batch of several rooms.
  context_actor spawn_batch(std::vector<request_transfer> batch) {
    auto ctx = sys.spawn(context_impl, std::move(batch), transport, cfg);
    run();
    return ctx;
  }

  /// finish{room} from the test actor, answered with `want`.
  void expect_finish(const context_actor& ctx, const finish_result& want) {
    self->request(ctx, caf::infinite, finish{want.room});
    expect((finish), from(self).to(ctx));
    expect((finish_result), from(ctx).to(self).with(want));
  }

  /// Sends layer_end for `layer` with a fresh scripted event.
  std::shared_ptr<host_event> end_layer(const context_actor& ctx, uint32_t layer) {
    auto ev = events.record(0);
    self->send(ctx, layer_end{layer, ev});
    expect((layer_end), from(self).to(ctx).with(layer_end{layer, ev}));
    return std::static_pointer_cast<host_event>(ev);
  }

  /// The event completes; the context submits the layer and the transport answers.
  void complete_and_send(const context_actor& ctx, host_event& ev, const request_transfer& req,
                         uint32_t layer) {
    ev.signal();
    expect((event_ready), from(_).to(ctx).with(event_ready{layer, caf::error{}}));
    expect((submit), from(ctx).to(transport).with(expected_submit(req, layer)));
    expect((submit_done), from(transport).to(ctx));
  }

  /// A batch's layer ends and its event completes at once; the context sends
  /// the layer's one submit_batch (not yet answered).
  void end_and_submit_batch(const context_actor& ctx, uint32_t layer) {
    end_layer(ctx, layer)->signal();
    expect((event_ready), from(_).to(ctx));
    expect((submit_batch), from(ctx).to(transport));
  }
};

} // namespace

CAF_TEST_FIXTURE_SCOPE(context_tests, context_fixture)

CAF_TEST(a layer is submitted only after its event completed) {
  auto req = make_request(7, 5, 2);
  auto ctx = spawn_context(req);
  auto ev = end_layer(ctx, 0);
  // The event is still pending: nothing may reach the transport.
  disallow((submit), from(ctx).to(transport));
  CAF_CHECK(script->received.empty());
  ev->signal();
  expect((event_ready), from(_).to(ctx).with(event_ready{0, caf::error{}}));
  expect((submit), from(ctx).to(transport).with(expected_submit(req, 0)));
  expect((submit_done), from(transport).to(ctx));
  CAF_CHECK_EQUAL(script->received.size(), 1u);
}

CAF_TEST(a layer is submitted at most once) {
  auto req = make_request(7, 5, 2);
  auto ctx = spawn_context(req);
  auto ev = end_layer(ctx, 1);
  // A second layer_end for the same layer, with another event, is ignored.
  auto ev2 = end_layer(ctx, 1);
  ev2->signal();
  disallow((event_ready), from(_).to(ctx));
  complete_and_send(ctx, *ev, req, 1);
  // A late duplicate event_ready does not submit again.
  self->send(ctx, event_ready{1, caf::error{}});
  expect((event_ready), from(self).to(ctx));
  disallow((submit), from(ctx).to(transport));
  CAF_CHECK_EQUAL(script->received.size(), 1u);
  // And the layer is counted once.
  self->request(ctx, caf::infinite, finish{7});
  expect((finish), from(self).to(ctx));
  // Layer 0 never ended: a room with a missing layer must not report success,
  // and it names the layer for the bulk path.
  expect((finish_result),
         from(ctx).to(self).with(finish_result{7, make_error(lserr::missing_layer, ""), 1,
                                               expected_bytes(req, 1), std::vector<uint32_t>{0}}));
}

CAF_TEST(finish lists exactly the layers that never reported their end) {
  auto req = make_request(10, 3, 5);
  auto ctx = spawn_context(req);
  // Layers 1 and 3 end and are sent; 0, 2 and 4 (first, middle, last) never end.
  auto ev1 = end_layer(ctx, 1);
  complete_and_send(ctx, *ev1, req, 1);
  auto ev3 = end_layer(ctx, 3);
  complete_and_send(ctx, *ev3, req, 3);
  self->request(ctx, caf::infinite, finish{10});
  expect((finish), from(self).to(ctx));
  auto want = finish_result{10, make_error(lserr::missing_layer, ""), 2,
                            expected_bytes(req, 1) + expected_bytes(req, 3),
                            std::vector<uint32_t>{0, 2, 4}};
  expect((finish_result), from(ctx).to(self).with(want));
  // The context itself sends nothing for them, and a repeated finish agrees.
  CAF_CHECK_EQUAL(script->received.size(), 2u);
  self->request(ctx, caf::infinite, finish{10});
  expect((finish), from(self).to(ctx));
  expect((finish_result), from(ctx).to(self).with(want));
}

CAF_TEST(a failed layer fails finish closed even with layers never reported) {
  script->fail.insert({11, 1});
  auto req = make_request(11, 2, 4);
  auto ctx = spawn_context(req);
  auto ev0 = end_layer(ctx, 0);
  complete_and_send(ctx, *ev0, req, 0);
  auto ev1 = end_layer(ctx, 1);
  complete_and_send(ctx, *ev1, req, 1); // answered with the scripted failure
  // Layers 2 and 3 never end: no list, so no bulk rescue of a failed room.
  self->request(ctx, caf::infinite, finish{11});
  expect((finish), from(self).to(ctx));
  expect((finish_result),
         from(ctx).to(self).with(finish_result{11, make_error(lserr::transfer_failed, ""), 1,
                                               expected_bytes(req, 0), std::vector<uint32_t>{}}));
}

CAF_TEST(a failed event wait fails finish closed even with layers never reported) {
  auto req = make_request(12, 2, 3);
  auto ctx = spawn_context(req);
  auto ev1 = end_layer(ctx, 1);
  ev1->signal(make_error(lserr::event_failed, "sticky device error"));
  expect((event_ready), from(_).to(ctx));
  disallow((submit), from(ctx).to(transport));
  self->request(ctx, caf::infinite, finish{12});
  expect((finish), from(self).to(ctx));
  expect((finish_result),
         from(ctx).to(self).with(finish_result{12, make_error(lserr::event_failed, ""), 0, 0,
                                               std::vector<uint32_t>{}}));
}

CAF_TEST(a room with no owned pages succeeds with layers never reported) {
  auto req = make_request(13, 0, 3);
  CAF_REQUIRE(req.plan.empty());
  auto ctx = spawn_context(req);
  auto ev = end_layer(ctx, 1);
  // Layers 0 and 2 never end, but there is nothing of this room to send.
  self->request(ctx, caf::infinite, finish{13});
  expect((finish), from(self).to(ctx));
  expect((finish_result), from(ctx).to(self).with(finish_result{13, caf::error{}, 0, 0}));
  CAF_CHECK(script->received.empty());
}

CAF_TEST(a room with no owned pages skips every layer and succeeds) {
  auto req = make_request(9, 0, 3);
  CAF_REQUIRE(req.plan.empty());
  auto ctx = spawn_context(req);
  for (uint32_t l = 0; l < 3; ++l) {
    auto ev = events.record(0);
    self->send(ctx, layer_end{l, ev});
    expect((layer_end), from(self).to(ctx));
  }
  // The skipped layers never asked their events: signalling them sends nothing.
  for (size_t i = 0; i < events.count(); ++i)
    events.recorded(i)->signal();
  disallow((event_ready), from(_).to(ctx));
  self->request(ctx, caf::infinite, finish{9});
  expect((finish), from(self).to(ctx));
  expect((finish_result), from(ctx).to(self).with(finish_result{9, caf::error{}, 0, 0}));
  CAF_CHECK(script->received.empty());
}

CAF_TEST(finish waits for every outstanding submit) {
  script->hold = true;
  script->stamp_delivery = true;
  auto req = make_request(3, 4, 2);
  auto ctx = spawn_context(req);
  auto ev0 = end_layer(ctx, 0);
  auto ev1 = end_layer(ctx, 1);
  ev0->signal();
  ev1->signal();
  expect((event_ready), from(_).to(ctx));
  expect((submit), from(ctx).to(transport).with(expected_submit(req, 0)));
  expect((event_ready), from(_).to(ctx));
  expect((submit), from(ctx).to(transport).with(expected_submit(req, 1)));
  self->request(ctx, caf::infinite, finish{3});
  expect((finish), from(self).to(ctx));
  disallow((finish_result), from(ctx).to(self));
  release(3, 1);
  expect((release_atom, room_id, uint32_t), from(_).to(transport_handle));
  expect((submit_done), from(transport).to(ctx));
  disallow((finish_result), from(ctx).to(self));
  release(3, 0);
  expect((release_atom, room_id, uint32_t), from(_).to(transport_handle));
  expect((submit_done), from(transport).to(ctx));
  // Delivered at the later of the two delivery times (layer 1's), although
  // layer 0's answer came last: the tail ends at the last byte delivered.
  expect((finish_result),
         from(ctx).to(self).with(finish_result{
             3, caf::error{}, 2, expected_bytes(req, 0) + expected_bytes(req, 1), {}, 2003}));
}

CAF_TEST(a failed submit stops later layers and fails finish) {
  script->fail.insert({5, 1});
  auto req = make_request(5, 6, 4);
  auto ctx = spawn_context(req);
  auto ev0 = end_layer(ctx, 0);
  complete_and_send(ctx, *ev0, req, 0);
  auto ev1 = end_layer(ctx, 1);
  auto ev2 = end_layer(ctx, 2);
  complete_and_send(ctx, *ev1, req, 1); // answered with the scripted failure
  // Layer 2 ended before the failure, but its event completes after it:
  // nothing more is submitted.
  ev2->signal();
  expect((event_ready), from(_).to(ctx));
  disallow((submit), from(ctx).to(transport));
  // Layer 3 ends after the failure: not even its event is asked.
  auto ev3 = end_layer(ctx, 3);
  ev3->signal();
  disallow((event_ready), from(_).to(ctx));
  self->request(ctx, caf::infinite, finish{5});
  expect((finish), from(self).to(ctx));
  expect((finish_result),
         from(ctx).to(self).with(
             finish_result{5, make_error(lserr::transfer_failed, ""), 1, expected_bytes(req, 0)}));
  CAF_CHECK_EQUAL(script->received.size(), 2u);
}

CAF_TEST(a failed event wait propagates to finish) {
  auto req = make_request(6, 2, 2);
  auto ctx = spawn_context(req);
  auto ev0 = end_layer(ctx, 0);
  ev0->signal(make_error(lserr::event_failed, "sticky device error"));
  expect((event_ready), from(_).to(ctx));
  disallow((submit), from(ctx).to(transport));
  auto ev1 = end_layer(ctx, 1);
  self->request(ctx, caf::infinite, finish{6});
  expect((finish), from(self).to(ctx));
  expect((finish_result),
         from(ctx).to(self).with(finish_result{6, make_error(lserr::event_failed, ""), 0, 0}));
  CAF_CHECK(script->received.empty());
}

CAF_TEST(a repeated finish gets the same answer) {
  auto req = make_request(8, 3, 1);
  auto ctx = spawn_context(req);
  auto ev = end_layer(ctx, 0);
  complete_and_send(ctx, *ev, req, 0);
  auto want = finish_result{8, caf::error{}, 1, expected_bytes(req, 0)};
  self->request(ctx, caf::infinite, finish{8});
  expect((finish), from(self).to(ctx));
  expect((finish_result), from(ctx).to(self).with(want));
  self->request(ctx, caf::infinite, finish{8});
  expect((finish), from(self).to(ctx));
  expect((finish_result), from(ctx).to(self).with(want));
}

CAF_TEST(an event that never completes fails the room at the finish deadline) {
  cfg.finish_timeout = std::chrono::seconds(5);
  auto req = make_request(4, 2, 1);
  auto ctx = spawn_context(req);
  auto ev = end_layer(ctx, 0);
  self->request(ctx, std::chrono::seconds(100), finish{4});
  expect((finish), from(self).to(ctx));
  disallow((finish_result), from(ctx).to(self));
  advance_time(std::chrono::seconds(5));
  expect((finish_deadline), from(ctx).to(ctx));
  expect((finish_result),
         from(ctx).to(self).with(finish_result{4, make_error(lserr::timeout, ""), 0, 0}));
  // The event completing later changes nothing and submits nothing.
  ev->signal();
  expect((event_ready), from(_).to(ctx));
  disallow((submit), from(ctx).to(transport));
}

CAF_TEST(a submit the transport never answers fails within the submit timeout) {
  script->hold = true;
  cfg.submit_timeout = std::chrono::seconds(2);
  auto req = make_request(2, 2, 1);
  auto ctx = spawn_context(req);
  auto ev = end_layer(ctx, 0);
  ev->signal();
  expect((event_ready), from(_).to(ctx));
  expect((submit), from(ctx).to(transport));
  self->request(ctx, caf::infinite, finish{2});
  expect((finish), from(self).to(ctx));
  disallow((finish_result), from(ctx).to(self));
  advance_time(std::chrono::seconds(2));
  expect((caf::error), from(ctx).to(ctx));
  // Unanswered, the writes may still be queued or posted: decode must hear so.
  expect((finish_result),
         from(ctx).to(self).with(finish_result{2, make_error(lserr::writes_in_flight, ""), 0, 0}));
}

CAF_TEST(pointer lists that do not match fail the room without a submit) {
  auto req = make_request(1, 2, 2);
  req.ptrs.dst_k.pop_back();
  auto ctx = spawn_context(req);
  auto ev = end_layer(ctx, 0);
  disallow((event_ready), from(_).to(ctx));
  self->request(ctx, caf::infinite, finish{1});
  expect((finish), from(self).to(ctx));
  expect((finish_result),
         from(ctx).to(self).with(finish_result{1, make_error(lserr::bad_input, ""), 0, 0}));
}

// A forward batch in one context: one wait per layer, one submit_batch per
// peer, and every room still judged on its own.

CAF_TEST(a batch waits on the event of each layer once and sends its rooms in one submit_batch) {
  auto a = make_request(1, 2, 2), b = make_request(2, 3, 2, 40, 400),
       c = make_request(3, 1, 2, 80, 800);
  auto ctx = spawn_batch({a, b, c});
  for (uint32_t layer = 0; layer < 2; ++layer) {
    auto ev = end_layer(ctx, layer);
    CAF_CHECK_EQUAL(ev->waiting(), 1u);
    disallow((submit), from(ctx).to(transport));
    ev->signal();
    expect((event_ready), from(_).to(ctx).with(event_ready{layer, caf::error{}}));
    submit_batch want{layer, 0, {}, {}};
    for (auto* req : {&a, &b, &c})
      want.add_room(req->room, expected_submit(*req, layer).blocks);
    expect((submit_batch), from(ctx).to(transport).with(want));
    expect((submit_batch_done), from(transport).to(ctx));
  }
  for (auto* req : {&a, &b, &c})
    expect_finish(ctx, finish_result{req->room, caf::error{}, 2,
                                     expected_bytes(*req, 0) + expected_bytes(*req, 1)});
}

CAF_TEST(a failed write fails its own room only and the batch goes on without it) {
  auto a = make_request(1, 2, 3), b = make_request(2, 2, 3, 40, 400),
       c = make_request(3, 2, 3, 80, 800);
  script->fail.insert({2, 0}); // room 2's layer 0 write fails
  auto ctx = spawn_batch({a, b, c});
  for (uint32_t layer = 0; layer < 3; ++layer) {
    auto ev = end_layer(ctx, layer);
    ev->signal();
    expect((event_ready), from(_).to(ctx));
    if (layer == 0) {
      expect((submit_batch), from(ctx).to(transport));
      expect((submit_batch_done), from(transport).to(ctx));
    } else {
      // Rooms 1 and 3 only: room 2 failed closed.
      submit_batch want{layer, 0, {}, {}};
      want.add_room(1, expected_submit(a, layer).blocks);
      want.add_room(3, expected_submit(c, layer).blocks);
      expect((submit_batch), from(ctx).to(transport).with(want));
      expect((submit_batch_done), from(transport).to(ctx));
    }
  }
  uint64_t all_a = 0, all_c = 0;
  for (uint32_t l = 0; l < 3; ++l) {
    all_a += expected_bytes(a, l);
    all_c += expected_bytes(c, l);
  }
  expect_finish(ctx, finish_result{1, caf::error{}, 3, all_a});
  expect_finish(ctx, finish_result{2, make_error(lserr::transfer_failed, ""), 0, 0});
  expect_finish(ctx, finish_result{3, caf::error{}, 3, all_c});
}

CAF_TEST(the finish deadline of one room leaves its neighbours in the batch waiting) {
  script->hold = true;
  cfg.finish_timeout = std::chrono::seconds(5);
  auto a = make_request(1, 2, 1), b = make_request(2, 2, 1, 40, 400);
  auto ctx = spawn_batch({a, b});
  end_and_submit_batch(ctx, 0);
  self->request(ctx, std::chrono::seconds(100), finish{1});
  expect((finish), from(self).to(ctx));
  advance_time(std::chrono::seconds(5));
  expect((finish_deadline), from(ctx).to(ctx).with(finish_deadline{1}));
  // Layer 0 was submitted and is unanswered: its writes may still land (an
  // event that never completed is a plain timeout, the test above).
  expect((finish_result),
         from(ctx).to(self).with(finish_result{1, make_error(lserr::writes_in_flight, ""), 0, 0}));
  // The held answer arrives: room 1 stays failed, room 2 is complete.
  release(1, 0);
  expect((release_atom, room_id, uint32_t), from(_).to(transport));
  expect((submit_batch_done), from(transport).to(ctx));
  expect_finish(ctx, finish_result{1, make_error(lserr::writes_in_flight, ""), 0, 0});
  expect_finish(ctx, finish_result{2, caf::error{}, 1, expected_bytes(b, 0)});
}

CAF_TEST(a layer_end after a finish belongs to a later batch and writes nothing) {
  // The forward failed after layer 0 and the scheduler finishes the batch's
  // rooms. While one of them is still in flight the context stays active,
  // so the manager fans the next batch's layer_end{1} out to it too.
  auto a = make_request(1, 2, 2), b = make_request(2, 2, 2, 40, 400);
  auto ctx = spawn_batch({a, b});
  end_and_submit_batch(ctx, 0);
  expect((submit_batch_done), from(transport).to(ctx));
  expect_finish(ctx, finish_result{1, make_error(lserr::missing_layer, ""), 1, expected_bytes(a, 0),
                                   std::vector<uint32_t>{1}});
  auto ev1 = end_layer(ctx, 1);
  CAF_CHECK_EQUAL(ev1->waiting(), 0u);          // nobody here waits on the later batch's event
  CAF_CHECK_EQUAL(script->received.size(), 2u); // layer 0 of both rooms, nothing more
  // Room 2, finished after that layer_end, still lacks layer 1.
  expect_finish(ctx, finish_result{2, make_error(lserr::missing_layer, ""), 1, expected_bytes(b, 0),
                                   std::vector<uint32_t>{1}});
}

CAF_TEST(a finish for a room outside the batch is answered with unknown_room) {
  auto ctx = spawn_batch({make_request(1, 2, 1)});
  expect_finish(ctx, finish_result{9, make_error(lserr::unknown_room, ""), 0, 0});
}

CAF_TEST(a layer_end beyond the model fails every room of the batch with bad_layer) {
  auto ctx = spawn_batch({make_request(1, 2, 1), make_request(2, 2, 1, 40, 400)});
  auto ev = events.record(0);
  self->send(ctx, layer_end{7, ev});
  expect((layer_end), from(self).to(ctx));
  CAF_CHECK_EQUAL(std::static_pointer_cast<host_event>(ev)->waiting(), 0u);
  expect_finish(ctx, finish_result{1, make_error(lserr::bad_layer, ""), 0, 0});
  expect_finish(ctx, finish_result{2, make_error(lserr::bad_layer, ""), 0, 0});
}

CAF_TEST_FIXTURE_SCOPE_END()
