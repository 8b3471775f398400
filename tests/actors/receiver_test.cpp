// Scripted message sequences of the decode receiver against fake prefill ranks.
#define CAF_SUITE receiver
#include "fixture.hpp"

#include <string>

#include "actors/receiver.hpp"
#include <caf/response_type.hpp>

using namespace layerstream;
using namespace layerstream::testing;

namespace {

/// How a fake prefill rank answers transfer_info.
enum class answer {
  ok,              // write the rank's slice (if `write`), then kv_ready{ok}
  fail,            // kv_ready with a scripted failure
  in_flight,       // kv_ready failing with writes_in_flight (writes given up on)
  in_flight_stray, // the same, naming another room and rank
  error_in_flight, // an error answer, writes_in_flight (a session's own timeout)
  refused,         // an error answer, unauthorized (a session refused it)
  hold,            // nothing until the test sends {release_atom, room}; then as `ok`
  short_count,     // as `ok`, but the answer counts one byte less than the slice
};

/// What the fake prefill ranks do and what they saw (test thread only).
struct prefill_script {
  kv_pool* pool = nullptr;
  std::vector<answer> mode;
  /// Per rank: write the slice into the pool before answering ok.
  std::vector<bool> write;
  /// (cp_rank, transfer_info) in arrival order.
  std::vector<std::pair<uint32_t, transfer_info>> received;
  std::map<std::pair<room_id, uint32_t>,
           std::pair<caf::typed_response_promise<kv_ready>, transfer_info>>
      held;
};

/// The rank's contiguous slice of the room's pages (the first total % cp
/// ranks get one extra page), written the way the prefill side's RDMA would.
kv_ready write_slice(prefill_script& script, uint32_t rank, const transfer_info& info) {
  auto& pool = *script.pool;
  uint64_t n = info.dst_pages.size();
  uint64_t base = n / info.cp_size, extra = n % info.cp_size;
  uint64_t start = rank * base + std::min<uint64_t>(rank, extra);
  uint64_t count = base + (rank < extra ? 1 : 0);
  uint64_t first = start * pool.page_size();
  uint64_t last = std::min(info.prompt_tokens, (start + count) * pool.page_size());
  if (count > 0 && script.write[rank])
    for (uint32_t l = 0; l < pool.layers(); ++l)
      pool.write_layer(info.room, l, info.dst_pages, first, last, info.prompt_tokens);
  return kv_ready{info.room, rank, {}, count * pool.item_len() * pool.layers() * pool.buffers()};
}

kv_ready answer_for(prefill_script& script, uint32_t rank, const transfer_info& info) {
  if (script.mode[rank] == answer::fail)
    return kv_ready{info.room, rank, make_error(lserr::transfer_failed, "scripted failure"), 0};
  if (script.mode[rank] == answer::in_flight)
    return kv_ready{info.room, rank, make_error(lserr::writes_in_flight, "scripted give-up"), 0};
  if (script.mode[rank] == answer::in_flight_stray)
    return kv_ready{info.room + 1000, rank + 1,
                    make_error(lserr::writes_in_flight, "scripted give-up"), 0};
  auto ready = write_slice(script, rank, info);
  if (script.mode[rank] == answer::short_count)
    ready.bytes -= 1;
  return ready;
}

using fake_prefill_actor = scheduler_actor::extend<caf::reacts_to<release_atom, room_id>>;

fake_prefill_actor::behavior_type fake_prefill(fake_prefill_actor::pointer self,
                                               std::shared_ptr<prefill_script> script,
                                               uint32_t rank) {
  return {
      [=](const transfer_info& info) -> caf::result<kv_ready> {
        script->received.emplace_back(rank, info);
        if (script->mode[rank] == answer::error_in_flight)
          return make_error(lserr::writes_in_flight, "scheduler did not answer");
        if (script->mode[rank] == answer::refused)
          return make_error(lserr::unauthorized, "transfer_info without this session's key");
        if (script->mode[rank] != answer::hold)
          return answer_for(*script, rank, info);
        auto rp = self->make_response_promise<kv_ready>();
        script->held.emplace(std::make_pair(info.room, rank), std::make_pair(rp, info));
        return rp;
      },
      [=](release_atom, room_id room) {
        auto i = script->held.find({room, rank});
        if (i == script->held.end())
          return;
        auto rp = i->second.first;
        // Released as the rank's mode now says (a test may switch it).
        rp.deliver(script->mode[rank] == answer::hold
                       ? write_slice(*script, rank, i->second.second)
                       : answer_for(*script, rank, i->second.second));
        script->held.erase(i);
      },
  };
}

/// The "room ready to decode" subscriber: keeps every room_result.
caf::behavior collector(caf::event_based_actor*,
                        std::shared_ptr<std::vector<room_result>> results) {
  return {[=](const room_result& res) { results->push_back(res); }};
}

// Every message type is registered by test_config (add_message_types).
using receiver_test_config = test_config;

bool mentions(const caf::error& err, const std::string& text) {
  return describe(err).find(text) != std::string::npos;
}

struct receiver_fixture : test_coordinator_fixture<receiver_test_config> {
  static constexpr uint64_t pool_pages = 16;

