// The fabric layer on real providers, loopback, one process: a target
// endpoint (registered memory + target-progress worker) and an initiator
// endpoint + worker. Each test runs on tcp;ofi_rxm, net, shm and sockets; a
// provider missing here is skipped with its fi_getinfo error.
#include <algorithm>
#include <chrono>
#include <cstring>
#include <functional>
#include <memory>
#include <numeric>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <rdma/fabric.h>

#include "tests/transport/fabric_test_util.hpp"
#include "transport/fabric/endpoint.hpp"
#include "transport/fabric/engine.hpp"

namespace layerstream {
namespace {

using namespace std::chrono_literals;
using fabric::engine;

constexpr auto result_wait = 30s; // generous bound on any one job in these tests

class FabricEngine : public ::testing::TestWithParam<std::string> {
 protected:
  // Opens the target with [dst + adv_offset, + adv_len) registered and
  // advertised (the bytes around it are not) and the initiator over `src`.
  // Skips when the provider is missing.
  void open_pair(std::vector<uint8_t>& src, std::vector<uint8_t>& dst, uint64_t adv_offset,
                 uint64_t adv_len, fabric::fabric_config init_cfg = {},
                 std::chrono::milliseconds timeout = 10s,
                 std::shared_ptr<fabric::fault_injector> faults = nullptr) {
    fabric::fabric_config target_cfg;
    target_cfg.provider = GetParam();
    auto tep = fabric::endpoint::open(target_cfg);
    if (!tep)
      LS_SKIP_IF_PROVIDER_MISSING(GetParam(), describe(tep.error()));
    auto treg = (*tep)->register_memory(dst.data() + adv_offset, adv_len, FI_REMOTE_WRITE);
    ASSERT_TRUE(treg) << describe(treg.error());
    target_name_ = (*tep)->name();
    region_ = {treg->base, treg->length, treg->key};
    auto teng = engine::start(std::move(*tep), engine::role::target, nullptr, 0ms);
    ASSERT_TRUE(teng) << describe(teng.error());
    target_ = std::move(*teng);

    init_cfg.provider = GetParam();
    auto iep = fabric::endpoint::open(init_cfg);
    ASSERT_TRUE(iep) << describe(iep.error());
    auto ireg = (*iep)->register_memory(src.data(), src.size(), FI_WRITE);
    ASSERT_TRUE(ireg) << describe(ireg.error());
    auto ieng = engine::start(std::move(*iep), engine::role::initiator, done_.callback(), timeout,
                              std::move(faults));
    ASSERT_TRUE(ieng) << describe(ieng.error());
    initiator_ = std::move(*ieng);
    auto peer = initiator_->add_peer(target_name_, {region_});
    ASSERT_TRUE(peer) << describe(peer.error());
    peer_ = *peer;
  }

  // Submits and waits; returns the result (fails the test on a hang).
  fabric::job_result run_job(uint64_t id, const std::vector<block>& blocks) {
    auto err = initiator_->submit(id, peer_, blocks);
    EXPECT_FALSE(err) << describe(err);
    if (err)
      return {id, err, 0};
    auto r = done_.wait(id, result_wait);
    EXPECT_TRUE(r.has_value()) << "job " << id << " never completed";
    return r ? *r : fabric::job_result{id, make_error(lserr::timeout, "test wait"), 0};
  }

  // Targets A (`len` bytes at dst_) and B (open_second_target) for the
  // tests where job 3's writes (to A) meet errors without context as `kind`
  // says:
  // src_ holds 2 x `len` random bytes (seeded), writes are 16 KiB, at most
  // `max_in_flight` at once. Returns early if the provider is skipped.
  void open_targets_failing_job_3(uint64_t len, uint64_t seed, fabric::job_fault kind,
                                  size_t max_in_flight) {
    auto& src = sized(src_, 2 * len);
    auto& dst = sized(dst_, len);
    std::mt19937_64 rng{seed};
    test::fill_random(src, rng);
    auto faults = std::make_shared<fabric::job_faults>(std::set<uint64_t>{3}, kind);
    fabric::fabric_config init_cfg;
    init_cfg.max_write_size = 16 << 10;
    init_cfg.max_in_flight = max_in_flight;
    ASSERT_NO_FATAL_FAILURE(open_pair(src, dst, 0, dst.size(), init_cfg, 10s, faults));
    if (IsSkipped())
      return;
    ASSERT_NO_FATAL_FAILURE(open_second_target(2, test::addr_of(src)));
  }

  // A second target, B, over dst_b_ (64 KiB), known to the initiator as
  // peer_b_ at region_b_; job `warm_id` (4 KiB from `src_addr`) brings its
  // connection up. For the tests where one peer fails or stalls and the
  // other must not.
  void open_second_target(uint64_t warm_id, uint64_t src_addr) {
    dst_b_.assign(64 << 10, 0);
    fabric::fabric_config b_cfg;
    b_cfg.provider = GetParam();
    auto bep = fabric::endpoint::open(b_cfg);
    ASSERT_TRUE(bep) << describe(bep.error());
    auto breg = (*bep)->register_memory(dst_b_.data(), dst_b_.size(), FI_REMOTE_WRITE);
    ASSERT_TRUE(breg) << describe(breg.error());
    region_b_ = {breg->base, breg->length, breg->key};
    auto b_name = (*bep)->name();
    auto beng = engine::start(std::move(*bep), engine::role::target, nullptr, 0ms);
    ASSERT_TRUE(beng) << describe(beng.error());
    target_b_ = std::move(*beng);
    auto peer_b = initiator_->add_peer(b_name, {region_b_});
    ASSERT_TRUE(peer_b) << describe(peer_b.error());
    peer_b_ = *peer_b;
    ASSERT_FALSE(initiator_->submit(warm_id, peer_b_, {{src_addr, region_b_.base, 4096}}));
    auto warm = done_.wait(warm_id, result_wait);
    ASSERT_TRUE(warm && !warm->status);
  }

  // Why GetParam() cannot run a test in which the target's engine stops
  // with the initiator's writes in flight and the initiator is then closed
  // (empty: it can).
  std::string why_writes_cannot_stick() const {
    if (GetParam() == "sockets")
      return "sockets: the provider's own thread moves a target's data, so a target whose "
             "engine stops does not stall its writes";
    if (GetParam() == "shm")
      return "shm: closing an initiator endpoint with writes in flight inside the same process "
             "can crash libfabric 1.17 shm (see StoppingWithWritesInFlight...)";
    return {};
  }

  void TearDown() override {
    initiator_.reset();
    target_.reset();
    target_b_.reset();
  }

