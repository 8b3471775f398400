// Every message type crosses a process boundary intact: serialized as a
// caf::message (by its registered name, as caf-io does) and read back.
#define CAF_SUITE messages
#include "fixture.hpp"

#include <atomic>
#include <cstdlib>
#include <new>

#include <caf/binary_deserializer.hpp>
#include <caf/binary_serializer.hpp>

using namespace layerstream;
using namespace layerstream::testing;

namespace {

// The largest single operator-new request since the last reset: a hostile
// length must never turn into a large allocation.
std::atomic<size_t> largest_new{0};

} // namespace

// The replacements below pair malloc with free, which GCC cannot see once it
// inlines them into callers that use new and delete.
#pragma GCC diagnostic ignored "-Wmismatched-new-delete"

void* operator new(std::size_t n) {
  auto cur = largest_new.load(std::memory_order_relaxed);
  while (n > cur && !largest_new.compare_exchange_weak(cur, n, std::memory_order_relaxed)) {
  }
  if (void* p = std::malloc(n == 0 ? 1 : n))
    return p;
  throw std::bad_alloc{};
}

void operator delete(void* p) noexcept {
  std::free(p);
}

void operator delete(void* p, std::size_t) noexcept {
  std::free(p);
}

namespace {

/// 2^32 - 1 as CAF's varbyte sequence length: 5 bytes that claim 4 GiB.
const std::vector<char> hostile_length = {'\xff', '\xff', '\xff', '\xff', '\x0f'};

struct messages_fixture : test_coordinator_fixture<test_config> {
  /// Serializes `x` inside a message and reads it back as a new message.
  template <class T>
  void round_trip(const T& x) {
    auto msg = caf::make_message(x);
    std::vector<char> buf;
    caf::binary_serializer sink{sys, buf};
    auto err = sink(msg);
    CAF_REQUIRE(!err);
    caf::message copy;
    caf::binary_deserializer source{sys, buf};
    err = source(copy);
    CAF_REQUIRE(!err);
    CAF_REQUIRE(copy.match_elements<T>());
    CAF_CHECK_EQUAL(copy.get_as<T>(0), x);
  }

  /// Decodes a T from `bytes` as caf-io does; returns the error and records
  /// the largest allocation made meanwhile in `largest`.
  template <class T>
  caf::error decode(const std::vector<char>& bytes, size_t& largest) {
    T x;
    caf::binary_deserializer source{sys, bytes};
    largest_new = 0;
    auto err = source(x);
    largest = largest_new;
    return err;
  }

  template <class T>
  std::vector<char> encode(const T& x) {
    std::vector<char> buf;
    caf::binary_serializer sink{sys, buf};
    CAF_REQUIRE(!sink(x));
    return buf;
  }
};

template <class T>
void append(std::vector<char>& buf, const T& tail) {
  buf.insert(buf.end(), tail.begin(), tail.end());
}

fabric_peer some_peer() {
  return fabric_peer{"tcp;ofi_rxm", {1, 2, 3, 255}, {{1ull << 63, 4096, 77}, {4096, 1, 0}}, true};
}

} // namespace

CAF_TEST_FIXTURE_SCOPE(messages_tests, messages_fixture)

