// Staging export: after a layer's event on the copy stream, the pinned
// mirror holds exactly the device bytes of the staged pages (and so
// kv_pattern's bytes); pages not staged stay untouched.
#include "device/kv_export.hpp"

#include <chrono>
#include <cstdio>
#include <cstring>
#include <future>

#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include "cuda_skip.hpp"
#include "device/cuda_event.hpp"
#include "model/gpu_kv_pool.hpp"
#include "model/kv_pool.hpp"
#include "transport/fabric/endpoint.hpp"
#include "wait_for_event.hpp"

using namespace layerstream;
using namespace std::chrono_literals;

using test::wait_for;

TEST(KvExport, StagedBytesEqualTheDeviceBytesLayerByLayer) {
  SKIP_WITHOUT_CUDA();
  model_config m;
  m.layers = 4;
  m.page_size = 16;
  const uint64_t pool_pages = 32;
  auto gpu = gpu_kv_pool::create(m, pool_pages);
  ASSERT_TRUE(gpu) << describe(gpu.error());
  auto compute = cuda_stream::create();
  ASSERT_TRUE(compute) << describe(compute.error());
  auto events = cuda_event_source::create(16);
  ASSERT_TRUE(events) << describe(events.error());
  auto exp = make_kv_export(**gpu, compute->handle(), false);
  ASSERT_TRUE(exp) << describe(exp.error());
  EXPECT_STREQ((*exp)->name(), "staging");
  EXPECT_FALSE((*exp)->device_memory());
  ASSERT_EQ((*exp)->src_bytes(), (*gpu)->bytes());
  // Same offsets as the pool: the transfer math is unchanged.
  auto src_k = (*exp)->k_ptrs();
  auto dev_k = (*gpu)->k_ptrs();
  ASSERT_EQ(src_k.size(), dev_k.size());
  for (size_t l = 0; l < src_k.size(); ++l)
    EXPECT_EQ(src_k[l] - reinterpret_cast<uint64_t>((*exp)->src_base()),
              dev_k[l] - reinterpret_cast<uint64_t>((*gpu)->base()));

  const std::vector<uint64_t> pages{3, 4, 5, 9, 20, 21}; // three runs
  const uint64_t prompt = pages.size() * m.page_size - 5;
  auto table = gpu_page_table::create(pages);
  ASSERT_TRUE(table) << describe(table.error());
  auto host = kv_pool::create(m, pool_pages);
  ASSERT_TRUE(host) << describe(host.error());
  for (uint32_t layer = 0; layer < m.layers; ++layer) {
    // The forward thread's per-layer sequence: kernels, stage, notify.
    ASSERT_FALSE((*gpu)->write_layer(77, layer, *table, 0, prompt, prompt, compute->handle()));
    ASSERT_FALSE((*exp)->stage(layer, pages));
    auto ev = (*events)->record((*exp)->notify_stream());
    ASSERT_FALSE(wait_for(ev)) << "layer " << layer;
    (*host)->write_layer(77, layer, pages, 0, prompt, prompt);
    // This layer's staged pages equal the CPU model's bytes right after its event.
    for (uint32_t b = 0; b < (*gpu)->buffers(); ++b)
      for (auto p : pages) {
        const uint64_t off = static_cast<uint64_t>((*gpu)->page_ptr(layer, b, p) - (*gpu)->base());
        EXPECT_EQ(std::memcmp((*exp)->src_base() + off, (*host)->base() + off, m.item_len()), 0)
            << "layer " << layer << " buffer " << b << " page " << p;
      }
  }
  // The whole mirror equals the device pool (pages never staged are zero in both).
  ASSERT_FALSE(compute->synchronize());
  std::vector<uint8_t> dev((*gpu)->bytes());
  ASSERT_FALSE((*gpu)->copy_to_host(dev.data()));
  EXPECT_EQ(std::memcmp(dev.data(), (*exp)->src_base(), dev.size()), 0);
  EXPECT_EQ((*host)->check_room(77, pages, 0, prompt, prompt), 0u);
}

TEST(KvExport, TheDirectPathReadsThePoolItself) {
  SKIP_WITHOUT_CUDA();
  model_config m;
  m.layers = 2;
  auto gpu = gpu_kv_pool::create(m, 4);
  ASSERT_TRUE(gpu) << describe(gpu.error());
  auto compute = cuda_stream::create();
  ASSERT_TRUE(compute) << describe(compute.error());
  auto exp = make_kv_export(**gpu, compute->handle(), true);
  ASSERT_TRUE(exp) << describe(exp.error());
  EXPECT_STREQ((*exp)->name(), "hmem");
  EXPECT_TRUE((*exp)->device_memory());
  EXPECT_EQ((*exp)->notify_stream(), compute->handle());
  EXPECT_EQ((*exp)->k_ptrs(), (*gpu)->k_ptrs());
  EXPECT_EQ((*exp)->v_ptrs(), (*gpu)->v_ptrs());
}

TEST(KvExport, StagingRefusesPagesOutsideThePool) {
  SKIP_WITHOUT_CUDA();
  model_config m;
  m.layers = 2;
  auto gpu = gpu_kv_pool::create(m, 4);
  ASSERT_TRUE(gpu) << describe(gpu.error());
  auto compute = cuda_stream::create();
  ASSERT_TRUE(compute) << describe(compute.error());
  auto exp = make_staging_export(**gpu, compute->handle());
  ASSERT_TRUE(exp) << describe(exp.error());
  EXPECT_TRUE(is((*exp)->stage(0, {4}), lserr::bad_input));
  EXPECT_TRUE(is((*exp)->stage(2, {0}), lserr::bad_layer));
}

TEST(KvExportProbe, RegisteringThePoolOnShmSucceedsOrSaysWhy) {
  SKIP_WITHOUT_CUDA();
  model_config m;
  m.layers = 2;
  auto gpu = gpu_kv_pool::create(m, 4);
  ASSERT_TRUE(gpu) << describe(gpu.error());
  int device = 0;
  ASSERT_EQ(cudaGetDevice(&device), cudaSuccess);
  fabric::fabric_config cfg;
  cfg.provider = "shm"; // offers FI_HMEM; whether it registers CUDA depends on its build
  auto why = fabric::probe_cuda_registration(cfg, (*gpu)->base(), (*gpu)->bytes(), device);
  if (why) {
    // Debian's libfabric (no CUDA): fi_mr_regattr answers -FI_ENOSYS.
    EXPECT_NE(describe(why).find("fi_mr_regattr"), std::string::npos) << describe(why);
    EXPECT_NE(describe(why).find("CUDA device"), std::string::npos) << describe(why);
  }
  std::printf("shm registers CUDA memory here: %s\n", why ? describe(why).c_str() : "yes");
  // A host endpoint refuses device memory whatever the build.
  cfg.hmem = false;
  auto ep = fabric::endpoint::open(cfg);
  ASSERT_TRUE(ep) << describe(ep.error());
  auto reg = (*ep)->register_memory((*gpu)->base(), (*gpu)->bytes(), FI_WRITE,
                                    fabric::memory_iface::cuda, device);
  EXPECT_FALSE(reg);
}