  std::unique_ptr<kv_pool> pool;
  fabric_peer peer;
  std::shared_ptr<prefill_script> script = std::make_shared<prefill_script>();
  std::shared_ptr<std::vector<room_result>> results = std::make_shared<std::vector<room_result>>();
  std::vector<fake_prefill_actor> ranks;
  caf::actor subscriber;
  receiver_config cfg;
  receiver_actor rx;

  receiver_fixture() {
    // 2 layers, K and V, rows of 16 bytes, 4 tokens (64 bytes) per page.
    model_config m;
    m.layers = 2;
    m.kv_heads = 2;
    m.head_dim = 4;
    m.dtype_bytes = 2;
    m.page_size = 4;
    pool = std::move(*kv_pool::create(m, pool_pages));
    script->pool = pool.get();
    peer.provider = "test";
    peer.address = {1, 2, 3};
    peer.regions.push_back({reinterpret_cast<uint64_t>(pool->base()), pool->bytes(), 0x42});
    cfg.room_timeout = std::chrono::seconds(5);
    cfg.answer_wait = std::chrono::seconds(20);
  }

  ~receiver_fixture() override {
    // Held promises reference the fake ranks: drop them, then stop everyone.
    script->held.clear();
    for (auto& r : ranks)
      anon_send_exit(r, caf::exit_reason::user_shutdown);
    if (rx)
      anon_send_exit(rx, caf::exit_reason::user_shutdown);
    if (subscriber)
      anon_send_exit(subscriber, caf::exit_reason::user_shutdown);
    sched.run();
  }

  /// Spawns `modes.size()` fake prefill ranks (all writing) and the receiver.
  void spawn(std::vector<answer> modes) {
    script->mode = modes;
    script->write.assign(modes.size(), true);
    std::vector<scheduler_actor> handles;
    for (uint32_t r = 0; r < modes.size(); ++r) {
      ranks.push_back(sys.spawn(fake_prefill, script, r));
      handles.push_back(caf::actor_cast<scheduler_actor>(ranks.back()));
    }
    subscriber = sys.spawn(collector, results);
    cfg.subscriber = subscriber;
    rx = sys.spawn(receiver_impl, decode_pool{pool.get(), peer}, page_allocator{pool_pages, 1, 0.0},
                   handles, cfg);
    sched.run();
  }

  /// Sends open_room and lets every actor run (no timeouts fire).
  auto open(room_id room, uint64_t tokens) {
    auto hdl = self->request(rx, caf::infinite, open_room{room, tokens});
    expect((open_room), from(self).to(rx).with(open_room{room, tokens}));
    sched.run();
    return hdl;
  }

  /// The reply to an open_room; it must be in self's mailbox already.
  template <class Handle>
  room_result reply_of(Handle& hdl) {
    room_result out;
    hdl.receive([&](room_result& res) { out = std::move(res); },
                [&](caf::error& err) { CAF_FAIL("open_room failed: " << describe(err)); });
    return out;
  }

  room_status status(room_id room) {
    auto hdl = self->request(rx, caf::infinite, room_status_query{room});
    sched.run();
    room_status out;
    hdl.receive([&](room_status& st) { out = std::move(st); },
                [&](caf::error& err) { CAF_FAIL("status query failed: " << describe(err)); });
    return out;
  }

  std::string state_of(room_id room) { return to_string(status(room).state); }

  /// The error a status query for a room the receiver does not know gets.
  caf::error status_error(room_id room) {
    auto hdl = self->request(rx, caf::infinite, room_status_query{room});
    sched.run();
    caf::error out;
    hdl.receive([&](room_status&) { CAF_FAIL("room " << room << " is still known"); },
                [&](caf::error& err) { out = std::move(err); });
    return out;
  }

  caf::error close(room_id room) {
    auto hdl = self->request(rx, caf::infinite, close_room{room});
    sched.run();
    caf::error out;
    hdl.receive([](caf::ok_atom) {}, [&](caf::error& err) { out = std::move(err); });
    return out;
  }

