// The transport actor on a real actor system (its worker is a real thread,
// so not the deterministic test coordinator), tcp;ofi_rxm or shm on loopback:
// connect_peer -> peer_id, submit -> submit_done with the bytes verified at
// the target. Every request has a finite timeout.
#include <algorithm>
#include <chrono>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include <caf/actor_system.hpp>
#include <caf/actor_system_config.hpp>
#include <caf/scoped_actor.hpp>
#include <caf/send.hpp>
#include <gtest/gtest.h>

#include "common/trace.hpp"
#include "tests/transport/fabric_test_util.hpp"
#include "transport/transport_actor.hpp"

namespace layerstream {
namespace {

using namespace std::chrono_literals;

class TransportActor : public ::testing::TestWithParam<std::string> {
 protected:
  TransportActor() : sys_{init_config(cfg_)} {}

  static caf::actor_system_config& init_config(caf::actor_system_config& cfg) {
    add_message_types(cfg);
    return cfg;
  }

  void SetUp() override {
    src_.resize(8 << 20);
    dst_.resize(8 << 20);
    fabric_target::config tcfg;
    tcfg.fabric.provider = GetParam();
    tcfg.regions = {{dst_.data(), dst_.size()}};
    auto t = fabric_target::open(tcfg);
    if (!t)
      LS_SKIP_IF_PROVIDER_MISSING(GetParam(), describe(t.error()));
    target_ = std::move(*t);
    transport_config cfg;
    cfg.fabric.provider = GetParam();
    cfg.regions = {{src_.data(), src_.size()}};
    cfg.write_timeout = 5s;
    auto a = spawn_transport(sys_, cfg);
    ASSERT_TRUE(a) << describe(a.error());
    transport_ = *a;
  }

  void TearDown() override {
    if (transport_) {
      caf::anon_send_exit(transport_, caf::exit_reason::user_shutdown);
      transport_ = nullptr;
    }
  }

  caf::expected<peer_id> connect(const fabric_peer& peer) {
    caf::scoped_actor self{sys_};
    caf::expected<peer_id> out{make_error(lserr::timeout, "no answer")};
    self->request(transport_, 10s, connect_peer{peer})
        .receive([&](peer_id id) { out = id; }, [&](caf::error& err) { out = std::move(err); });
    return out;
  }

  caf::expected<submit_done> send_submit(submit msg) {
    caf::scoped_actor self{sys_};
    caf::expected<submit_done> out{make_error(lserr::timeout, "no answer")};
    self->request(transport_, 20s, std::move(msg))
        .receive([&](submit_done& d) { out = std::move(d); },
                 [&](caf::error& err) { out = std::move(err); });
    return out;
  }