  // The registered buffers live in the fixture, declared before the engines:
  // a provider thread (sockets, tcp) may still touch them until the engines
  // are closed in TearDown, after the test body's locals are gone.
  static std::vector<uint8_t>& sized(std::vector<uint8_t>& buf, uint64_t len) {
    buf.assign(len, 0);
    return buf;
  }
  std::vector<uint8_t> src_, dst_, dst_b_;
  test::completions done_; // outlives the engines that call it
  std::vector<uint8_t> target_name_;
  fabric::remote_range region_;
  std::unique_ptr<engine> target_;
  std::unique_ptr<engine> initiator_;
  fabric::peer_index peer_ = 0;
  fabric::remote_range region_b_;
  std::unique_ptr<engine> target_b_;
  fabric::peer_index peer_b_ = 0;
};

TEST_P(FabricEngine, RandomPageLayoutsOfSeveralLayersLandByteForByte) {
  constexpr uint64_t pool = 64ull << 20;
  auto& src = sized(src_, pool);
  auto& dst = sized(dst_, pool);
  std::vector<uint8_t> expected(pool);
  ASSERT_NO_FATAL_FAILURE(open_pair(src, dst, 0, pool));
  if (IsSkipped())
    return;
  std::mt19937_64 rng{0x1a7e45};
  // Per layer: page size and page count; the last layer is the full 64 MiB.
  struct layer_shape {
    uint64_t page;
    uint64_t pages;
  };
  const std::vector<layer_shape> layers = {
      {4096, 1}, {16384, 37}, {65536, 300}, {8192, 1000}, {1ull << 20, 64}};
  uint64_t id = 1;
  for (const auto& shape : layers) {
    const uint64_t slots = pool / shape.page;
    std::vector<uint64_t> src_pages(slots), dst_pages(slots);
    std::iota(src_pages.begin(), src_pages.end(), 0);
    std::iota(dst_pages.begin(), dst_pages.end(), 0);
    std::shuffle(src_pages.begin(), src_pages.end(), rng);
    std::shuffle(dst_pages.begin(), dst_pages.end(), rng);
    // Keep some runs contiguous so blocks have mixed lengths.
    std::sort(dst_pages.begin(), dst_pages.begin() + shape.pages / 2);
    std::sort(src_pages.begin(), src_pages.begin() + shape.pages / 2);
    test::fill_random(src, rng);
    std::fill(dst.begin(), dst.end(), uint8_t{0});
    std::fill(expected.begin(), expected.end(), uint8_t{0});
    std::vector<block> blocks;
    uint64_t bytes = 0;
    for (uint64_t i = 0; i < shape.pages; ++i) {
      const uint64_t s = src_pages[i] * shape.page, d = dst_pages[i] * shape.page;
      if (!blocks.empty() && blocks.back().src + blocks.back().len == test::addr_of(src, s) &&
          blocks.back().dst + blocks.back().len == test::addr_of(dst, d))
        blocks.back().len += shape.page;
      else
        blocks.push_back({test::addr_of(src, s), test::addr_of(dst, d), shape.page});
      std::memcpy(expected.data() + d, src.data() + s, shape.page);
      bytes += shape.page;
    }
    auto r = run_job(id++, blocks);
    ASSERT_FALSE(r.status) << describe(r.status);
    EXPECT_EQ(r.bytes, bytes);
    ASSERT_EQ(std::memcmp(dst.data(), expected.data(), pool), 0)
        << "layer with page " << shape.page << " x " << shape.pages << " differs";
  }
}

TEST_P(FabricEngine, DstRangeOutsideTheAdvertisedRegionIsRefusedWithNothingWritten) {
  auto& src = sized(src_, 1 << 20);
  auto& dst = sized(dst_, 1 << 20);
  const uint64_t adv_off = 4096, adv_len = 64 * 1024;
  ASSERT_NO_FATAL_FAILURE(open_pair(src, dst, adv_off, adv_len));
  if (IsSkipped())
    return;
  std::fill(src.begin(), src.end(), uint8_t{0x5a});
  std::fill(dst.begin(), dst.end(), uint8_t{0xab});
  const std::vector<uint8_t> before = dst;
  // One valid block, then one that runs 1 byte past the region's end, then
  // one just before the region's start: the whole job must be refused.
  const std::vector<std::vector<block>> bad_jobs = {
      {{test::addr_of(src), test::addr_of(dst, adv_off), 4096},
       {test::addr_of(src), test::addr_of(dst, adv_off + adv_len - 100), 101}},
      {{test::addr_of(src), test::addr_of(dst, adv_off - 1), 16}},
      {{test::addr_of(src), ~uint64_t{0} - 8, 16}},
  };
  for (const auto& blocks : bad_jobs) {
    auto err = initiator_->submit(7, peer_, blocks);
    ASSERT_TRUE(err) << "an out-of-region job was accepted";
    EXPECT_TRUE(is(err, lserr::out_of_region)) << describe(err);
  }
  // A src range outside the local registration is refused too.
  auto err = initiator_->submit(
      8, peer_, {{test::addr_of(src, src.size() - 8), test::addr_of(dst, adv_off), 16}});
  EXPECT_TRUE(is(err, lserr::out_of_region)) << describe(err);
  EXPECT_EQ(initiator_->stats().writes_posted.load(), 0u);
  // A valid job afterwards completes; only its bytes change.
  auto r = run_job(9, {{test::addr_of(src), test::addr_of(dst, adv_off), adv_len}});
  ASSERT_FALSE(r.status) << describe(r.status);
  EXPECT_EQ(done_.calls(7), 0) << "a refused job must get no callback";
  std::vector<uint8_t> expected = before;
  std::fill(expected.begin() + adv_off, expected.begin() + adv_off + adv_len, uint8_t{0x5a});
  EXPECT_TRUE(dst == expected) << "bytes outside the valid job's range changed";
}

TEST_P(FabricEngine, WritesLargerThanTheMaxMessageSizeAreSplit) {
  auto& src = sized(src_, 4 << 20);
  auto& dst = sized(dst_, 4 << 20);
  fabric::fabric_config cfg;
  cfg.max_write_size = 64 * 1024;
  ASSERT_NO_FATAL_FAILURE(open_pair(src, dst, 0, dst.size(), cfg));
  if (IsSkipped())
    return;
  EXPECT_EQ(initiator_->max_msg_size(), 64u * 1024);
  std::mt19937_64 rng{7};
  test::fill_random(src, rng);
  const uint64_t len = (1 << 20) + 10; // 16 full writes + one of 10 bytes
  auto r = run_job(1, {{test::addr_of(src, 3), test::addr_of(dst, 5), len}});
  ASSERT_FALSE(r.status) << describe(r.status);
  EXPECT_EQ(r.bytes, len);
  EXPECT_EQ(initiator_->stats().writes_posted.load(), 17u);
  EXPECT_EQ(std::memcmp(dst.data() + 5, src.data() + 3, len), 0);
  EXPECT_EQ(dst[4], 0);
  EXPECT_EQ(dst[5 + len], 0);
}

TEST_P(FabricEngine, SmallBlocksOfAJobShareWritesUpToTheIovLimitAndTheMaxMessageSize) {
  auto& src = sized(src_, 1 << 20);
  auto& dst = sized(dst_, 1 << 20);
  fabric::fabric_config cfg;
  cfg.max_write_size = 4096;
  ASSERT_NO_FATAL_FAILURE(open_pair(src, dst, 0, dst.size(), cfg));
  if (IsSkipped())
    return;
  // tcp and net offer 4 pairs, sockets 8; shm is held to 1 (a multi-range
  // write on its SAR path hangs in libfabric 1.17: endpoint.cpp).
  const uint64_t limit = initiator_->write_iov_limit();
  if (GetParam() == "shm")
    ASSERT_EQ(limit, 1u) << "shm must write one range per write";
  else
    ASSERT_GE(limit, 4u);
  std::mt19937_64 rng{23};
  test::fill_random(src, rng);
  // 1. Blocks of mixed small lengths, scattered with gaps, in reverse dst
  //    order: writes of `limit` ranges each, every byte where its block says.
  const uint64_t n = 3 * limit + 1;
  std::vector<block> blocks;
  std::vector<uint8_t> expected(dst.size(), 0);
  for (uint64_t i = 0; i < n; ++i) {
    // At most 208 bytes: 8 of them stay under the 4096-byte max_msg_size.
    const uint64_t len = 16 + 8 * i, src_off = 1000 * i, dst_off = 8192 * (n - i);
    blocks.push_back({test::addr_of(src, src_off), test::addr_of(dst, dst_off), len});
    std::memcpy(expected.data() + dst_off, src.data() + src_off, len);
  }
  auto r = run_job(1, blocks);
  ASSERT_FALSE(r.status) << describe(r.status);
  EXPECT_EQ(initiator_->stats().writes_posted.load(), (n + limit - 1) / limit);
  EXPECT_EQ(initiator_->stats().ranges_posted.load(), n);
  EXPECT_TRUE(dst == expected) << "a gathered write put bytes outside its blocks";

  // 2. A write stops at max_msg_size (4096), splitting the block it reaches:
  //    {1000, 3096 of 5000} then {the 1904 left, 100, 100}; one range per
  //    write where the limit is 1 (shm): {1000} {4096} {904} {100} {100}.
  std::fill(dst.begin(), dst.end(), uint8_t{0});
  std::fill(expected.begin(), expected.end(), uint8_t{0});
  const std::vector<std::pair<uint64_t, uint64_t>> shapes = {
      {1000, 0}, {5000, 20000}, {100, 40000}, {100, 50000}}; // {len, dst offset}
  blocks.clear();
  uint64_t src_off = 0;
  for (const auto& [len, dst_off] : shapes) {
    blocks.push_back({test::addr_of(src, src_off), test::addr_of(dst, dst_off), len});
    std::memcpy(expected.data() + dst_off, src.data() + src_off, len);
    src_off += len + 7;
  }
  const uint64_t writes_before = initiator_->stats().writes_posted.load();
  const uint64_t ranges_before = initiator_->stats().ranges_posted.load();
  r = run_job(2, blocks);
  ASSERT_FALSE(r.status) << describe(r.status);
  EXPECT_EQ(r.bytes, 6200u);
  EXPECT_EQ(initiator_->stats().writes_posted.load() - writes_before, limit == 1 ? 5u : 2u);
  EXPECT_EQ(initiator_->stats().ranges_posted.load() - ranges_before, 5u);
  EXPECT_TRUE(dst == expected) << "a write split at max_msg_size lost or moved bytes";
}

TEST_P(FabricEngine, MoreWritesThanTheTxDepthAllCompleteWithinTheWindow) {
  auto& src = sized(src_, 8 << 20);
  auto& dst = sized(dst_, 8 << 20);
  fabric::fabric_config cfg;
  cfg.max_write_iov = 1; // a write per block, so the blocks outnumber the depth
  ASSERT_NO_FATAL_FAILURE(open_pair(src, dst, 0, dst.size(), cfg));
  if (IsSkipped())
    return;
  EXPECT_EQ(initiator_->write_iov_limit(), 1u);
  const uint64_t depth = initiator_->tx_depth();
  const uint64_t n = 2 * depth + 7, len = 512;
  ASSERT_LE(n * 2 * len, dst.size());
  std::mt19937_64 rng{11};
  test::fill_random(src, rng);
  std::vector<block> blocks;
  for (uint64_t i = 0; i < n; ++i) // every other slot: no two blocks merge
    blocks.push_back({test::addr_of(src, i * len), test::addr_of(dst, 2 * i * len), len});
  auto r = run_job(1, blocks);
  ASSERT_FALSE(r.status) << describe(r.status);
  EXPECT_EQ(r.bytes, n * len);
  EXPECT_EQ(initiator_->stats().writes_posted.load(), n);
  EXPECT_LE(initiator_->stats().max_in_flight.load(), depth);
  for (uint64_t i = 0; i < n; ++i)
    ASSERT_EQ(std::memcmp(dst.data() + 2 * i * len, src.data() + i * len, len), 0) << i;
}

TEST_P(FabricEngine, AClosedTargetFailsTheJobWithinItsDeadlineAndLaterJobsAreRefused) {
  auto& src = sized(src_, 4 << 20);
  auto& dst = sized(dst_, 4 << 20);
  if (GetParam() == "shm")
    GTEST_SKIP() << "shm: closing a target endpoint inside the same process unmaps the shared "
                    "region the initiator still writes to (SIGSEGV inside libfabric 1.17); a "
                    "killed shm target needs two processes (the cluster tests)";
  const auto deadline = 2s;
  ASSERT_NO_FATAL_FAILURE(open_pair(src, dst, 0, dst.size(), {}, deadline));
  if (IsSkipped())
    return;
  // First contact works, then the target goes away.
  auto first = run_job(1, {{test::addr_of(src), test::addr_of(dst), 4096}});
  ASSERT_FALSE(first.status) << describe(first.status);
  target_.reset();
  const auto start = std::chrono::steady_clock::now();
  auto err = initiator_->submit(2, peer_, {{test::addr_of(src), test::addr_of(dst), 4 << 20}});
  ASSERT_FALSE(err) << describe(err);
  auto r = done_.wait(2, deadline + 5s);
  ASSERT_TRUE(r.has_value()) << "no answer within the deadline: the job hangs";
  const auto took = std::chrono::steady_clock::now() - start;
  EXPECT_TRUE(r->status) << "a write to a closed target reported success";
  EXPECT_LE(took, deadline + 1s);
  std::printf(
      "[ info     ] %s: closed target -> %s after %lld ms\n", GetParam().c_str(),
      describe(r->status).c_str(),
      static_cast<long long>(std::chrono::duration_cast<std::chrono::milliseconds>(took).count()));
  auto later = initiator_->submit(3, peer_, {{test::addr_of(src), test::addr_of(dst), 16}});
  EXPECT_TRUE(is(later, lserr::peer_lost)) << describe(later);
}

// The port of an IPv4 endpoint name (FI_SOCKADDR_IN), 0 for anything else.
uint16_t ipv4_port(const std::vector<uint8_t>& name) {
  sockaddr_in sin{};
  if (name.size() != sizeof(sin))
    return 0;
  std::memcpy(&sin, name.data(), sizeof(sin));
  return sin.sin_family == AF_INET ? ntohs(sin.sin_port) : 0;
}

TEST_P(FabricEngine, ATargetRestartedAtTheAddressOfAFailedOneIsANewHealthyPeer) {
  // A decode process dies and a new one binds the same address (a fixed
  // port, or the kernel picks the old one again) with new regions. The
  // failed peer stays failed; the new regions are a new, healthy peer on the
  // same AV entry, whose connection the provider opens again, and its job
  // lands.
  auto& src = sized(src_, 64 << 10);
  auto& dst = sized(dst_, 64 << 10);
  if (GetParam() == "shm")
    GTEST_SKIP() << "shm: closing a target endpoint inside the same process unmaps the shared "
                    "region the initiator still writes to (see above)";
  const auto deadline = 2s;
  ASSERT_NO_FATAL_FAILURE(open_pair(src, dst, 0, dst.size(), {}, deadline));
  if (IsSkipped())
    return;
  const uint16_t port = ipv4_port(target_name_);
  if (port == 0)
    GTEST_SKIP() << GetParam() << ": its endpoint name is not an IPv4 address";
  ASSERT_FALSE(run_job(1, {{test::addr_of(src), test::addr_of(dst), 4096}}).status);
  // The target dies; a job to it fails and marks the peer failed.
  target_.reset();
  ASSERT_FALSE(initiator_->submit(2, peer_, {{test::addr_of(src), test::addr_of(dst), 4096}}));
  auto lost = done_.wait(2, deadline + 5s);
  ASSERT_TRUE(lost.has_value()) << "the job to the closed target never ended";
  ASSERT_TRUE(lost->status) << "a write to a closed target reported success";
  ASSERT_NE(initiator_->peer_failure(peer_), "");

  // A new target at the same address, with other memory.
  dst_b_.assign(64 << 10, 0);
  fabric::fabric_config again;
  again.provider = GetParam();
  again.port = port;
  auto bep = fabric::endpoint::open(again);
  ASSERT_TRUE(bep) << "reopening port " << port << ": " << describe(bep.error());
  ASSERT_EQ((*bep)->name(), target_name_) << "the new target has another address";
  auto breg = (*bep)->register_memory(dst_b_.data(), dst_b_.size(), FI_REMOTE_WRITE);
  ASSERT_TRUE(breg) << describe(breg.error());
  region_b_ = {breg->base, breg->length, breg->key};
  auto beng = engine::start(std::move(*bep), engine::role::target, nullptr, 0ms);
  ASSERT_TRUE(beng) << describe(beng.error());
  target_b_ = std::move(*beng);

  // The old regions still name the failed peer; the new ones a new peer.
  auto old_again = initiator_->add_peer(target_name_, {region_});
  ASSERT_TRUE(old_again) << describe(old_again.error());
  EXPECT_EQ(*old_again, peer_);
  auto fresh = initiator_->add_peer(target_name_, {region_b_});
  ASSERT_TRUE(fresh) << describe(fresh.error());
  EXPECT_NE(*fresh, peer_);
  EXPECT_EQ(initiator_->peer_failure(*fresh), "");
  for (size_t i = 0; i < 8192; ++i)
    src[i] = static_cast<uint8_t>(i * 11 + 3);
  const auto posted = std::chrono::steady_clock::now();
  ASSERT_FALSE(initiator_->submit(3, *fresh, {{test::addr_of(src), region_b_.base + 4096, 8192}}));
  auto landed = done_.wait(3, deadline + 5s);
  std::printf("[ info     ] %s: restarted target's job ended after %lld ms\n", GetParam().c_str(),
              static_cast<long long>(std::chrono::duration_cast<std::chrono::milliseconds>(
                                         std::chrono::steady_clock::now() - posted)
                                         .count()));
  ASSERT_TRUE(landed.has_value()) << "the job to the restarted target never ended";
  EXPECT_FALSE(landed->status) << "the restarted target's job failed: " << describe(landed->status);
  EXPECT_EQ(std::memcmp(dst_b_.data() + 4096, src.data(), 8192), 0);
  EXPECT_TRUE(is(initiator_->submit(4, peer_, {{test::addr_of(src), test::addr_of(dst), 16}}),
                 lserr::peer_lost));
}

TEST_P(FabricEngine, ADeadPeerDoesNotHoldUpAnotherPeersJobs) {
  // One initiator, two targets. Target A goes away with a job queued for
  // it; a job for B, submitted after it, must still land, and B must stay
  // usable: a dead connection answers for itself (EAGAIN or an error), not
  // for every peer of the engine.
  if (GetParam() == "shm")
    GTEST_SKIP() << "shm: closing a target endpoint inside the same process unmaps the shared "
                    "region the initiator still writes to (see above)";
  // Job 3 (to A) reads [0, 4 MiB); job 4 (to B) its own 4 KiB after that,
  // written before either is submitted (A's provider may still read its range).
  auto& src = sized(src_, (4 << 20) + 4096);
  auto& dst = sized(dst_, 4 << 20);
  fabric::fabric_config init_cfg;
  init_cfg.max_write_size = 4096; // A's job is 1024 writes
  const auto deadline = 2s;
  ASSERT_NO_FATAL_FAILURE(open_pair(src, dst, 0, dst.size(), init_cfg, deadline));
  if (IsSkipped())
    return;
  // Both connections are up, then A goes away.
  ASSERT_FALSE(run_job(1, {{test::addr_of(src), test::addr_of(dst), 4096}}).status);
  for (size_t i = 0; i < 4096; ++i)
    src[i] = static_cast<uint8_t>(i * 7 + 1);
  ASSERT_NO_FATAL_FAILURE(open_second_target(2, test::addr_of(src)));
  const auto tail = test::addr_of(src) + (4 << 20);
  for (size_t i = 0; i < 4096; ++i)
    src[(4 << 20) + i] = static_cast<uint8_t>(i * 13 + 5);
  target_.reset();
  ASSERT_FALSE(initiator_->submit(3, peer_, {{test::addr_of(src), test::addr_of(dst), 4 << 20}}));
  ASSERT_FALSE(initiator_->submit(4, peer_b_, {{tail, region_b_.base + 4096, 4096}}));
  auto to_a = done_.wait(3, deadline + 5s);
  auto to_b = done_.wait(4, deadline + 5s);
  ASSERT_TRUE(to_a.has_value()) << "the job to the dead peer never ended";
  ASSERT_TRUE(to_b.has_value()) << "the job to the live peer never ended";
  std::printf("[ info     ] %s: dead peer A -> %s; live peer B -> %s; eagain retries %llu\n",
              GetParam().c_str(), describe(to_a->status).c_str(), describe(to_b->status).c_str(),
              static_cast<unsigned long long>(initiator_->stats().eagain_retries.load()));
  EXPECT_TRUE(to_a->status) << "a write to a closed target reported success";
  EXPECT_FALSE(to_b->status) << "the live peer's job failed: " << describe(to_b->status);
  EXPECT_EQ(std::memcmp(dst_b_.data() + 4096, src.data() + (4 << 20), 4096), 0);
  EXPECT_EQ(initiator_->peer_failure(peer_b_), "");
}

TEST_P(FabricEngine, AStalledPeerLeavesWriteSlotsForTheOthers) {
  // One initiator with 8 write slots, two targets. Target A stops making
  // progress but keeps its connection (a stalled decode process, not a dead
  // one): its writes are never delivery-complete and hold their slots. A
  // job for B, submitted while A's writes are stuck, must still land: no
  // peer may take every slot.
  if (GetParam() == "sockets")
    GTEST_SKIP() << "sockets: the provider's own thread moves a target's data, so a target "
                    "whose engine stops does not stall its writes";
  if (GetParam() == "shm")
    GTEST_SKIP() << "shm (libfabric 1.17): with one target of this process stalled, a write to "
                    "the other target of the same process was not delivery-complete either "
                    "(both jobs timed out, 1 write in flight each), so the slot cap cannot be "
                    "told apart here";
  auto& src = sized(src_, (4 << 20) + 4096);
  auto& dst = sized(dst_, 4 << 20);
  fabric::fabric_config init_cfg;
  init_cfg.max_in_flight = 8;
  init_cfg.max_write_size = 4096; // A's job is 1024 writes, far more than the slots
  init_cfg.max_write_iov = 1;
  const auto deadline = 2s;
  ASSERT_NO_FATAL_FAILURE(open_pair(src, dst, 0, dst.size(), init_cfg, deadline));
  if (IsSkipped())
    return;
  ASSERT_EQ(initiator_->tx_depth(), 8u);
  // Both connections are up, then A stops its progress (endpoint kept open).
  ASSERT_FALSE(run_job(1, {{test::addr_of(src), test::addr_of(dst), 4096}}).status);
  ASSERT_NO_FATAL_FAILURE(open_second_target(2, test::addr_of(src)));
  const auto tail = test::addr_of(src) + (4 << 20);
  for (size_t i = 0; i < 4096; ++i)
    src[(4 << 20) + i] = static_cast<uint8_t>(i * 11 + 3);
  target_->stop();
  const uint64_t posted_before = initiator_->stats().writes_posted.load();
  const uint64_t completed_before = initiator_->stats().writes_completed.load();
  ASSERT_FALSE(initiator_->submit(3, peer_, {{test::addr_of(src), test::addr_of(dst), 4 << 20}}));
  // Let A's job take what slots it may: wait (bounded) for its first write,
  // then until no more are posted for 200 ms.
  const auto settle_by = std::chrono::steady_clock::now() + 10s;
  uint64_t last = posted_before;
  auto last_change = std::chrono::steady_clock::now();
  while (std::chrono::steady_clock::now() < settle_by) {
    const uint64_t now_posted = initiator_->stats().writes_posted.load();
    if (now_posted != last) {
      last = now_posted;
      last_change = std::chrono::steady_clock::now();
    } else if (last != posted_before && std::chrono::steady_clock::now() - last_change > 200ms) {
      break;
    }
    std::this_thread::yield();
  }
  const uint64_t stuck = (initiator_->stats().writes_posted.load() - posted_before) -
                         (initiator_->stats().writes_completed.load() - completed_before);
  ASSERT_GT(stuck, 0u) << "A's writes did not stall: the test would prove nothing";
  ASSERT_FALSE(initiator_->submit(4, peer_b_, {{tail, region_b_.base + 4096, 4096}}));
  auto to_b = done_.wait(4, deadline + 5s);
  auto to_a = done_.wait(3, deadline + 5s);
  ASSERT_TRUE(to_b.has_value()) << "the job to the live peer never ended";
  ASSERT_TRUE(to_a.has_value()) << "the job to the stalled peer never ended";
  std::printf("[ info     ] %s: stalled peer A: %llu writes stuck -> %s; live peer B -> %s\n",
              GetParam().c_str(), static_cast<unsigned long long>(stuck),
              describe(to_a->status).c_str(), describe(to_b->status).c_str());
  EXPECT_LE(stuck, initiator_->tx_depth() / 2) << "one peer held more than half of the slots";
  // A's writes are still posted: its job must say they may still land.
  EXPECT_TRUE(is(to_a->status, lserr::writes_in_flight)) << describe(to_a->status);
  EXPECT_FALSE(to_b->status) << "the live peer's job failed: " << describe(to_b->status);
  EXPECT_EQ(std::memcmp(dst_b_.data() + 4096, src.data() + (4 << 20), 4096), 0);
  EXPECT_EQ(initiator_->peer_failure(peer_b_), "");
}

TEST_P(FabricEngine, StoppingWithWritesInFlightAnswersEveryJobOnceAndReturnsPromptly) {
  if (GetParam() == "shm")
    GTEST_SKIP() << "shm: closing an initiator endpoint with writes in flight inside the same "
                    "process unmaps the region the target's progress still reads (SIGSEGV inside "
                    "libfabric 1.17 shm under load, seen under ASan and TSan); a peer killed "
                    "mid-room needs two processes (tests/process)";
  auto& src = sized(src_, 16 << 20);
  auto& dst = sized(dst_, 16 << 20);
  ASSERT_NO_FATAL_FAILURE(open_pair(src, dst, 0, dst.size()));
  if (IsSkipped())
    return;
  constexpr uint64_t jobs = 32;
  for (uint64_t i = 0; i < jobs; ++i) {
    auto err = initiator_->submit(
        i + 1, peer_,
        {{test::addr_of(src, (i % 16) << 20), test::addr_of(dst, (i % 16) << 20), 1 << 20}});
    ASSERT_FALSE(err) << describe(err);
  }
  const auto start = std::chrono::steady_clock::now();
  initiator_->stop();
  EXPECT_LE(std::chrono::steady_clock::now() - start, 5s);
  ASSERT_TRUE(done_.wait_count(jobs, 1s));
  for (uint64_t i = 0; i < jobs; ++i) {
    EXPECT_EQ(done_.calls(i + 1), 1) << "job " << i + 1;
    auto r = done_.wait(i + 1, 0ms);
    ASSERT_TRUE(r.has_value());
    if (r->status) {
      // Queued jobs are cancelled; jobs with writes posted say they may land.
      EXPECT_TRUE(is(r->status, lserr::cancelled) || is(r->status, lserr::writes_in_flight))
          << describe(r->status);
    }
  }
  auto late = initiator_->submit(99, peer_, {{test::addr_of(src), test::addr_of(dst), 16}});
  EXPECT_TRUE(is(late, lserr::cancelled)) << describe(late);
  initiator_.reset(); // closes the fids with the writes cancelled
}

TEST_P(FabricEngine, StoppingWithWritesStuckAtAStalledPeerSaysTheyMayStillLand) {
  // The target stops making progress with its connection open, so the
  // writes the initiator posts are never delivery-complete. Stopping the
  // initiator then must not call them cancelled: the kernel may still
  // deliver them. Jobs that posted nothing are cancelled.
  if (auto why = why_writes_cannot_stick(); !why.empty())
    GTEST_SKIP() << why;
  auto& src = sized(src_, 4 << 20);
  auto& dst = sized(dst_, 4 << 20);
  fabric::fabric_config init_cfg;
  init_cfg.max_in_flight = 8;
  init_cfg.max_write_size = 64 << 10;
  init_cfg.max_write_iov = 1;
  ASSERT_NO_FATAL_FAILURE(open_pair(src, dst, 0, dst.size(), init_cfg, 60s));
  if (IsSkipped())
    return;
  ASSERT_FALSE(run_job(1, {{test::addr_of(src), test::addr_of(dst), 4096}}).status);
  target_->stop();
  const uint64_t posted_before = initiator_->stats().writes_posted.load();
  constexpr uint64_t jobs = 4;
  for (uint64_t i = 0; i < jobs; ++i)
    ASSERT_FALSE(initiator_->submit(
        10 + i, peer_, {{test::addr_of(src, i << 20), test::addr_of(dst, i << 20), 1 << 20}}));
  // Bounded wait for the first write to be posted.
  const auto by = std::chrono::steady_clock::now() + 10s;
  while (initiator_->stats().writes_posted.load() == posted_before &&
         std::chrono::steady_clock::now() < by)
    std::this_thread::yield();
  ASSERT_GT(initiator_->stats().writes_posted.load(), posted_before) << "nothing was posted";
  std::this_thread::sleep_for(100ms); // let it post what the slots allow
  ASSERT_EQ(done_.calls(10), 0) << "a job to the stalled peer ended before the stop";
  initiator_->stop();
  ASSERT_TRUE(done_.wait_count(jobs + 1, 5s));
  uint64_t in_flight = 0;
  for (uint64_t i = 0; i < jobs; ++i) {
    auto r = done_.wait(10 + i, 0ms);
    ASSERT_TRUE(r.has_value());
    EXPECT_EQ(done_.calls(10 + i), 1) << "job " << 10 + i;
    ASSERT_TRUE(r->status) << "job " << 10 + i << " succeeded against a stalled peer";
    if (is(r->status, lserr::writes_in_flight))
      ++in_flight;
    else
      EXPECT_TRUE(is(r->status, lserr::cancelled)) << describe(r->status);
  }
  // The first job took the peer's slots: its writes are out there.
  EXPECT_GE(in_flight, 1u) << "every job was reported cancelled although writes were posted";
  initiator_.reset();
}

// Fails job `job`'s first successful completion (fabric::job_faults) and,
// before the engine sees that error, calls `stall` on the engine's thread.
class fail_then_stall final : public fabric::fault_injector {
 public:
  fail_then_stall(uint64_t job, std::function<void()> stall)
      : faults_({job}), stall_(std::move(stall)) {}
  bool fail_completion(uint64_t job_id) override {
    if (!faults_.fail_completion(job_id))
      return false;
    stall_();
    return true;
  }