  void release(uint32_t rank, room_id room) {
    self->send(ranks[rank], release_atom::value, room);
    sched.run();
  }

  uint64_t free_pages() {
    return deref<receiver_self_actor::stateful_base<receiver_state>>(rx).state.pages->free_pages();
  }

  /// Bytes a room of `pages` pages moves in this pool (every layer, K and V).
  uint64_t room_bytes(uint64_t pages) const {
    return pages * pool->item_len() * pool->layers() * pool->buffers();
  }
};

} // namespace

CAF_TEST_FIXTURE_SCOPE(receiver_tests, receiver_fixture)

CAF_TEST(a room is complete only after every cp rank answered) {
  spawn({answer::hold, answer::hold});
  auto hdl = open(7, 10);
  CAF_CHECK_EQUAL(state_of(7), "waiting");
  release(0, 7);
  CAF_CHECK_EQUAL(state_of(7), "transferring");
  CAF_CHECK(results->empty());
  release(1, 7);
  CAF_CHECK_EQUAL(state_of(7), "complete");
  CAF_REQUIRE_EQUAL(results->size(), 1u);
  auto& res = results->front();
  CAF_CHECK_EQUAL(res.room, 7u);
  CAF_CHECK(!res.status);
  CAF_CHECK(res.bit_exact);
  CAF_CHECK_EQUAL(res.bytes, room_bytes(3));
  CAF_CHECK(res.finished_ns >= res.started_ns);
  // The opener gets the same answer as the subscriber.
  CAF_CHECK_EQUAL(reply_of(hdl), res);
  CAF_CHECK_EQUAL(status(7).reason, "");
}

CAF_TEST(transfer_info carries the pool pages pointers and item_lens) {
  spawn({answer::ok, answer::ok});
  self->request(rx, caf::infinite, open_room{3, 10});
  expect((open_room), from(self).to(rx));
  transfer_info want;
  want.room = 3;
  want.prompt_tokens = 10;
  want.decode = peer;
  want.dst_pages = {0, 1, 2}; // ceil(10 / 4) pages, contiguous with no fragmentation
  want.dst_k_ptrs = pool->k_ptrs();
  want.dst_v_ptrs = pool->v_ptrs();
  want.item_lens = {64, 64, 64, 64};
  want.cp_size = 2;
  expect((transfer_info), from(rx).to(ranks[0]).with(want));
  expect((transfer_info), from(rx).to(ranks[1]).with(want));
  sched.run();
  CAF_REQUIRE_EQUAL(script->received.size(), 2u);
  auto& got = script->received[0].second;
  CAF_CHECK_EQUAL(got.dst_k_ptrs.size(), 2u);
  CAF_CHECK_EQUAL(got.dst_v_ptrs.size(), 2u);
  CAF_CHECK_EQUAL(got.dst_k_ptrs[0], reinterpret_cast<uint64_t>(pool->base()));
  CAF_CHECK_EQUAL(got.dst_v_ptrs[1], reinterpret_cast<uint64_t>(pool->page_ptr(1, 1, 0)));
  CAF_CHECK_EQUAL(got.decode, peer);
  // Page counts round up: 4 tokens take one page, 5 take two.
  open(4, 4);
  open(5, 5);
  CAF_REQUIRE_EQUAL(script->received.size(), 6u);
  CAF_CHECK_EQUAL(script->received[2].second.dst_pages, std::vector<uint64_t>({3}));
  CAF_CHECK_EQUAL(script->received[4].second.dst_pages, std::vector<uint64_t>({4, 5}));
  CAF_CHECK_EQUAL(free_pages(), pool_pages - 6);
  CAF_CHECK_EQUAL(results->size(), 3u);
}

CAF_TEST(a failing rank fails the room with its reason) {
  spawn({answer::hold, answer::fail});
  auto hdl = open(11, 10);
  CAF_REQUIRE_EQUAL(results->size(), 1u);
  auto res = results->front();
  CAF_CHECK(is(res.status, lserr::transfer_failed));
  CAF_CHECK(mentions(res.status, "prefill rank 1: scripted failure"));
  CAF_CHECK(!res.bit_exact);
  CAF_CHECK_EQUAL(reply_of(hdl), res);
  auto st = status(11);
  CAF_CHECK_EQUAL(to_string(st.state), "failed");
  CAF_CHECK_EQUAL(st.reason, describe(res.status));
  // Rank 0 may still be writing: the pages stay taken until it answers.
  CAF_CHECK_EQUAL(free_pages(), pool_pages - 3);
  release(0, 11);
  CAF_CHECK_EQUAL(free_pages(), pool_pages);
  // Its late success does not revive the room, nor notify again.
  CAF_CHECK_EQUAL(state_of(11), "failed");
  CAF_CHECK_EQUAL(results->size(), 1u);
  CAF_CHECK(!close(11));
  CAF_CHECK(is(close(11), lserr::unknown_room));
}

