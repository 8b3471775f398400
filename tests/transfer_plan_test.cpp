// The transfer plan: SGLang/Mooncake block math, CP slices, chunks, overflow.
#include <gtest/gtest.h>

#include <random>
#include <set>

#include "transport/transfer_plan.hpp"

using namespace layerstream;

namespace {

using pages_t = std::vector<uint64_t>;

kv_pointers kv(uint32_t layers, uint64_t k_item, uint64_t v_item) {
  kv_pointers p;
  for (uint64_t l = 0; l < layers; ++l) {
    p.src_k.push_back(1000 + l * 100000);
    p.src_v.push_back(5000000 + l * 100000);
    p.dst_k.push_back(90000000 + l * 100000);
    p.dst_v.push_back(95000000 + l * 100000);
  }
  p.item_lens.assign(layers, k_item);
  p.item_lens.resize(2 * layers, v_item);
  return p;
}

kv_pointers mla(uint32_t layers, uint64_t item) {
  kv_pointers p;
  for (uint64_t l = 0; l < layers; ++l) {
    p.src_k.push_back(1000 + l * 100000);
    p.dst_k.push_back(90000000 + l * 100000);
  }
  p.item_lens.assign(layers, item);
  return p;
}

std::vector<block> blocks_of(const pages_t& src, const pages_t& dst, const kv_pointers& p,
                             uint64_t layer, cp_slice slice = {}) {
  auto plan = make_transfer_plan(src, dst, slice);
  EXPECT_TRUE(plan) << describe(plan.error());
  auto out = build_layer_blocks(*plan, p, layer);
  EXPECT_TRUE(out) << describe(out.error());
  return out ? *out : std::vector<block>{};
}

/// Expands blocks of one buffer back into (src page, dst page) pairs.
std::vector<std::pair<uint64_t, uint64_t>>
pages_of(const std::vector<block>& blocks, uint64_t src_base, uint64_t dst_base, uint64_t item) {
  std::vector<std::pair<uint64_t, uint64_t>> out;
  for (auto& b : blocks) {
    EXPECT_EQ(b.len % item, 0u);
    for (uint64_t off = 0; off < b.len; off += item)
      out.emplace_back((b.src + off - src_base) / item, (b.dst + off - dst_base) / item);
  }
  return out;
}

} // namespace

TEST(TransferPlan, GroupsPagesWhereBothSidesStepByOne) {
  pages_t src{100, 101, 102, 103, 104, 105, 106, 107, 108, 109};
  pages_t dst{0, 1, 2, 50, 51, 52, 53, 9, 10, 11};
  auto plan = make_transfer_plan(src, dst);
  ASSERT_TRUE(plan);
  std::vector<page_run> want{{100, 0, 3}, {103, 50, 4}, {107, 9, 3}};
  EXPECT_EQ(plan->runs, want);
  EXPECT_EQ(plan->pages, 10u);
}

TEST(TransferPlan, DuplicatesBackwardStepsAndGapsStartNewRunsWithoutSorting) {
  pages_t src{5, 5, 4, 6, 7, 9, 10};
  pages_t dst{1, 2, 3, 4, 5, 6, 8};
  auto plan = make_transfer_plan(src, dst);
  ASSERT_TRUE(plan);
  std::vector<page_run> want{{5, 1, 1}, {5, 2, 1}, {4, 3, 1}, {6, 4, 2}, {9, 6, 1}, {10, 8, 1}};
  EXPECT_EQ(plan->runs, want);
}

TEST(TransferPlan, KRunsComeFirstThenVRunsWithTheirOwnItemLens) {
  auto p = kv(2, 16, 48);
  auto got = blocks_of({1, 2, 3, 7}, {5, 6, 7, 20}, p, 1);
  std::vector<block> want{{p.src_k[1] + 1 * 16, p.dst_k[1] + 5 * 16, 3 * 16},
                          {p.src_k[1] + 7 * 16, p.dst_k[1] + 20 * 16, 16},
                          {p.src_v[1] + 1 * 48, p.dst_v[1] + 5 * 48, 3 * 48},
                          {p.src_v[1] + 7 * 48, p.dst_v[1] + 20 * 48, 48}};
  EXPECT_EQ(got, want);
}

