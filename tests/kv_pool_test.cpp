// The KV pool layout, the kv_pattern bytes and the page allocator.
#include <gtest/gtest.h>

#include <algorithm>
#include <set>

#include "model/kv_pool.hpp"

using namespace layerstream;

namespace {

using pages_t = std::vector<uint64_t>;

/// 3 layers, row = 2 heads * 4 dims * 2 bytes = 16 bytes, 4 tokens per page.
model_config small_model(bool mla = false) {
  model_config m;
  m.layers = 3;
  m.kv_heads = mla ? 1 : 2;
  m.head_dim = 4;
  m.dtype_bytes = 2;
  m.page_size = 4;
  m.mla = mla;
  return m;
}

std::unique_ptr<kv_pool> make_pool(const model_config& m, uint64_t pages) {
  auto pool = kv_pool::create(m, pages);
  EXPECT_TRUE(pool) << describe(pool.error());
  return pool ? std::move(*pool) : nullptr;
}

void write_room(kv_pool& pool, uint64_t room, const pages_t& pages, uint64_t tokens) {
  for (uint32_t l = 0; l < pool.layers(); ++l)
    pool.write_layer(room, l, pages, 0, tokens, tokens);
}

} // namespace

TEST(KvPoolTest, WrittenRoomPassesTheCheck) {
  auto pool = make_pool(small_model(), 8);
  ASSERT_TRUE(pool);
  pages_t pages{5, 2, 7};
  write_room(*pool, 42, pages, 10);
  EXPECT_EQ(pool->check_room(42, pages, 0, 10, 10), 0u);
}

TEST(KvPoolTest, UnwrittenRoomFailsTheCheck) {
  auto pool = make_pool(small_model(), 8);
  ASSERT_TRUE(pool);
  // 10 tokens, 3 layers, K and V: every row is bad (the zero tail is fine).
  EXPECT_EQ(pool->check_room(42, {0, 1, 2}, 0, 10, 10), 10u * 3 * 2);
}

TEST(KvPoolTest, OneFlippedByteIsCaught) {
  auto pool = make_pool(small_model(), 8);
  ASSERT_TRUE(pool);
  pages_t pages{1, 3, 4};
  write_room(*pool, 9, pages, 11);
  // Token 6 lives in request page 1 (pool page 3), slot 2; flip a byte of layer 2's V row.
  pool->page_ptr(2, 1, 3)[2 * pool->row_len() + 5] ^= 0x01;
  EXPECT_EQ(pool->check_room(9, pages, 0, 11, 11), 1u);
}

TEST(KvPoolTest, ARoomWrittenUnderAnotherIdFailsTheCheck) {
  auto pool = make_pool(small_model(), 8);
  ASSERT_TRUE(pool);
  pages_t pages{0, 1};
  write_room(*pool, 1, pages, 8);
  EXPECT_EQ(pool->check_room(2, pages, 0, 8, 8), 8u * 3 * 2);
}

TEST(KvPoolTest, TailSlotsOfTheLastPageAreZeroed) {
  auto pool = make_pool(small_model(), 4);
  ASSERT_TRUE(pool);
  pages_t pages{0, 1};
  // Dirty the whole pool first: the write must zero slots 2 and 3 of page 1.
  std::fill(pool->base(), pool->base() + pool->bytes(), uint8_t{0xab});
  write_room(*pool, 3, pages, 6);
  for (uint32_t l = 0; l < pool->layers(); ++l)
    for (uint32_t b = 0; b < pool->buffers(); ++b) {
      const uint8_t* page = pool->page_ptr(l, b, 1);
      for (uint64_t i = 2 * pool->row_len(); i < pool->item_len(); ++i)
        ASSERT_EQ(page[i], 0) << "layer " << l << " buffer " << b << " byte " << i;
    }
  EXPECT_EQ(pool->check_room(3, pages, 0, 6, 6), 0u);
  // A non-zero tail byte counts as a bad row.
  pool->page_ptr(1, 0, 1)[3 * pool->row_len()] = 1;
  EXPECT_EQ(pool->check_room(3, pages, 0, 6, 6), 1u);
}

TEST(KvPoolTest, LayoutMatchesThePointerLists) {
  auto m = small_model();
  auto pool = make_pool(m, 8);
  ASSERT_TRUE(pool);
  EXPECT_EQ(pool->row_len(), 16u);
  EXPECT_EQ(pool->item_len(), m.item_len());
  EXPECT_EQ(pool->bytes(), 8 * pool->item_len() * 3 * 2);
  auto k = pool->k_ptrs();
  auto v = pool->v_ptrs();
  ASSERT_EQ(k.size(), 3u);
  ASSERT_EQ(v.size(), 3u);
  EXPECT_EQ(k[0], reinterpret_cast<uint64_t>(pool->base()));
  for (uint32_t l = 0; l < 3; ++l) {
    EXPECT_EQ(k[l], reinterpret_cast<uint64_t>(pool->page_ptr(l, 0, 0)));
    EXPECT_EQ(v[l], reinterpret_cast<uint64_t>(pool->page_ptr(l, 1, 0)));
    EXPECT_EQ(reinterpret_cast<uint64_t>(pool->page_ptr(l, 0, 5)), k[l] + 5 * pool->item_len());
  }
  EXPECT_EQ(pool->item_lens(), pages_t(6, pool->item_len()));
  // The last V page ends exactly at the end of the allocation.
  EXPECT_EQ(pool->page_ptr(2, 1, 7) + pool->item_len(), pool->base() + pool->bytes());
}