CAF_TEST(every message type round - trips through caf serialization) {
  auto req = make_request(5, 7, 3, 100, 900);
  req.peer = 4;
  round_trip(remote_region{1ull << 63, 1ull << 40, 123});
  round_trip(some_peer());
  round_trip(connect_peer{some_peer()});
  round_trip(block{UINT64_MAX - 5, 1, 5});
  round_trip(page_run{3, 4, 5});
  round_trip(req.plan);
  round_trip(req.ptrs);
  round_trip(req);
  round_trip(setup{{req, make_request(6, 0, 3)}});
  round_trip(room_refusal{6, make_error(lserr::duplicate_room, "room 6 is already active")});
  round_trip(setup_result{{room_refusal{6, make_error(lserr::duplicate_room, "active")},
                           room_refusal{7, make_error(lserr::bad_input, "bad pointers")}}});
  round_trip(layer_end{9, nullptr}); // the event is process-local: never serialized
  round_trip(event_ready{2, make_error(lserr::event_failed, "sticky error")});
  round_trip(submit{5, 2, 4, {{1, 2, 3}, {4, 5, 6}}});
  round_trip(submit_done{5, 2, make_error(lserr::transfer_failed, "fi_writemsg: -5"), 0});
  round_trip(submit_done{5, 2, caf::error{}, 12345});
  round_trip(room_blocks{7, 3});
  round_trip(submit_batch{2, 4, {{5, 2}, {6, 0}}, {{1, 2, 3}, {4, 5, 6}}});
  round_trip(submit_batch_done{
      2, {{5, 2, caf::error{}, 6, 1234}, {6, 2, make_error(lserr::out_of_region, "page 9"), 0}}});
  round_trip(finish{5});
  round_trip(finish_result{5, make_error(lserr::timeout, "late"), 2, 99});
  round_trip(finish_result{5, make_error(lserr::missing_layer, "2 layers"), 1, 98, {0, 3}});
  round_trip(finish_result{5, {}, 2, 100, {}, 1ll << 60});
  round_trip(finish_deadline{5});
  round_trip(transfer_info{
      42, 1000, some_peer(), {9, 8, 7}, {1, 2}, {3, 4}, {64, 64, 32, 32}, 2, {0xab, 0xcd}});
  round_trip(kv_ready{42, 1, make_error(lserr::peer_lost, "rank 1 lost"), 7});
  round_trip(batch_done{3, -1, 1ll << 62, {120, 95}, {}});
  round_trip(
      batch_done{4, 10, 20, {}, make_error(lserr::event_failed, "kv_fill launch: no device")});
  round_trip(hold_forward{16, 7, caf::timespan{std::chrono::seconds(10)}});
  round_trip(stats_query{});
  round_trip(scheduler_stats{1, 2, 3, {4, 5}, {6}, {12}, {7, 8}, 9, 10, 11});
  round_trip(open_room{1, 2});
  round_trip(room_result{1, make_error(lserr::bad_input, "bytes differ"), 3, true, 4, 5});
  round_trip(close_room{1});
  round_trip(room_status_query{1});
  round_trip(room_deadline{2, 9});
  round_trip(room_status{1, room_state::failed, "why"});
}

CAF_TEST(an error keeps its code and message across the wire) {
  auto err = make_error(lserr::out_of_region, "dst 0x10 outside region 0");
  auto msg = caf::make_message(kv_ready{1, 0, err, 0});
  std::vector<char> buf;
  caf::binary_serializer sink{sys, buf};
  CAF_REQUIRE(!sink(msg));
  caf::message copy;
  caf::binary_deserializer source{sys, buf};
  CAF_REQUIRE(!source(copy));
  auto got = copy.get_as<kv_ready>(0).status;
  CAF_CHECK(is(got, lserr::out_of_region));
  CAF_CHECK_EQUAL(describe(got), "out_of_region: dst 0x10 outside region 0");
}

CAF_TEST(a 5 - byte hostile length is refused with an error instead of allocating 4 GiB) {
  size_t largest = 0;
  // A nonce (std::vector<uint8_t>: CAF 0.17 would resize it to the claimed length first).
  auto err = decode<auth_hello>(hostile_length, largest);
  CAF_CHECK(is(err, lserr::bad_input));
  CAF_MESSAGE(describe(err));
  CAF_CHECK_LESS(largest, size_t{1} << 16);
  // The same nested: a transfer_info's fabric address.
  std::vector<char> bytes = encode(transfer_info{42, 7, {}, {}, {}, {}, {}, 1, {}});
  bytes.resize(8 + 8 + 1); // room, prompt_tokens, the peer's provider (empty); then its address
  append(bytes, hostile_length);
  err = decode<transfer_info>(bytes, largest);
  CAF_CHECK(is(err, lserr::bad_input));
  CAF_CHECK_LESS(largest, size_t{1} << 16);
  // A sequence of 64-bit values claiming more elements than bytes are left.
  bytes = encode(transfer_info{42, 7, {}, {}, {}, {}, {}, 1, {}});
  // ... empty address, empty regions, the virt_addr flag; then dst_pages
  bytes.resize(8 + 8 + 1 + 1 + 1 + 1);
  append(bytes, hostile_length);
  err = decode<transfer_info>(bytes, largest);
  CAF_CHECK(is(err, lserr::bad_input));
  CAF_CHECK_LESS(largest, size_t{1} << 16);
  // A string: binary_deserializer checks its length against the bytes left itself.
  bytes = encode(room_status{1, room_state::failed, ""});
  bytes.pop_back();
  append(bytes, hostile_length);
  err = decode<room_status>(bytes, largest);
  CAF_CHECK(err);
  CAF_CHECK_LESS(largest, size_t{1} << 16);
}