TEST(TransferPlan, ItemLensOfLengthNAreSharedByKAndV) {
  auto p = kv(2, 16, 16);
  p.item_lens.resize(2);
  p.item_lens[1] = 32;
  auto got = blocks_of({3}, {4}, p, 1);
  std::vector<block> want{{p.src_k[1] + 96, p.dst_k[1] + 128, 32},
                          {p.src_v[1] + 96, p.dst_v[1] + 128, 32}};
  EXPECT_EQ(got, want);
}

TEST(TransferPlan, MlaHasOneFusedBufferPerLayer) {
  auto p = mla(3, 576);
  auto got = blocks_of({4, 5, 9}, {0, 1, 2}, p, 2);
  std::vector<block> want{{p.src_k[2] + 4 * 576, p.dst_k[2], 2 * 576},
                          {p.src_k[2] + 9 * 576, p.dst_k[2] + 2 * 576, 576}};
  EXPECT_EQ(got, want);
}

TEST(TransferPlan, EveryLayerUsesTheSameRunsAndOnlyBasesAndLengthsChange) {
  std::mt19937_64 rng{42};
  auto p = kv(6, 1, 1);
  for (uint32_t l = 0; l < 6; ++l) {
    p.item_lens[l] = 64 * (l + 1);
    p.item_lens[6 + l] = 32 * (l + 2);
  }
  pages_t src, dst;
  for (int i = 0; i < 300; ++i) {
    src.push_back(rng() % 4 == 0 ? rng() % 1000 : (src.empty() ? 0 : src.back() + 1));
    dst.push_back(rng() % 5 == 0 ? rng() % 1000 : (dst.empty() ? 0 : dst.back() + 1));
  }
  auto plan = make_transfer_plan(src, dst);
  ASSERT_TRUE(plan);
  const auto runs = plan->runs.size();
  for (uint32_t l = 0; l < 6; ++l) {
    auto blocks = *build_layer_blocks(*plan, p, l);
    ASSERT_EQ(blocks.size(), 2 * runs);
    for (size_t i = 0; i < runs; ++i) {
      auto& r = plan->runs[i];
      EXPECT_EQ(blocks[i],
                (block{p.src_k[l] + r.src_page * p.item_lens[l],
                       p.dst_k[l] + r.dst_page * p.item_lens[l], r.pages * p.item_lens[l]}));
      EXPECT_EQ(blocks[runs + i], (block{p.src_v[l] + r.src_page * p.item_lens[6 + l],
                                         p.dst_v[l] + r.dst_page * p.item_lens[6 + l],
                                         r.pages * p.item_lens[6 + l]}));
    }
    // Expanded back page by page, the K half is exactly the input mapping.
    std::vector<block> k_half(blocks.begin(), blocks.begin() + runs);
    auto mapped = pages_of(k_half, p.src_k[l], p.dst_k[l], p.item_lens[l]);
    ASSERT_EQ(mapped.size(), src.size());
    for (size_t i = 0; i < src.size(); ++i)
      EXPECT_EQ(mapped[i], std::make_pair(src[i], dst[i]));
  }
}

TEST(TransferPlan, CpRanksOwnContiguousSlicesWithTheRemainderFirst) {
  std::vector<std::pair<uint64_t, uint64_t>> want{{0, 4}, {4, 7}, {7, 10}};
  for (uint64_t r = 0; r < 3; ++r) {
    auto range = owned_positions(10, 3, r);
    ASSERT_TRUE(range);
    EXPECT_EQ(std::make_pair(range->begin, range->end), want[r]);
  }
}