TEST(KvPoolTest, MlaHasOneBufferPerLayer) {
  auto pool = make_pool(small_model(true), 8);
  ASSERT_TRUE(pool);
  EXPECT_TRUE(pool->mla());
  EXPECT_EQ(pool->buffers(), 1u);
  EXPECT_EQ(pool->row_len(), 8u);
  EXPECT_EQ(pool->k_ptrs().size(), 3u);
  EXPECT_TRUE(pool->v_ptrs().empty());
  EXPECT_EQ(pool->item_lens(), pages_t(3, pool->item_len()));
  EXPECT_EQ(pool->bytes(), 8 * pool->item_len() * 3);
  pages_t pages{6, 0, 3};
  write_room(*pool, 77, pages, 9);
  EXPECT_EQ(pool->check_room(77, pages, 0, 9, 9), 0u);
  pool->page_ptr(1, 0, 0)[1] ^= 0x80;
  EXPECT_EQ(pool->check_room(77, pages, 0, 9, 9), 1u);
}

TEST(KvPoolTest, MlaWithSeveralHeadsIsRefused) {
  auto m = small_model(true);
  m.kv_heads = 2;
  EXPECT_FALSE(kv_pool::create(m, 4));
}

TEST(KvPoolTest, ZeroDimensionsAreRefused) {
  auto m = small_model();
  m.page_size = 0;
  EXPECT_FALSE(kv_pool::create(m, 4));
  EXPECT_FALSE(kv_pool::create(small_model(), 0));
}

TEST(KvPoolTest, WritesOfTwoCpSlicesMakeAWholeRoom) {
  auto pool = make_pool(small_model(), 8);
  ASSERT_TRUE(pool);
  pages_t pages{4, 5, 6};
  for (uint32_t l = 0; l < pool->layers(); ++l) {
    pool->write_layer(5, l, pages, 0, 8, 10);
    EXPECT_GT(pool->check_room(5, pages, 0, 10, 10), 0u);
    pool->write_layer(5, l, pages, 8, 10, 10);
  }
  EXPECT_EQ(pool->check_room(5, pages, 0, 10, 10), 0u);
}

TEST(KvPatternTest, RowsDifferByEveryCoordinate) {
  std::vector<uint8_t> a(24), b(24);
  kv_pattern::fill_row(1, 2, 0, 3, a.data(), a.size());
  EXPECT_TRUE(kv_pattern::check_row(1, 2, 0, 3, a.data(), a.size()));
  for (auto [room, layer, buffer, token] :
       {std::tuple{2, 2, 0, 3}, {1, 3, 0, 3}, {1, 2, 1, 3}, {1, 2, 0, 4}}) {
    kv_pattern::fill_row(room, layer, buffer, token, b.data(), b.size());
    EXPECT_NE(a, b);
    EXPECT_FALSE(kv_pattern::check_row(1, 2, 0, 3, b.data(), b.size()));
  }
}

TEST(PageAllocatorTest, NeverHandsOutAPageTwice) {
  page_allocator alloc{64, 7, 0.5};
  std::set<uint64_t> held;
  for (int round = 0; round < 50; ++round) {
    auto got = alloc.allocate(5);
    ASSERT_TRUE(got);
    for (auto p : *got) {
      EXPECT_LT(p, 64u);
      EXPECT_TRUE(held.insert(p).second) << "page " << p << " handed out twice";
    }
    EXPECT_EQ(alloc.free_pages(), 64 - held.size());
    // Give back every other room's pages to churn the free list.
    if (round % 2 == 1 || held.size() > 50) {
      alloc.release(*got);
      for (auto p : *got)
        held.erase(p);
    }
  }
}

TEST(PageAllocatorTest, RefusesBeyondCapacity) {
  page_allocator alloc{10, 1, 0.0};
  EXPECT_FALSE(alloc.allocate(11));
  EXPECT_EQ(alloc.free_pages(), 10u);
  auto a = alloc.allocate(7);
  ASSERT_TRUE(a);
  EXPECT_FALSE(alloc.allocate(4));
  EXPECT_EQ(alloc.free_pages(), 3u);
  auto b = alloc.allocate(3);
  ASSERT_TRUE(b);
  EXPECT_FALSE(alloc.allocate(1));
  alloc.release(*a);
  EXPECT_EQ(alloc.free_pages(), 7u);
  EXPECT_TRUE(alloc.allocate(7));
}

TEST(PageAllocatorTest, NoFragmentationGivesAscendingContiguousPages) {
  page_allocator alloc{32, 3, 0.0};
  EXPECT_EQ(*alloc.allocate(4), (pages_t{0, 1, 2, 3}));
  auto second = *alloc.allocate(5);
  EXPECT_EQ(second, (pages_t{4, 5, 6, 7, 8}));
  // Released pages are reused lowest first, still ascending.
  alloc.release(second);
  EXPECT_EQ(*alloc.allocate(3), (pages_t{4, 5, 6}));
}

TEST(PageAllocatorTest, FragmentationScattersPages) {
  page_allocator alloc{256, 11, 1.0};
  auto got = *alloc.allocate(64);
  EXPECT_FALSE(std::is_sorted(got.begin(), got.end()));
  EXPECT_EQ(std::set<uint64_t>(got.begin(), got.end()).size(), 64u);
}

TEST(PageAllocatorTest, SameSeedSameLayout) {
  page_allocator a{128, 5, 0.3}, b{128, 5, 0.3};
  EXPECT_EQ(*a.allocate(40), *b.allocate(40));
}