CAF_TEST(a rank that never answers fails the room at the room timeout) {
  spawn({answer::ok, answer::hold});
  open(21, 9);
  CAF_CHECK_EQUAL(state_of(21), "transferring");
  advance_time(cfg.room_timeout / 2);
  sched.run();
  CAF_CHECK_EQUAL(state_of(21), "transferring");
  CAF_CHECK(results->empty());
  CAF_CHECK_EQUAL(free_pages(), pool_pages - 3);
  advance_time(cfg.room_timeout / 2);
  sched.run();
  CAF_REQUIRE_EQUAL(results->size(), 1u);
  auto& res = results->front();
  CAF_CHECK(is(res.status, lserr::timeout));
  CAF_CHECK(mentions(res.status, "prefill rank 1 did not answer room 21"));
  CAF_CHECK_EQUAL(res.bytes, room_bytes(2)); // rank 0's two pages
  CAF_CHECK_EQUAL(std::chrono::nanoseconds(res.finished_ns - res.started_ns), cfg.room_timeout);
  CAF_CHECK_EQUAL(state_of(21), "failed");
  // Rank 1 may still be writing: the pages stay held until it answers.
  CAF_CHECK_EQUAL(free_pages(), pool_pages - 3);
  advance_time(cfg.room_timeout * 2);
  sched.run();
  CAF_CHECK_EQUAL(free_pages(), pool_pages - 3);
  // It answers late (its writes ended): the pages come back; the room stays
  // failed and the subscriber hears nothing more.
  release(1, 21);
  CAF_CHECK_EQUAL(free_pages(), pool_pages);
  CAF_CHECK_EQUAL(state_of(21), "failed");
  CAF_CHECK_EQUAL(results->size(), 1u);
}

CAF_TEST(a rank silent past the answer wait holds the pages for good) {
  spawn({answer::hold, answer::hold});
  open(22, 8); // pages 0-1
  release(0, 22);
  advance_time(cfg.room_timeout);
  sched.run();
  CAF_REQUIRE_EQUAL(results->size(), 1u);
  CAF_CHECK(mentions(results->front().status, "prefill rank 1 did not answer room 22"));
  // The request to rank 1 times out, with rank 1 still up: it may still
  // write, so the pages are neither reused nor lost track of.
  advance_time(cfg.answer_wait - cfg.room_timeout);
  sched.run();
  CAF_CHECK_EQUAL(state_of(22), "failed");
  CAF_CHECK_EQUAL(free_pages(), pool_pages - 2);
  CAF_CHECK(!close(22));
  CAF_CHECK_EQUAL(state_of(22), "failed"); // closed, still held
  auto other = open(23, 4);
  release(0, 23);
  release(1, 23);
  CAF_CHECK(!reply_of(other).status);
  CAF_CHECK_EQUAL(script->received.back().second.dst_pages, std::vector<uint64_t>({2}));
  CAF_CHECK(!close(23));
  CAF_CHECK_EQUAL(free_pages(), pool_pages - 2);
  // Down is the control plane's verdict, not proof that it stopped writing
  // (a stopped process resumes): the pages stay held.
  self->send_exit(ranks[1], caf::exit_reason::user_shutdown);
  sched.run();
  CAF_CHECK_EQUAL(free_pages(), pool_pages - 2);
  CAF_CHECK_EQUAL(state_of(22), "failed");
}

CAF_TEST(a rank that gave up on writes in flight holds the pages for good) {
  spawn({answer::ok, answer::in_flight});
  open(25, 8); // pages 0-1
  CAF_REQUIRE_EQUAL(results->size(), 1u);
  CAF_CHECK(is(results->front().status, lserr::writes_in_flight));
  CAF_CHECK(mentions(results->front().status, "prefill rank 1: scripted give-up"));
  // Every rank answered, but rank 1's writes may still land: pages held.
  CAF_CHECK_EQUAL(free_pages(), pool_pages - 2);
  advance_time(cfg.answer_wait * 2);
  sched.run();
  CAF_CHECK_EQUAL(free_pages(), pool_pages - 2);
  CAF_CHECK(!close(25));
  CAF_CHECK_EQUAL(state_of(25), "failed"); // closed, still held
  CAF_CHECK(status(25).reason.find("its 2 pages stay held") != std::string::npos);
  // The id stays taken, and the refusal says why.
  auto again = open(25, 4);
  auto refused = reply_of(again).status;
  CAF_CHECK(is(refused, lserr::duplicate_room));
  CAF_CHECK(mentions(refused, "room 25 failed and cannot be reused: its 2 pages stay held"));
  // Another room gets other pages (and is held too: rank 1 gives up again).
  open(26, 4);
  CAF_CHECK_EQUAL(script->received.back().second.dst_pages, std::vector<uint64_t>({2}));
  CAF_CHECK_EQUAL(free_pages(), pool_pages - 3);
  // A room that needs more than the free pages is told how many are held.
  auto big = open(27, (pool_pages - 2) * 4);
  auto full = reply_of(big).status;
  CAF_CHECK(is(full, lserr::bad_input));
  CAF_CHECK(mentions(
      full,
      "14 pages asked, the pool has 13 besides held pages; 3 pages are held by 2 failed rooms"));
}