TEST(TransferPlan, CpRanksTogetherCoverEveryPageExactlyOnce) {
  std::mt19937_64 rng{7};
  for (uint64_t total : {0u, 1u, 2u, 3u, 7u, 10u, 64u, 101u}) {
    for (uint64_t cp : {1u, 2u, 3u, 4u, 8u, 16u}) {
      pages_t src(total), dst(total);
      for (uint64_t i = 0; i < total; ++i) {
        src[i] = rng() % 3 == 0 ? rng() % 500 : i + 7;
        dst[i] = i * 2 % 501;
      }
      auto p = mla(1, 8);
      std::multiset<std::pair<uint64_t, uint64_t>> covered;
      for (uint64_t r = 0; r < cp; ++r) {
        auto blocks = blocks_of(src, dst, p, 0, {cp, r, 0, 0});
        for (auto& pr : pages_of(blocks, p.src_k[0], p.dst_k[0], 8))
          covered.insert(pr);
        if (total < cp && r >= total) {
          EXPECT_TRUE(blocks.empty()) << "rank " << r << " of " << cp << " owns no page";
        }
      }
      std::multiset<std::pair<uint64_t, uint64_t>> all;
      for (uint64_t i = 0; i < total; ++i)
        all.emplace(src[i], dst[i]);
      EXPECT_EQ(covered, all) << total << " pages on " << cp << " ranks";
    }
  }
}

TEST(TransferPlan, GroupingRunsInsideTheRankSliceOnly) {
  // One run of 10 pages split over 3 ranks becomes runs of 4, 3 and 3.
  pages_t src{0, 1, 2, 3, 4, 5, 6, 7, 8, 9}, dst{20, 21, 22, 23, 24, 25, 26, 27, 28, 29};
  std::vector<uint64_t> want{4, 3, 3};
  for (uint64_t r = 0; r < 3; ++r) {
    auto plan = make_transfer_plan(src, dst, {3, r, 0, 0});
    ASSERT_TRUE(plan);
    ASSERT_EQ(plan->runs.size(), 1u);
    EXPECT_EQ(plan->runs[0].pages, want[r]);
  }
}

TEST(TransferPlan, ChunksOfARequestCoverEachRankSliceExactlyOnce) {
  const uint64_t total = 23;
  pages_t src(total), dst(total);
  for (uint64_t i = 0; i < total; ++i) {
    src[i] = 3 * i % 29;
    dst[i] = i + 40;
  }
  auto p = mla(1, 4);
  for (uint64_t cp : {1u, 2u, 4u}) {
    for (uint64_t chunk : {1u, 5u, 8u, 23u}) {
      for (uint64_t r = 0; r < cp; ++r) {
        std::vector<std::pair<uint64_t, uint64_t>> got;
        for (uint64_t start = 0; start < total; start += chunk) {
          auto end = std::min(total, start + chunk);
          pages_t s(src.begin() + start, src.begin() + end),
              d(dst.begin() + start, dst.begin() + end);
          for (auto& pr :
               pages_of(blocks_of(s, d, p, 0, {cp, r, start, total}), p.src_k[0], p.dst_k[0], 4))
            got.push_back(pr);
        }
        auto range = *owned_positions(total, cp, r);
        std::vector<std::pair<uint64_t, uint64_t>> want;
        for (auto i = range.begin; i < range.end; ++i)
          want.emplace_back(src[i], dst[i]);
        EXPECT_EQ(got, want) << "cp " << cp << " rank " << r << " chunk " << chunk;
      }
    }
  }
}

TEST(TransferPlan, AnEmptyPageListEmitsNoBlocks) {
  EXPECT_TRUE(blocks_of({}, {}, kv(2, 16, 16), 1).empty());
  EXPECT_TRUE(blocks_of({}, {}, mla(2, 16), 0).empty());
}

TEST(TransferPlan, AddressesAtOrAboveTwoToThe63AreExact) {
  auto p = mla(1, 4096);
  p.src_k[0] = uint64_t{1} << 63;
  p.dst_k[0] = UINT64_MAX - 3 * 4096 + 1; // the last byte of the range is 2^64 - 1
  auto got = blocks_of({0, 1, 2}, {0, 1, 2}, p, 0);
  std::vector<block> want{{uint64_t{1} << 63, UINT64_MAX - 3 * 4096 + 1, 3 * 4096}};
  EXPECT_EQ(got, want);
}