 private:
  fabric::job_faults faults_;
  std::function<void()> stall_;
};

TEST_P(FabricEngine, AJobThatFailedAndThenReachedItsDeadlineWithWritesPostedSaysTheyMayStillLand) {
  // Job 1 writes 4 KiB, then 64 MiB in one write. The 4 KiB write's
  // completion is made an error, and the target stops making progress
  // before the engine sees it: the job has failed, and its big write can no
  // longer become delivery-complete. At the deadline the job must say
  // writes_in_flight (the kernel may still deliver them), not the earlier
  // error, and be answered once (not again when the engine stops).
  if (auto why = why_writes_cannot_stick(); !why.empty())
    GTEST_SKIP() << why;
  constexpr uint64_t small = 4096, big = 64ull << 20;
  auto& src = sized(src_, small + big);
  auto& dst = sized(dst_, small + big);
  std::mt19937_64 rng{11};
  test::fill_random(src, rng);
  fabric::fabric_config init_cfg;
  init_cfg.max_write_size = big;
  init_cfg.max_write_iov = 1;
  auto faults = std::make_shared<fail_then_stall>(1, [this] { target_->stop(); });
  constexpr auto deadline = 2s;
  ASSERT_NO_FATAL_FAILURE(open_pair(src, dst, 0, dst.size(), init_cfg, deadline, faults));
  if (IsSkipped())
    return;
  // Connect first: a write the provider refuses while it connects (EAGAIN)
  // would still be unposted when the first one fails, and then never posted.
  ASSERT_FALSE(run_job(2, {{test::addr_of(src), test::addr_of(dst), small}}).status);
  const uint64_t posted_before = initiator_->stats().writes_posted.load();
  const auto submitted = std::chrono::steady_clock::now();
  ASSERT_FALSE(initiator_->submit(1, peer_,
                                  {{test::addr_of(src), test::addr_of(dst), small},
                                   {test::addr_of(src, small), test::addr_of(dst, small), big}}));
  auto r = done_.wait(1, result_wait);
  ASSERT_TRUE(r.has_value()) << "a failed job with writes stuck was never answered";
  const auto answered = std::chrono::steady_clock::now();
  ASSERT_TRUE(r->status) << "the job succeeded although its first completion was an error";
  ASSERT_EQ(initiator_->stats().injected_errors.load(), 1u);
  ASSERT_EQ(initiator_->stats().writes_posted.load() - posted_before, 2u)
      << "both writes must be out before the first one fails";
  if (r->bytes == big) {
    // The engine saw the big write delivery-complete before the target
    // stopped: nothing is in flight, so the injected error is the answer.
    EXPECT_TRUE(is(r->status, lserr::transfer_failed)) << describe(r->status);
    EXPECT_LT(answered - submitted, deadline);
    GTEST_SKIP() << "the 64 MiB write was delivery-complete before the target stopped (a busy "
                    "machine): the deadline with a write stuck behind a failure was not reached";
  }
  EXPECT_EQ(r->bytes, 0u);
  EXPECT_TRUE(is(r->status, lserr::writes_in_flight)) << describe(r->status);
  EXPECT_GE(answered - submitted, deadline)
      << "answered before its deadline although a write was stuck";
  initiator_->stop(); // the stop path answers every job not answered yet
  EXPECT_EQ(done_.calls(1), 1);
}

TEST_P(FabricEngine, AnInjectedCqErrorFailsExactlyItsJobAndOtherJobsLandBitExactly) {
  // Eight jobs (rooms) of 256 KiB each to one peer, all in flight together;
  // job 3's first completion is turned into an error completion.
  constexpr uint64_t jobs = 8, len = 256 << 10;
  auto& src = sized(src_, jobs * len);
  auto& dst = sized(dst_, jobs * len);
  std::mt19937_64 rng{7};
  test::fill_random(src, rng);
  auto faults = std::make_shared<fabric::job_faults>(std::set<uint64_t>{3});
  ASSERT_NO_FATAL_FAILURE(open_pair(src, dst, 0, dst.size(), {}, 10s, faults));
  if (IsSkipped())
    return;
  for (uint64_t i = 1; i <= jobs; ++i) {
    const uint64_t off = (i - 1) * len;
    // 64 KiB pieces so that each job has several writes in flight.
    std::vector<block> blocks;
    for (uint64_t p = 0; p < len; p += 64 << 10)
      blocks.push_back({test::addr_of(src, off + p), test::addr_of(dst, off + p), 64 << 10});
    ASSERT_FALSE(initiator_->submit(i, peer_, blocks));
  }
  ASSERT_TRUE(done_.wait_count(jobs, result_wait));
  for (uint64_t i = 1; i <= jobs; ++i) {
    auto r = done_.wait(i, 0ms);
    ASSERT_TRUE(r.has_value());
    EXPECT_EQ(done_.calls(i), 1) << "job " << i;
    if (i == 3) {
      ASSERT_TRUE(r->status) << "the injected error was lost";
      EXPECT_TRUE(is(r->status, lserr::transfer_failed)) << describe(r->status);
      EXPECT_NE(describe(r->status).find("injected CQ error completion"), std::string::npos)
          << describe(r->status);
      EXPECT_NE(describe(r->status).find("per-op failure"), std::string::npos);
      continue;
    }
    ASSERT_FALSE(r->status) << "job " << i << ": " << describe(r->status);
    EXPECT_EQ(r->bytes, len);
    const uint64_t off = (i - 1) * len;
    EXPECT_EQ(std::memcmp(dst.data() + off, src.data() + off, len), 0) << "job " << i;
  }
  EXPECT_EQ(initiator_->stats().injected_errors.load(), 1u);
  // A per-op failure leaves the peer healthy: the next job goes through.
  EXPECT_EQ(initiator_->peer_failure(peer_), "");
  auto again = run_job(100, {{test::addr_of(src), test::addr_of(dst), 4096}});
  EXPECT_FALSE(again.status) << describe(again.status);
}

TEST_P(FabricEngine, WritesThatFailWithoutContextFailOnlyTheirPeersJobsAndGiveTheirSlotsBack) {
  // shm reports every write to a dead peer as an error with no op_context.
  // Injected here: all writes of job 3 (to A) fail that way while job 4 (to
  // B) is in flight beside them. Only A's job and A fail; B's job lands and
  // B stays usable; every slot comes back.
  if (GetParam() != std::string{"shm"})
    GTEST_SKIP()
        << "errors without context are counted as failed writes on shm only; on " << GetParam()
        << " they fail every job in flight "
           "(AnErrorWithoutContextOffShmFailsEveryJobInFlightAndLaterCompletionsFreeTheirSlots)";
  constexpr uint64_t len = 256 << 10; // 16 writes per job, 8 slots: fewer than one job's writes
  ASSERT_NO_FATAL_FAILURE(
      open_targets_failing_job_3(len, 11, fabric::job_fault::without_context, 8));
  if (IsSkipped())
    return;
  const auto& src = src_;
  const auto& dst = dst_;
  ASSERT_FALSE(initiator_->submit(3, peer_, {{test::addr_of(src), test::addr_of(dst), len}}));
  ASSERT_FALSE(
      initiator_->submit(4, peer_b_, {{test::addr_of(src, len), region_b_.base, 64 << 10}}));
  auto to_a = done_.wait(3, result_wait);
  auto to_b = done_.wait(4, result_wait);
  ASSERT_TRUE(to_a.has_value()) << "the job whose writes failed without context never ended";
  ASSERT_TRUE(to_b.has_value());
  ASSERT_TRUE(to_a->status) << "writes that failed without context reported success";
  EXPECT_TRUE(is(to_a->status, lserr::transfer_failed)) << describe(to_a->status);
  EXPECT_NE(describe(to_a->status).find("without its op_context"), std::string::npos)
      << describe(to_a->status);
  EXPECT_NE(initiator_->peer_failure(peer_), "");
  ASSERT_FALSE(to_b->status) << describe(to_b->status);
  EXPECT_EQ(std::memcmp(dst_b_.data(), src.data() + len, 64 << 10), 0);
  EXPECT_EQ(initiator_->peer_failure(peer_b_), "");
  // B goes on working; every posted write was accounted for (completed or
  // failed once), so no slot stayed with a write that had ended.
  auto again = initiator_->submit(5, peer_b_, {{test::addr_of(src), region_b_.base, 64 << 10}});
  ASSERT_FALSE(again) << describe(again);
  auto r5 = done_.wait(5, result_wait);
  ASSERT_TRUE(r5.has_value());
  EXPECT_FALSE(r5->status) << describe(r5->status);
  EXPECT_EQ(std::memcmp(dst_b_.data(), src.data(), 64 << 10), 0);
  const auto& st = initiator_->stats();
  EXPECT_EQ(st.writes_posted.load(),
            st.writes_completed.load() + st.op_errors.load() + st.peer_errors.load());
  // Job 3's posted writes (A may hold half the 8 slots) each failed once;
  // none was posted after A was marked failed.
  EXPECT_GE(st.peer_errors.load(), 1u);
  EXPECT_LE(st.peer_errors.load(), 4u);
  EXPECT_EQ(st.injected_errors.load(), st.peer_errors.load());
}

TEST_P(FabricEngine, MoreFailuresWithoutContextThanWritesPostedFailTheirJobsAndKeepTheirSlots) {
  // A provider that breaks one completion per write: job 3's one write (to
  // A) comes back as two errors with no op_context. No write can be matched
  // to them (on shm: more than the writes posted; elsewhere such an error
  // is never a write's), so every job with writes in flight (job 3) fails,
  // saying its writes may still land, and its slot stays taken. The engine
  // goes on with the slots it has left: B's job, larger than them, lands.
  constexpr uint64_t len = 64 << 10; // B's job: 4 writes, 2 slots
  ASSERT_NO_FATAL_FAILURE(
      open_targets_failing_job_3(len, 13, fabric::job_fault::without_context_twice, 2));
  if (IsSkipped())
    return;
  const auto& src = src_;
  const auto& dst = dst_;
  // Job 3 alone in flight: its two errors meet one posted write.
  ASSERT_FALSE(initiator_->submit(3, peer_, {{test::addr_of(src), test::addr_of(dst), 4096}}));
  auto to_a = done_.wait(3, result_wait);
  ASSERT_TRUE(to_a.has_value()) << "a job whose write failed twice without context never ended";
  ASSERT_TRUE(to_a->status) << "a write that failed without context reported success";
  EXPECT_TRUE(is(to_a->status, lserr::writes_in_flight)) << describe(to_a->status);
  EXPECT_NE(describe(to_a->status).find("without its op_context"), std::string::npos)
      << describe(to_a->status);
  EXPECT_NE(initiator_->peer_failure(peer_), "");
  EXPECT_EQ(initiator_->stats().injected_errors.load(), 2u);
  ASSERT_FALSE(initiator_->submit(4, peer_b_, {{test::addr_of(src, len), region_b_.base, len}}));
  auto to_b = done_.wait(4, result_wait);
  ASSERT_TRUE(to_b.has_value()) << "the engine stalled with one slot kept";
  ASSERT_FALSE(to_b->status) << describe(to_b->status);
  EXPECT_EQ(std::memcmp(dst_b_.data(), src.data() + len, len), 0);
  EXPECT_EQ(initiator_->peer_failure(peer_b_), "");
  // Job 3's write was never counted as ended: its slot is the one kept.
  const auto& st = initiator_->stats();
  EXPECT_EQ(st.writes_posted.load(),
            st.writes_completed.load() + st.op_errors.load() + st.peer_errors.load() + 1);
}

TEST_P(FabricEngine,
       AnErrorWithoutContextOffShmFailsEveryJobInFlightAndLaterCompletionsFreeTheirSlots) {
  // Off shm, an error without op_context cannot be matched to a write
  // (rxm writes one to its TX and one to its RX CQ on an internal error),
  // and the writes go on. Two such errors come just before the first
  // completion of job 3 (to A), while its writes are in flight: counted as
  // failed writes, they would fail two healthy ones and free their slots.
  // Instead job 3 fails at once, saying its writes may still land, and A
  // with it; every write's own completion then gives its slot back, no
  // write is counted as failed, and job 3 is answered once. B goes on.
  if (GetParam() == std::string{"shm"})
    GTEST_SKIP() << "shm reports each failed write as an error without context, counted as writes "
                    "(WritesThatFailWithoutContextFailOnlyTheirPeersJobsAndGiveTheirSlotsBack)";
  constexpr uint64_t len = 256 << 10; // job 3: 16 writes; 8 slots, A alone takes 4
  ASSERT_NO_FATAL_FAILURE(
      open_targets_failing_job_3(len, 17, fabric::job_fault::without_context_beside, 8));
  if (IsSkipped())
    return;
  const auto& src = src_;
  const auto& dst = dst_;
  ASSERT_FALSE(initiator_->submit(3, peer_, {{test::addr_of(src), test::addr_of(dst), len}}));
  auto to_a = done_.wait(3, result_wait);
  ASSERT_TRUE(to_a.has_value()) << "the job in flight at an error without context never ended";
  ASSERT_TRUE(to_a->status) << "a job in flight at an error without context reported success";
  EXPECT_TRUE(is(to_a->status, lserr::writes_in_flight)) << describe(to_a->status);
  EXPECT_NE(describe(to_a->status).find("as rxm reports an internal error"), std::string::npos)
      << describe(to_a->status);
  EXPECT_NE(initiator_->peer_failure(peer_), "");
  EXPECT_EQ(initiator_->stats().injected_errors.load(), 2u);
  ASSERT_FALSE(
      initiator_->submit(4, peer_b_, {{test::addr_of(src, len), region_b_.base, 64 << 10}}));
  auto to_b = done_.wait(4, result_wait);
  ASSERT_TRUE(to_b.has_value());
  ASSERT_FALSE(to_b->status) << describe(to_b->status);
  EXPECT_EQ(std::memcmp(dst_b_.data(), src.data() + len, 64 << 10), 0);
  EXPECT_EQ(initiator_->peer_failure(peer_b_), "");
  // Job 3's writes posted before it failed complete on a live target: each
  // is counted as completed and frees its slot; none is counted as failed.
  const auto& st = initiator_->stats();
  const auto until = std::chrono::steady_clock::now() + result_wait;
  while (st.writes_posted.load() != st.writes_completed.load() &&
         std::chrono::steady_clock::now() < until)
    std::this_thread::sleep_for(1ms);
  EXPECT_EQ(st.writes_posted.load(), st.writes_completed.load())
      << "a write posted before the error never gave its slot back";
  EXPECT_EQ(st.op_errors.load() + st.peer_errors.load(), 0u);
  EXPECT_EQ(done_.calls(3), 1);
}

TEST_P(FabricEngine, APeerAddressOfTheWrongShapeIsRefusedBeforeTheProviderReadsIt) {
  // fi_av_insert takes no length. A name one byte short (a transfer_info
  // can carry any bytes) would be read past its end; an IP name padded to
  // another size would be read as a sockaddr all the same.
  auto& src = sized(src_, 4096);
  auto& dst = sized(dst_, 4096);
  ASSERT_NO_FATAL_FAILURE(open_pair(src, dst, 0, dst.size()));
  if (IsSkipped())
    return;
  auto cut = target_name_;
  cut.pop_back();
  auto short_peer = initiator_->add_peer(cut, {region_});
  ASSERT_FALSE(short_peer) << "a name one byte short was inserted";
  EXPECT_TRUE(is(short_peer.error(), lserr::bad_input)) << describe(short_peer.error());
  if (GetParam() != "shm") { // shm's name is a string: trailing bytes after it are harmless
    auto padded = target_name_;
    padded.resize(padded.size() + 4);
    auto long_peer = initiator_->add_peer(padded, {region_});
    ASSERT_FALSE(long_peer) << "a padded socket name was inserted";
    EXPECT_TRUE(is(long_peer.error(), lserr::bad_input)) << describe(long_peer.error());
  }
  // The well-formed name still works.
  auto r = run_job(1, {{test::addr_of(src), test::addr_of(dst), 4096}});
  EXPECT_FALSE(r.status) << describe(r.status);
}

TEST_P(FabricEngine, AWriteWithAWrongRemoteKeyGetsARealErrorCompletion) {
  // Which providers check keys (TOOLCHAIN.md): sockets answers EACCES and
  // keeps the connection (a per-op failure); tcp and net answer ECANCELED and
  // drop the connection (a peer failure); shm does not check keys at all.
  if (GetParam() == "shm")
    GTEST_SKIP() << "shm does not check remote keys: a bad-key write lands (libfabric 1.17)";
  auto& src = sized(src_, 64 << 10);
  auto& dst = sized(dst_, 64 << 10);
  ASSERT_NO_FATAL_FAILURE(open_pair(src, dst, 0, dst.size(), {}, 5s));
  if (IsSkipped())
    return;
  auto good = run_job(1, {{test::addr_of(src), test::addr_of(dst), 4096}});
  ASSERT_FALSE(good.status) << describe(good.status);
  auto bad_region = region_;
  bad_region.key ^= 0x5a5a5a5aULL;
  auto bad_peer = initiator_->add_peer(target_name_, {bad_region});
  ASSERT_TRUE(bad_peer) << describe(bad_peer.error());
  ASSERT_NE(*bad_peer, peer_);
  ASSERT_FALSE(initiator_->submit(2, *bad_peer, {{test::addr_of(src), test::addr_of(dst), 4096}}));
  auto r = done_.wait(2, result_wait);
  ASSERT_TRUE(r.has_value()) << "the bad-key write never completed";
  ASSERT_TRUE(r->status) << "a write with a wrong remote key reported success";
  const auto text = describe(r->status);
  std::printf("[ info     ] %s: wrong key -> %s\n", GetParam().c_str(), text.c_str());
  EXPECT_EQ(initiator_->stats().injected_errors.load(), 0u) << "no injection in this test";
  if (GetParam() == "sockets") {
    EXPECT_NE(text.find("per-op failure"), std::string::npos) << text;
    EXPECT_EQ(initiator_->stats().op_errors.load(), 1u);
    EXPECT_EQ(initiator_->peer_failure(*bad_peer), "");
  } else {
    EXPECT_NE(text.find("peer failure"), std::string::npos) << text;
    EXPECT_GE(initiator_->stats().peer_errors.load(), 1u);
    EXPECT_NE(initiator_->peer_failure(*bad_peer), "");
    auto later = initiator_->submit(3, *bad_peer, {{test::addr_of(src), test::addr_of(dst), 16}});
    EXPECT_TRUE(is(later, lserr::peer_lost)) << describe(later);
  }
}

// The FI_HMEM path (device-memory registration) on host memory: an initiator
// opened with FI_HMEM registers through fi_mr_regattr like any other and its
// writes land byte for byte. A provider without FI_HMEM is refused at open()
// with the reason. shm offers FI_HMEM in every libfabric since 1.10 (system
// memory at least), so the write path is exercised there.
TEST_P(FabricEngine, AnHmemInitiatorWritesByteForByteOrItsProviderIsRefusedWithTheReason) {
  fabric::fabric_config probe_cfg;
  probe_cfg.provider = GetParam();
  probe_cfg.hmem = true;
  auto probe = fabric::endpoint::open(probe_cfg);
  if (!probe) {
    ASSERT_NE(GetParam(), "shm") << describe(probe.error());
    const auto why = describe(probe.error());
    EXPECT_NE(why.find("FI_HMEM"), std::string::npos) << why;
    EXPECT_NE(why.find(GetParam()), std::string::npos) << why;
    return;
  }
  EXPECT_TRUE((*probe)->hmem());
  EXPECT_NE((*probe)->mr_mode() & FI_MR_HMEM, 0u) << fabric::summary(**probe);
  probe->reset();

  constexpr uint64_t len = 4 << 20;
  auto& src = sized(src_, len);
  auto& dst = sized(dst_, len);
  fabric::fabric_config init_cfg;
  init_cfg.hmem = true;
  ASSERT_NO_FATAL_FAILURE(open_pair(src, dst, 0, len, init_cfg));
  if (IsSkipped())
    return;
  std::mt19937_64 rng{0x4e3e};
  test::fill_random(src, rng);
  // Two blocks, swapped halves: an address mix-up cannot pass.
  const uint64_t half = len / 2;
  const std::vector<block> blocks = {{test::addr_of(src, 0), test::addr_of(dst, half), half},
                                     {test::addr_of(src, half), test::addr_of(dst, 0), half}};
  auto r = run_job(1, blocks);
  ASSERT_FALSE(r.status) << describe(r.status);
  EXPECT_EQ(r.bytes, len);
  EXPECT_EQ(std::memcmp(dst.data(), src.data() + half, half), 0);
  EXPECT_EQ(std::memcmp(dst.data() + half, src.data(), half), 0);
}

TEST_P(FabricEngine, CudaMemoryOnAnEndpointOpenedWithoutHmemIsRefused) {
  fabric::fabric_config cfg;
  cfg.provider = GetParam();
  auto ep = fabric::endpoint::open(cfg);
  if (!ep)
    LS_SKIP_IF_PROVIDER_MISSING(GetParam(), describe(ep.error()));
  std::vector<uint8_t> buf(4096);
  auto reg =
      (*ep)->register_memory(buf.data(), buf.size(), FI_WRITE, fabric::memory_iface::cuda, 0);
  ASSERT_FALSE(reg) << "CUDA registration on an endpoint without FI_HMEM must be refused";
  EXPECT_TRUE(is(reg.error(), lserr::bad_input)) << describe(reg.error());
  EXPECT_NE(describe(reg.error()).find("without FI_HMEM"), std::string::npos)
      << describe(reg.error());
}

TEST(FabricHmemProbe, AProviderWithoutHmemCannotRegisterDeviceMemoryAndSaysWhy) {
  fabric::fabric_config cfg;
  cfg.provider = "sockets"; // no FI_HMEM in any libfabric
  if (auto ep = fabric::endpoint::open(cfg); !ep)
    LS_SKIP_IF_PROVIDER_MISSING("sockets", describe(ep.error()));
  std::vector<uint8_t> buf(4096);
  auto why = fabric::probe_cuda_registration(cfg, buf.data(), buf.size(), 0);
  ASSERT_TRUE(why) << "the probe must not report success without FI_HMEM";
  EXPECT_NE(describe(why).find("offers no FI_HMEM"), std::string::npos) << describe(why);
}

// With FI_HMEM asked, a provider that is not there says so, not that it
// lacks FI_HMEM.
TEST(FabricHmemProbe, AnHmemEndpointThatCannotOpenAtAllGivesTheRealReason) {
  fabric::fabric_config cfg;
  cfg.provider = "no_such_provider";
  cfg.hmem = true;
  auto ep = fabric::endpoint::open(cfg);
  ASSERT_FALSE(ep);
  EXPECT_EQ(describe(ep.error()).find("FI_HMEM"), std::string::npos) << describe(ep.error());
  EXPECT_NE(describe(ep.error()).find("no_such_provider"), std::string::npos)
      << describe(ep.error());
}

TEST(FabricAddressShape, AFixedSizeFormatTakesOnlyANameOfItsOwnSize) {
  // efa and verbs over InfiniBand are not on this machine; their formats are
  // read at a fixed size, so a name of another size is refused before
  // fi_av_insert would read past it (or stop short).
  for (uint32_t format : {uint32_t{FI_ADDR_EFA}, uint32_t{FI_SOCKADDR_IB}}) {
    for (size_t size : {size_t{1}, size_t{16}, size_t{31}, size_t{33}}) {
      auto err = fabric::check_address_shape(format, std::vector<uint8_t>(size, 1), 32);
      EXPECT_TRUE(is(err, lserr::bad_input)) << "format " << format << ", " << size << " bytes";
    }
    EXPECT_FALSE(fabric::check_address_shape(format, std::vector<uint8_t>(32, 1), 32))
        << "format " << format;
  }
}

INSTANTIATE_TEST_SUITE_P(Providers, FabricEngine,
                         ::testing::Values("tcp;ofi_rxm", "net", "shm", "sockets"),
                         test::provider_test_name);

} // namespace
} // namespace layerstream