CAF_TEST(a room held by two ranks counts its pages once) {
  spawn({answer::in_flight, answer::in_flight});
  open(31, 8); // pages 0-1, held by both ranks
  CAF_REQUIRE_EQUAL(results->size(), 1u);
  CAF_CHECK(is(results->front().status, lserr::writes_in_flight));
  CAF_CHECK_EQUAL(free_pages(), pool_pages - 2);
  auto big = open(32, (pool_pages - 1) * 4);
  auto full = reply_of(big).status;
  CAF_CHECK(mentions(full, "15 pages asked, the pool has 14 besides held pages; 2 pages are held "
                           "by 1 failed room that"));
}

CAF_TEST(a writes in flight answer for another room still holds the pages) {
  spawn({answer::ok, answer::in_flight_stray});
  open(29, 8); // pages 0-1
  CAF_REQUIRE_EQUAL(results->size(), 1u);
  // The stray answer names another room, but its writes may land anywhere
  // this room's transfer_info pointed them: the pages stay held.
  CAF_CHECK(is(results->front().status, lserr::writes_in_flight));
  CAF_CHECK(!close(29));
  CAF_CHECK_EQUAL(state_of(29), "failed");
  CAF_CHECK_EQUAL(free_pages(), pool_pages - 2);
}

CAF_TEST(an error answer holds the pages unless the transfer_info never arrived) {
  spawn({answer::error_in_flight, answer::refused});
  open(27, 8); // pages 0-1
  CAF_REQUIRE_EQUAL(results->size(), 1u);
  CAF_CHECK_EQUAL(state_of(27), "failed");
  // Rank 0's session gave up waiting for its scheduler, which may still
  // write; rank 1 refused the transfer_info, so nothing comes from it.
  CAF_CHECK_EQUAL(free_pages(), pool_pages - 2);
  CAF_CHECK(!close(27));
  CAF_CHECK_EQUAL(state_of(27), "failed"); // closed, still held
}

CAF_TEST(a refused transfer_info frees the pages at once) {
  spawn({answer::refused});
  open(28, 8);
  CAF_REQUIRE_EQUAL(results->size(), 1u);
  CAF_CHECK(is(results->front().status, lserr::unauthorized));
  CAF_CHECK_EQUAL(free_pages(), pool_pages);
  CAF_CHECK(!close(28));
  CAF_CHECK(is(status_error(28), lserr::unknown_room));
}

CAF_TEST(a room deadline of an earlier room with the same id is ignored) {
  spawn({answer::hold});
  open(24, 4);
  release(0, 24);
  CAF_CHECK(!close(24));
  advance_time(cfg.room_timeout / 2);
  sched.run();
  open(24, 4); // the id again, a new room (its serial is 1)
  // Only the receiver's own timer may fail a room early. receiver_actor has
  // no room_deadline; a dynamically typed handle still reaches the behaviour.
  static_assert(!caf::response_type<receiver_actor::signatures, room_deadline>::valid);
  self->send(caf::actor_cast<caf::actor>(rx), room_deadline{24, 1});
  sched.run();
  CAF_CHECK_EQUAL(state_of(24), "waiting");
  advance_time(cfg.room_timeout / 2);
  sched.run(); // the first room's deadline: not this room's
  CAF_CHECK_EQUAL(state_of(24), "waiting");
  advance_time(cfg.room_timeout / 2);
  sched.run();
  CAF_CHECK_EQUAL(state_of(24), "failed");
}