CAF_TEST(a hostile length inside an error context is refused too) {
  // A kv_ready whose status carries a CAF built-in std::vector<char>: the
  // bound applies to everything decoded inside our types.
  caf::error status{static_cast<uint8_t>(lserr::bad_input), caf::atom("lserr"),
                    caf::make_message(std::vector<char>(10, 'A'))};
  auto bytes = encode(kv_ready{1, 0, status, 0});
  const std::string tail = std::string{"\x0a"} + std::string(10, 'A');
  auto at = std::string{bytes.begin(), bytes.end()}.find(tail);
  CAF_REQUIRE(at != std::string::npos);
  bytes.resize(at);
  append(bytes, hostile_length);
  size_t largest = 0;
  // CAF drops the error of a context message (error::apply): the refusal
  // sticks, so the next field of kv_ready fails with it.
  auto err = decode<kv_ready>(bytes, largest);
  CAF_CHECK(is(err, lserr::bad_input));
  CAF_CHECK_LESS(largest, size_t{1} << 16);
}

CAF_TEST(a submit_batch whose block counts do not cut its list cleanly is refused) {
  const block b{1, 2, 3};
  submit_batch ok{0, 0, {{5, 2}, {6, 0}, {7, 1}}, {b, b, b}};
  CAF_CHECK(!check_block_counts(ok));
  std::vector<std::pair<room_id, size_t>> seen;
  for_each_room(
      ok, [&](size_t, room_id room, block_span blocks) { seen.emplace_back(room, blocks.size()); });
  CAF_CHECK(seen == (std::vector<std::pair<room_id, size_t>>{{5, 2}, {6, 0}, {7, 1}}));
  submit_batch too_many{0, 0, {{5, 2}, {6, 2}}, {b, b, b}}; // room 6 runs past the end
  auto err = check_block_counts(too_many);
  CAF_CHECK(is(err, lserr::bad_input));
  CAF_CHECK(describe(err).find("room 6") != std::string::npos);
  submit_batch left_over{0, 0, {{5, 1}}, {b, b}}; // one block belongs to no room
  CAF_CHECK(is(check_block_counts(left_over), lserr::bad_input));
  submit_batch huge{0, 0, {{5, ~uint64_t{0}}, {6, 2}}, {b}}; // no wrap-around
  CAF_CHECK(is(check_block_counts(huge), lserr::bad_input));
}

CAF_TEST(no error is none of the codes and describes itself as ok) {
  caf::error none;
  CAF_CHECK(!is(none, lserr::missing_layer));
  CAF_CHECK(!is(none, lserr::none));
  CAF_CHECK_EQUAL(describe(none), "ok");
  CAF_CHECK_EQUAL(message_of(none), "ok");
}

CAF_TEST(the first failure is kept unless a later one says writes may still land) {
  caf::error kept;
  CAF_CHECK(!keep_failure(kept, caf::error{}));
  CAF_CHECK(!kept);
  CAF_CHECK(keep_failure(kept, make_error(lserr::timeout, "first")));
  CAF_CHECK(!keep_failure(kept, make_error(lserr::transfer_failed, "second")));
  CAF_CHECK_EQUAL(message_of(kept), "first");
  // Decode keeps its pages only if it hears writes_in_flight: it wins.
  CAF_CHECK(keep_failure(kept, make_error(lserr::writes_in_flight, "third")));
  CAF_CHECK(!keep_failure(kept, make_error(lserr::writes_in_flight, "fourth")));
  CAF_CHECK(!keep_failure(kept, make_error(lserr::timeout, "fifth")));
  CAF_CHECK_EQUAL(describe(kept), "writes_in_flight: third (after timeout: first)");
}

CAF_TEST_FIXTURE_SCOPE_END()
