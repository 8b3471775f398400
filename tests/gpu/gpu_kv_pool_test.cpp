// The GPU pool's kernel writes exactly kv_pattern's bytes: the same rooms
// written by the CPU model (kv_pool::write_layer) and by the kernel give
// byte-identical pools. The formula test runs without a device.
#include "model/gpu_kv_pool.hpp"

#include <cstring>
#include <vector>

#include <gtest/gtest.h>

#include "cuda_skip.hpp"
#include "device/cuda_event.hpp"
#include "model/kv_kernel.hpp"
#include "model/kv_pool.hpp"

using namespace layerstream;

namespace {

model_config geometry(uint32_t kv_heads, uint32_t head_dim, uint32_t dtype, uint32_t page_size,
                      bool mla) {
  model_config m;
  m.layers = 5;
  m.kv_heads = kv_heads;
  m.head_dim = head_dim;
  m.dtype_bytes = dtype;
  m.page_size = page_size;
  m.mla = mla;
  return m;
}

struct room_spec {
  uint64_t room;
  uint64_t prompt;
  std::vector<uint64_t> pages;
};

/// Writes rooms with fragmented pages, some in two chunks, into both pools
/// and compares every byte.
void check_equivalence(const model_config& m) {
  const uint64_t pool_pages = 64;
  auto host = kv_pool::create(m, pool_pages);
  ASSERT_TRUE(host) << describe(host.error());
  auto gpu = gpu_kv_pool::create(m, pool_pages);
  ASSERT_TRUE(gpu) << describe(gpu.error());
  ASSERT_EQ((*gpu)->bytes(), (*host)->bytes());
  ASSERT_EQ((*gpu)->item_lens(), (*host)->item_lens());
  auto stream = cuda_stream::create();
  ASSERT_TRUE(stream) << describe(stream.error());
  page_allocator alloc{pool_pages, 42, 0.5};
  std::vector<room_spec> rooms;
  for (uint64_t r = 0; r < 4; ++r) {
    const uint64_t prompt = 3 + r * 17; // partial last pages
    auto pages = alloc.allocate((prompt + m.page_size - 1) / m.page_size);
    ASSERT_TRUE(pages);
    rooms.push_back({1000 + r, prompt, *pages});
  }
  std::vector<gpu_page_table> tables;
  for (auto& r : rooms) {
    auto t = gpu_page_table::create(r.pages);
    ASSERT_TRUE(t) << describe(t.error());
    tables.push_back(std::move(*t));
  }
  for (uint32_t layer = 0; layer < m.layers; ++layer) {
    for (size_t i = 0; i < rooms.size(); ++i) {
      const auto& r = rooms[i];
      const uint64_t cut = r.prompt / 2; // chunked: two writes per layer
      (*host)->write_layer(r.room, layer, r.pages, 0, cut, r.prompt);
      (*host)->write_layer(r.room, layer, r.pages, cut, r.prompt, r.prompt);
      ASSERT_FALSE(
          (*gpu)->write_layer(r.room, layer, tables[i], 0, cut, r.prompt, stream->handle()));
      ASSERT_FALSE(
          (*gpu)->write_layer(r.room, layer, tables[i], cut, r.prompt, r.prompt, stream->handle()));
    }
  }
  ASSERT_FALSE(stream->synchronize());
  std::vector<uint8_t> copy((*gpu)->bytes());
  ASSERT_FALSE((*gpu)->copy_to_host(copy.data()));
  uint64_t differing = 0;
  for (uint64_t i = 0; i < copy.size(); ++i)
    differing += copy[i] != (*host)->base()[i];
  EXPECT_EQ(differing, 0u) << "of " << copy.size() << " bytes";
  // And the copy, seen as a pool, passes the decode side's own check.
  std::memcpy((*host)->base(), copy.data(), copy.size());
  for (auto& r : rooms)
    EXPECT_EQ((*host)->check_room(r.room, r.pages, 0, r.prompt, r.prompt), 0u);
}

} // namespace

TEST(GpuKvKernelFormula, MatchesKvPatternOnTheHostForEveryRowLength) {
  // No device needed: the kernel's per-word formula, run on the host.
  for (uint64_t len : {1, 7, 8, 9, 15, 16, 64, 100, 2048}) {
    for (uint64_t token : {0, 1, 77, 4095}) {
      std::vector<uint8_t> want(len);
      kv_pattern::fill_row(12345, 3, 1, token, want.data(), len);
      std::vector<uint8_t> got(len);
      for (uint64_t k = 0; k * 8 < len; ++k) {
        const uint64_t v = kv_pattern_word(12345, 3, 1, token, k);
        for (uint64_t b = 0; b < 8 && k * 8 + b < len; ++b)
          got[k * 8 + b] = static_cast<uint8_t>(v >> (8 * b));
      }
      EXPECT_EQ(got, want) << "len " << len << " token " << token;
    }
  }
}

TEST(GpuKvPool, KernelBytesEqualTheCpuModelsBytesWithKAndV) {
  SKIP_WITHOUT_CUDA();
  check_equivalence(geometry(8, 128, 2, 16, false));
}

TEST(GpuKvPool, KernelBytesEqualTheCpuModelsBytesWithMla) {
  SKIP_WITHOUT_CUDA();
  check_equivalence(geometry(1, 576, 2, 16, true));
}

TEST(GpuKvPool, KernelBytesEqualTheCpuModelsBytesWithOddRowsAndUnalignedWords) {
  SKIP_WITHOUT_CUDA();
  check_equivalence(geometry(3, 5, 1, 4, false)); // 15-byte rows
}

TEST(GpuKvPool, RefusesTokensOutsideTheRequestsPages) {
  SKIP_WITHOUT_CUDA();
  auto gpu = gpu_kv_pool::create(geometry(1, 8, 1, 4, false), 8);
  ASSERT_TRUE(gpu) << describe(gpu.error());
  auto t = gpu_page_table::create({0, 1});
  ASSERT_TRUE(t) << describe(t.error());
  EXPECT_TRUE(is((*gpu)->write_layer(1, 0, *t, 0, 9, 9, 0), lserr::bad_input));
  EXPECT_TRUE(is((*gpu)->write_layer(1, 9, *t, 0, 8, 8, 0), lserr::bad_layer));
  auto outside = gpu_page_table::create({0, 8});
  ASSERT_TRUE(outside) << describe(outside.error());
  EXPECT_TRUE(is((*gpu)->write_layer(1, 0, *outside, 0, 8, 8, 0), lserr::bad_input));
}