CAF_TEST(a prefill rank going down fails the rooms waiting on it) {
  spawn({answer::hold, answer::hold});
  open(1, 8);    // pages 0-1
  open(2, 12);   // pages 2-4
  release(1, 2); // rank 1 is done with room 2 before it goes down
  self->send_exit(ranks[1], caf::exit_reason::user_shutdown);
  sched.run();
  CAF_REQUIRE_EQUAL(results->size(), 1u);
  auto& res = results->front();
  CAF_CHECK_EQUAL(res.room, 1u);
  CAF_CHECK(is(res.status, lserr::peer_lost));
  CAF_CHECK(mentions(res.status, "prefill rank 1 lost"));
  CAF_CHECK_EQUAL(state_of(1), "failed");
  CAF_CHECK_EQUAL(state_of(2), "transferring");
  // Room 1's request to rank 1 is still out: its pages stay taken.
  release(0, 1);
  release(0, 2);
  CAF_CHECK_EQUAL(state_of(2), "complete");
  CAF_CHECK_EQUAL(free_pages(), pool_pages - 5);
  // Down while room 1 was pending: it may have been only stopped or cut off
  // and resume writing, so room 1's pages stay held, also past its request.
  advance_time(cfg.answer_wait);
  sched.run();
  CAF_CHECK_EQUAL(free_pages(), pool_pages - 5);
  CAF_CHECK(!close(2));
  CAF_CHECK_EQUAL(free_pages(), pool_pages - 2);
  CAF_CHECK_EQUAL(results->size(), 2u);
  // A new room fails at once, naming the lost rank, and takes no pages.
  auto hdl = open(3, 4);
  auto refused = reply_of(hdl);
  CAF_CHECK(is(refused.status, lserr::peer_lost));
  CAF_CHECK(mentions(refused.status, "prefill rank 1 lost"));
  CAF_CHECK_EQUAL(free_pages(), pool_pages - 2);
}

CAF_TEST(unwritten bytes fail the room although every rank said success) {
  spawn({answer::ok, answer::ok});
  script->write[1] = false;
  auto hdl = open(31, 10);
  CAF_REQUIRE_EQUAL(results->size(), 1u);
  auto& res = results->front();
  CAF_CHECK(mentions(res.status, "bytes differ"));
  CAF_CHECK(!res.bit_exact);
  CAF_CHECK_EQUAL(res.bytes, room_bytes(3)); // the ranks claimed every byte
  CAF_CHECK_EQUAL(reply_of(hdl), res);
  CAF_CHECK_EQUAL(state_of(31), "failed");
  CAF_CHECK(status(31).reason.find("bytes differ") != std::string::npos);
  // Every rank answered: the failed room's pages are free at once.
  CAF_CHECK_EQUAL(free_pages(), pool_pages);
}

CAF_TEST(a rank whose success counts a byte short fails the room even without verify) {
  // Its slice is in the pool, byte for byte: only the count gives it away,
  // as it would for stale bytes of an earlier room in the same pages.
  cfg.verify = false;
  spawn({answer::ok, answer::short_count});
  auto hdl = open(32, 10);
  CAF_REQUIRE_EQUAL(results->size(), 1u);
  auto& res = results->front();
  CAF_CHECK(is(res.status, lserr::transfer_failed));
  CAF_CHECK(mentions(res.status, "prefill rank 1 answered success with " +
                                     std::to_string(room_bytes(1) - 1) + " bytes written"));
  CAF_CHECK_EQUAL(reply_of(hdl), res);
  CAF_CHECK_EQUAL(state_of(32), "failed");
  // Both ranks answered: the pages are free at once.
  CAF_CHECK_EQUAL(free_pages(), pool_pages);
}

CAF_TEST(without verify a room completes on the ranks word alone) {
  cfg.verify = false;
  spawn({answer::ok});
  script->write[0] = false;
  open(41, 6);
  CAF_REQUIRE_EQUAL(results->size(), 1u);
  CAF_CHECK(!results->front().status);
  CAF_CHECK(!results->front().bit_exact);
  CAF_CHECK_EQUAL(state_of(41), "complete");
}

CAF_TEST(close_room returns a complete room pages and forgets it) {
  spawn({answer::hold});
  open(51, 16);
  CAF_CHECK_EQUAL(free_pages(), pool_pages - 4);
  // A room still in flight cannot be closed.
  CAF_CHECK(is(close(51), lserr::bad_input));
  release(0, 51);
  CAF_CHECK_EQUAL(state_of(51), "complete");
  CAF_CHECK_EQUAL(free_pages(), pool_pages - 4);
  CAF_CHECK(!close(51));
  CAF_CHECK_EQUAL(free_pages(), pool_pages);
  CAF_CHECK(is(status_error(51), lserr::unknown_room));
  // The room id can be used again, for a new request.
  open(51, 4);
  CAF_CHECK_EQUAL(state_of(51), "waiting");
}