  caf::actor_system_config cfg_;
  caf::actor_system sys_;
  std::vector<uint8_t> src_, dst_;
  std::unique_ptr<fabric_target> target_;
  transport_actor transport_;
};

TEST_P(TransportActor, SubmitIsAnsweredWithSubmitDoneOnceTheBytesAreAtTheTarget) {
  auto peer = connect(target_->peer());
  ASSERT_TRUE(peer) << describe(peer.error());
  auto again = connect(target_->peer());
  ASSERT_TRUE(again) << describe(again.error());
  EXPECT_EQ(*again, *peer) << "the same address and regions must give the same peer id";

  std::mt19937_64 rng{3};
  test::fill_random(src_, rng);
  std::vector<block> blocks;
  uint64_t bytes = 0;
  for (uint64_t page = 0; page < 64; ++page) { // reversed pages: 64 separate blocks
    blocks.push_back(
        {test::addr_of(src_, page * 65536), test::addr_of(dst_, (63 - page) * 65536), 65536});
    bytes += 65536;
  }
  const auto sent_ns = steady_ns();
  auto done = send_submit(submit{42, 3, *peer, blocks});
  const auto answered_ns = steady_ns();
  ASSERT_TRUE(done) << describe(done.error());
  EXPECT_FALSE(done->status) << describe(done->status);
  EXPECT_EQ(done->room, 42u);
  EXPECT_EQ(done->layer, 3u);
  EXPECT_EQ(done->bytes, bytes);
  // When the engine saw the last write delivered: after the submit, before
  // the answer came back (the exposed tail ends there, not at the answer).
  EXPECT_GE(done->delivered_ns, sent_ns);
  EXPECT_LE(done->delivered_ns, answered_ns);
  for (uint64_t page = 0; page < 64; ++page)
    ASSERT_EQ(std::memcmp(dst_.data() + (63 - page) * 65536, src_.data() + page * 65536, 65536), 0)
        << "page " << page;
}

TEST_P(TransportActor, SubmitsToAnUnknownPeerOrOutsideTheRegionFailWithNothingWritten) {
  auto peer = connect(target_->peer());
  ASSERT_TRUE(peer) << describe(peer.error());
  std::fill(src_.begin(), src_.end(), uint8_t{1});
  auto unknown =
      send_submit(submit{1, 0, *peer + 7, {{test::addr_of(src_), test::addr_of(dst_), 8}}});
  ASSERT_TRUE(unknown) << describe(unknown.error());
  EXPECT_TRUE(unknown->status);
  auto outside = send_submit(
      submit{2, 1, *peer, {{test::addr_of(src_), test::addr_of(dst_, dst_.size() - 4), 8}}});
  ASSERT_TRUE(outside) << describe(outside.error());
  EXPECT_TRUE(is(outside->status, lserr::out_of_region)) << describe(outside->status);
  EXPECT_EQ(outside->room, 2u);
  EXPECT_TRUE(std::all_of(dst_.begin(), dst_.end(), [](uint8_t b) { return b == 0; }));
}

TEST_P(TransportActor, ASubmitBatchAnswersEveryRoomInOrderAndAFailedRoomSparesItsNeighbours) {
  auto peer = connect(target_->peer());
  ASSERT_TRUE(peer) << describe(peer.error());
  std::mt19937_64 rng{5};
  test::fill_random(src_, rng);
  // Rooms 10 and 12 write 16 pages each; room 11's one block leaves the region.
  submit_batch batch{7, *peer, {}, {}};
  for (room_id room : {10, 11, 12}) {
    std::vector<block> blocks;
    if (room == 11) {
      blocks.push_back({test::addr_of(src_), test::addr_of(dst_, dst_.size() - 4), 8});
    } else {
      const uint64_t first = (room - 10) * 16;
      for (uint64_t page = first; page < first + 16; ++page)
        blocks.push_back(
            {test::addr_of(src_, page * 4096), test::addr_of(dst_, page * 4096), 4096});
    }
    batch.add_room(room, blocks);
  }
  caf::scoped_actor self{sys_};
  caf::expected<submit_batch_done> done{make_error(lserr::timeout, "no answer")};
  self->request(transport_, 20s, batch)
      .receive([&](submit_batch_done& d) { done = std::move(d); },
               [&](caf::error& err) { done = std::move(err); });
  ASSERT_TRUE(done) << describe(done.error());
  EXPECT_EQ(done->layer, 7u);
  ASSERT_EQ(done->rooms.size(), 3u);
  for (size_t k = 0; k < 3; ++k) {
    EXPECT_EQ(done->rooms[k].room, 10u + k);
    EXPECT_EQ(done->rooms[k].layer, 7u);
  }
  EXPECT_FALSE(done->rooms[0].status) << describe(done->rooms[0].status);
  EXPECT_TRUE(is(done->rooms[1].status, lserr::out_of_region)) << describe(done->rooms[1].status);
  EXPECT_FALSE(done->rooms[2].status) << describe(done->rooms[2].status);
  EXPECT_EQ(done->rooms[0].bytes, 16u * 4096);
  EXPECT_EQ(done->rooms[1].bytes, 0u);
  EXPECT_EQ(done->rooms[2].bytes, 16u * 4096);
  // Delivered rooms say when; the refused one has no delivery time.
  EXPECT_GT(done->rooms[0].delivered_ns, 0);
  EXPECT_EQ(done->rooms[1].delivered_ns, 0);
  EXPECT_GT(done->rooms[2].delivered_ns, 0);
  // Rooms 10 and 12 landed (pages 0..15 and 32..47); room 11 wrote nothing.
  EXPECT_EQ(std::memcmp(dst_.data(), src_.data(), 16 * 4096), 0);
  EXPECT_EQ(std::memcmp(dst_.data() + 32 * 4096, src_.data() + 32 * 4096, 16 * 4096), 0);
  EXPECT_TRUE(std::all_of(dst_.end() - 4, dst_.end(), [](uint8_t b) { return b == 0; }));
}

TEST_P(TransportActor, ASubmitBatchWhoseBlockCountsDoNotAddUpFailsEveryRoomAndWritesNothing) {
  auto peer = connect(target_->peer());
  ASSERT_TRUE(peer) << describe(peer.error());
  std::mt19937_64 rng{6};
  test::fill_random(src_, rng);
  // Two good blocks, but the rooms claim three: no room's part can be trusted.
  const block good{test::addr_of(src_), test::addr_of(dst_), 4096};
  submit_batch batch{3, *peer, {{20, 1}, {21, 2}}, {good, good}};
  caf::scoped_actor self{sys_};
  caf::expected<submit_batch_done> done{make_error(lserr::timeout, "no answer")};
  self->request(transport_, 20s, batch)
      .receive([&](submit_batch_done& d) { done = std::move(d); },
               [&](caf::error& err) { done = std::move(err); });
  ASSERT_TRUE(done) << describe(done.error());
  ASSERT_EQ(done->rooms.size(), 2u);
  for (size_t k = 0; k < 2; ++k) {
    EXPECT_EQ(done->rooms[k].room, 20u + k);
    EXPECT_TRUE(is(done->rooms[k].status, lserr::bad_input)) << describe(done->rooms[k].status);
    EXPECT_EQ(done->rooms[k].bytes, 0u);
  }
  EXPECT_TRUE(std::all_of(dst_.begin(), dst_.end(), [](uint8_t b) { return b == 0; }));
}

TEST_P(TransportActor, APeerOnAnotherProviderIsRefused) {
  fabric_peer other = target_->peer();
  other.provider = "efa";
  auto peer = connect(other);
  ASSERT_FALSE(peer);
  EXPECT_TRUE(is(peer.error(), lserr::bad_input)) << describe(peer.error());
  // Naming no provider is no wildcard.
  other.provider.clear();
  peer = connect(other);
  EXPECT_FALSE(peer) << "a peer with no provider was connected";
}

TEST_P(TransportActor, APeerWhoseRegionsAreAddressedTheOtherWayIsRefused) {
  // A virtual address read as an offset (or back) would put the bytes
  // elsewhere: tcp has offsets here, shm virtual addresses.
  fabric_peer other = target_->peer();
  other.virt_addr = !other.virt_addr;
  auto peer = connect(other);
  ASSERT_FALSE(peer) << "a peer addressed the other way was connected";
  EXPECT_TRUE(is(peer.error(), lserr::bad_input)) << describe(peer.error());
  EXPECT_NE(describe(peer.error()).find("addressed by"), std::string::npos)
      << describe(peer.error());
  // Its own description connects.
  EXPECT_TRUE(connect(target_->peer()));
}

// A device-memory region makes spawn_transport open its endpoint with
// FI_HMEM; sockets has none in any libfabric, so the transport is refused
// with the provider's name and the reason, before anything is registered.
TEST(TransportActorHmem, ADeviceRegionOverAProviderWithoutHmemIsRefusedWithTheReason) {
  caf::actor_system_config cfg;
  add_message_types(cfg);
  caf::actor_system sys{cfg};
  fabric::fabric_config plain;
  plain.provider = "sockets";
  if (auto ep = fabric::endpoint::open(plain); !ep)
    LS_SKIP_IF_PROVIDER_MISSING("sockets", describe(ep.error()));
  std::vector<uint8_t> buf(1 << 16);
  transport_config tcfg;
  tcfg.fabric.provider = "sockets";
  tcfg.regions = {{buf.data(), buf.size(), /*cuda=*/true, /*cuda_device=*/0}};
  auto t = spawn_transport(sys, tcfg);
  ASSERT_FALSE(t) << "a CUDA region cannot be registered without FI_HMEM";
  const auto why = describe(t.error());
  EXPECT_NE(why.find("FI_HMEM"), std::string::npos) << why;
  EXPECT_NE(why.find("sockets"), std::string::npos) << why;
}

INSTANTIATE_TEST_SUITE_P(Providers, TransportActor, ::testing::Values("tcp;ofi_rxm", "shm"),
                         test::provider_test_name);

} // namespace
} // namespace layerstream