TEST(TransferPlan, AnAddressPastTwoToThe64IsRejectedNotWrapped) {
  auto p = mla(1, 4096);
  auto plan = *make_transfer_plan({0, 1, 2}, {0, 1, 2});
  p.dst_k[0] = UINT64_MAX - 3 * 4096 + 2; // one byte too far
  auto out = build_layer_blocks(plan, p, 0);
  ASSERT_FALSE(out);
  EXPECT_TRUE(is(out.error(), lserr::overflow)) << describe(out.error());
  // A page index whose offset passes 2^64.
  auto big = *make_transfer_plan({uint64_t{1} << 60}, {0});
  auto far = build_layer_blocks(big, mla(1, 4096), 0);
  ASSERT_FALSE(far);
  EXPECT_TRUE(is(far.error(), lserr::overflow)) << describe(far.error());
  // A page count whose length passes 2^64 cannot be built either.
  p = mla(1, uint64_t{1} << 62);
  p.src_k[0] = 0;
  p.dst_k[0] = 0;
  auto long_run = build_layer_blocks(*make_transfer_plan({0, 1, 2, 3}, {0, 1, 2, 3}), p, 0);
  ASSERT_FALSE(long_run);
  EXPECT_TRUE(is(long_run.error(), lserr::overflow)) << describe(long_run.error());
}

TEST(TransferPlan, IndicesAtTheTopOfU64DoNotWrapIntoARun) {
  auto plan = make_transfer_plan({UINT64_MAX, 0}, {5, 6});
  ASSERT_TRUE(plan);
  EXPECT_EQ(plan->runs.size(), 2u);
}

TEST(TransferPlan, BadInputIsAClearErrorNeverABlock) {
  auto p = kv(2, 16, 16);
  auto plan = *make_transfer_plan({1}, {2});
  EXPECT_TRUE(is(make_transfer_plan({1, 2}, {3}).error(), lserr::bad_input));
  EXPECT_TRUE(is(build_layer_blocks(plan, p, 2).error(), lserr::bad_layer));
  auto q = p;
  q.dst_k.pop_back();
  EXPECT_TRUE(is(build_layer_blocks(plan, q, 0).error(), lserr::bad_input));
  q = p;
  q.dst_v.pop_back();
  EXPECT_TRUE(is(build_layer_blocks(plan, q, 0).error(), lserr::bad_input));
  q = p;
  q.item_lens.push_back(16);
  EXPECT_TRUE(is(build_layer_blocks(plan, q, 0).error(), lserr::bad_input));
  q = p;
  q.item_lens[3] = 0;
  EXPECT_TRUE(is(build_layer_blocks(plan, q, 0).error(), lserr::bad_input));
  EXPECT_TRUE(is(build_layer_blocks(plan, kv_pointers{}, 0).error(), lserr::bad_input));
  // MLA: one item length per layer, not a K and a V half.
  auto m = mla(2, 576);
  ASSERT_TRUE(build_layer_blocks(plan, m, 1));
  m.item_lens.resize(4, 999);
  EXPECT_TRUE(is(build_layer_blocks(plan, m, 1).error(), lserr::bad_input));
  EXPECT_TRUE(is(make_transfer_plan({1}, {2}, {2, 2, 0, 0}).error(), lserr::bad_input));
  EXPECT_TRUE(is(make_transfer_plan({1}, {2}, {0, 0, 0, 0}).error(), lserr::bad_input));
  // A chunk that does not fit in the request.
  EXPECT_TRUE(is(make_transfer_plan({1, 2}, {2, 3}, {1, 0, 3, 4}).error(), lserr::bad_input));
  EXPECT_TRUE(is(make_transfer_plan({1}, {2}, {1, 0, UINT64_MAX, 0}).error(), lserr::bad_input));
}

TEST(TransferPlan, LayerBytesCountKAndVOfTheOwnedPages) {
  auto plan = *make_transfer_plan({1, 2, 9}, {3, 4, 5});
  EXPECT_EQ(*layer_bytes(plan, kv(2, 16, 48), 1), 3u * (16 + 48));
  EXPECT_EQ(*layer_bytes(plan, mla(2, 576), 0), 3u * 576);
}