CAF_TEST(a failed room closed early is forgotten once its requests settle) {
  spawn({answer::hold, answer::fail});
  open(61, 8);
  CAF_CHECK_EQUAL(state_of(61), "failed");
  CAF_CHECK(!close(61));
  // Closed, but rank 0 has not answered: still known, pages still taken.
  CAF_CHECK_EQUAL(state_of(61), "failed");
  CAF_CHECK_EQUAL(free_pages(), pool_pages - 2);
  // Its id is refused meanwhile, saying what it waits for.
  auto again = open(61, 8);
  auto refused = reply_of(again);
  CAF_CHECK(is(refused.status, lserr::duplicate_room));
  CAF_CHECK(mentions(refused.status, "wait for prefill rank(s) 0 to answer"));
  CAF_CHECK_EQUAL(free_pages(), pool_pages - 2);
  release(0, 61);
  CAF_CHECK_EQUAL(free_pages(), pool_pages);
  CAF_CHECK(is(status_error(61), lserr::unknown_room));
}

CAF_TEST(a duplicate or oversized room is refused without touching pages) {
  spawn({answer::hold});
  open(71, 8);
  auto dup = open(71, 8);
  CAF_CHECK(is(reply_of(dup).status, lserr::duplicate_room));
  // One page more than the whole pool: refused at once (a room that fits
  // the pool but not its free pages waits instead; see below).
  auto big = open(72, pool_pages * 4 + 1);
  auto too_big = reply_of(big);
  CAF_CHECK(is(too_big.status, lserr::bad_input));
  CAF_CHECK(mentions(too_big.status, "17 pages asked, the pool has 16 besides held pages"));
  auto empty = open(73, 0);
  CAF_CHECK(is(reply_of(empty).status, lserr::bad_input));
  CAF_CHECK_EQUAL(free_pages(), pool_pages - 2);
  CAF_CHECK_EQUAL(state_of(71), "waiting");
  CAF_CHECK_EQUAL(script->received.size(), 1u);
  // Refused rooms do not reach the subscriber.
  CAF_CHECK(results->empty());
}

CAF_TEST(a room that finds too few free pages waits and rooms open in arrival order) {
  spawn({answer::hold});
  open(81, 12 * 4); // 12 of the 16 pages
  auto big = open(82, 8 * 4);
  CAF_CHECK_EQUAL(state_of(82), "waiting");
  CAF_CHECK_EQUAL(status(82).reason, "waiting for 8 decode pages (0 rooms ahead)");
  // One page would fit the 4 free, but room 82 came first.
  auto small = open(83, 4);
  CAF_CHECK_EQUAL(status(83).reason, "waiting for 1 decode pages (1 rooms ahead)");
  CAF_CHECK_EQUAL(script->received.size(), 1u);
  CAF_CHECK_EQUAL(free_pages(), 4u);
  // A waiting room's id is taken.
  auto dup = open(83, 4);
  CAF_CHECK(is(reply_of(dup).status, lserr::duplicate_room));
  // Room 81 completes and is closed: its pages go to 82, then 83.
  release(0, 81);
  CAF_CHECK(!close(81));
  CAF_REQUIRE_EQUAL(script->received.size(), 3u);
  CAF_CHECK_EQUAL(script->received[1].second.room, 82u);
  CAF_CHECK_EQUAL(script->received[2].second.room, 83u);
  CAF_CHECK_EQUAL(free_pages(), pool_pages - 9);
  release(0, 82);
  release(0, 83);
  auto big_done = reply_of(big);
  CAF_CHECK(!big_done.status);
  CAF_CHECK(big_done.bit_exact);
  CAF_CHECK(!reply_of(small).status);
}

CAF_TEST(a room still waiting for pages at the room timeout fails and the room behind it opens) {
  spawn({answer::ok});
  open(91, 12 * 4); // complete at once; its 12 pages stay until it is closed
  CAF_CHECK_EQUAL(state_of(91), "complete");
  auto big = open(92, 8 * 4);
  advance_time(cfg.room_timeout / 2);
  sched.run();
  auto small = open(93, 4); // fits, but waits behind room 92
  CAF_CHECK_EQUAL(state_of(93), "waiting");
  advance_time(cfg.room_timeout / 2);
  sched.run();
  auto timed_out = reply_of(big);
  CAF_CHECK(is(timed_out.status, lserr::timeout));
  CAF_CHECK(mentions(timed_out.status, "room 92 waited 5000 ms for 8 decode pages (4 free)"));
  CAF_CHECK(is(status_error(92), lserr::unknown_room));
  // Room 93 got its page at once and completed.
  auto done = reply_of(small);
  CAF_CHECK(!done.status);
  CAF_CHECK(done.bit_exact);
  CAF_CHECK_EQUAL(free_pages(), pool_pages - 13);
  CAF_CHECK_EQUAL(script->received.size(), 2u); // rooms 91 and 93 only
  // Room 93's own room timeout never fails it, complete as it is.
  advance_time(cfg.room_timeout);
  sched.run();
  CAF_CHECK_EQUAL(state_of(93), "complete");
}

CAF_TEST(pages held while a room waits can refuse it at once and the room behind it opens) {
  spawn({answer::hold});
  open(111, 12 * 4);
  auto big = open(112, 8 * 4); // fits the pool, waits for 8 pages
  auto small = open(113, 4);   // behind it
  CAF_CHECK_EQUAL(script->received.size(), 1u);
  // Room 111's rank gives up with its writes in flight: its 12 pages stay
  // held, and room 112 can never have 8 of the 4 left.
  script->mode[0] = answer::in_flight;
  release(0, 111);
  auto refused = reply_of(big);
  CAF_CHECK(is(refused.status, lserr::bad_input));
  CAF_CHECK(mentions(refused.status, "8 pages asked, the pool has 4 besides held pages"));
  CAF_REQUIRE_EQUAL(script->received.size(), 2u);
  CAF_CHECK_EQUAL(script->received[1].second.room, 113u);
  CAF_CHECK(is(reply_of(small).status, lserr::writes_in_flight)); // the rank's mode now
}

CAF_TEST(an admitted room keeps its own room timeout and its wait deadline does not fail it) {
  spawn({answer::hold});
  open(121, 12 * 4);
  auto waiting = open(122, 8 * 4); // waits from t = 0
  advance_time(cfg.room_timeout / 2);
  sched.run();
  release(0, 121);
  CAF_CHECK(!close(121)); // room 122 opens at t = room_timeout / 2
  CAF_CHECK_EQUAL(script->received.size(), 2u);
  advance_time(cfg.room_timeout / 2); // its wait deadline passes: ignored
  sched.run();
  CAF_CHECK_EQUAL(state_of(122), "waiting"); // for its rank, not for pages
  CAF_CHECK_EQUAL(status(122).reason, "");
  CAF_CHECK_EQUAL(results->size(), 1u); // room 121 only
  advance_time(cfg.room_timeout / 2);   // its own room timeout
  sched.run();
  auto failed = reply_of(waiting);
  CAF_CHECK(is(failed.status, lserr::timeout));
  CAF_CHECK(mentions(failed.status, "prefill rank 0 did not answer room 122"));
}

CAF_TEST(closing a room that waits for pages withdraws it and the room behind it may open) {
  spawn({answer::ok});
  open(131, 12 * 4); // complete, not closed
  auto big = open(132, 8 * 4);
  auto small = open(133, 4);
  CAF_CHECK(!close(132));
  auto withdrawn = reply_of(big);
  CAF_CHECK(is(withdrawn.status, lserr::cancelled));
  CAF_CHECK(mentions(withdrawn.status, "room 132 was closed while it waited for pages"));
  CAF_CHECK(is(status_error(132), lserr::unknown_room));
  CAF_CHECK(!reply_of(small).status);
  CAF_CHECK_EQUAL(script->received.size(), 2u); // rooms 131 and 133
}

CAF_TEST(a receiver that stops answers the rooms waiting for pages) {
  spawn({answer::ok});
  open(141, 12 * 4);
  auto waiting = open(142, 8 * 4);
  anon_send_exit(rx, caf::exit_reason::user_shutdown);
  sched.run();
  auto cancelled = reply_of(waiting);
  CAF_CHECK(is(cancelled.status, lserr::cancelled));
  CAF_CHECK(mentions(cancelled.status, "receiver stopped while room 142 waited for pages"));
}

CAF_TEST(rooms waiting for pages are refused when a prefill rank goes down) {
  spawn({answer::ok});
  open(101, 12 * 4);
  auto waiting = open(102, 8 * 4);
  CAF_CHECK_EQUAL(state_of(102), "waiting");
  anon_send_exit(ranks[0], caf::exit_reason::user_shutdown);
  sched.run();
  auto refused = reply_of(waiting);
  CAF_CHECK(is(refused.status, lserr::peer_lost));
  CAF_CHECK(mentions(refused.status, "prefill rank 0 lost"));
  CAF_CHECK_EQUAL(script->received.size(), 1u);
}

CAF_TEST_FIXTURE_SCOPE_END()
