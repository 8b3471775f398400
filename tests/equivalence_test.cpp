// The equivalence harness: the same randomized workload through the bulk
// path and the per-layer path gives the decode node bit-for-bit the same KV
// pool, equal to the expected bytes, with exactly the owned bytes written.
#include <gtest/gtest.h>

#include <cstring>
#include <ostream>

#include <caf/actor_system.hpp>
#include <caf/actor_system_config.hpp>

#include "common/log.hpp"
#include "config/loader.hpp"
#include "node/nodes.hpp"

using namespace layerstream;

namespace {

struct run_result {
  workload_report report;
  std::vector<uint8_t> decode_pool;
};

struct quiet_config : caf::actor_system_config {
  quiet_config() {
    layerstream::add_message_types(*this);
    set("logger.verbosity", caf::atom("quiet"));
  }
};

/// Runs the workload in one process (cp_size prefill ranks + a decode node)
/// and returns the report and a copy of the decode pool.
run_result run_once(const deployment_config& cfg) {
  run_result out;
  quiet_config scfg;
  caf::actor_system sys{scfg};
  local_cluster cluster;
  if (auto err = cluster.start(sys, cfg)) {
    ADD_FAILURE() << describe(err);
  } else {
    out.report = run_workload(sys, cluster.decode->receiver, cfg);
    auto* pool = cluster.decode->pool.get();
    out.decode_pool.assign(pool->base(), pool->base() + pool->bytes());
  }
  cluster.stop(sys);
  return out;
}

struct shape {
  uint32_t cp;
  bool mla;
  uint64_t chunk_tokens;
  uint64_t seed;
};

void PrintTo(const shape& s, std::ostream* os) {
  *os << "cp " << s.cp << (s.mla ? ", MLA" : ", K/V") << ", chunk " << s.chunk_tokens << ", seed "
      << s.seed;
}

class Equivalence : public ::testing::TestWithParam<shape> {};

} // namespace

TEST_P(Equivalence, BulkAndPerLayerGiveTheSameDecodePoolAndExactlyTheOwnedBytes) {
  log::set_level("warn");
  auto loaded = load_config_string(embedded_demo_config(), "demo.toml");
  ASSERT_TRUE(std::holds_alternative<deployment_config>(loaded));
  auto cfg = std::get<deployment_config>(loaded);
  auto p = GetParam();
  cfg.model.layers = 6;
  cfg.model.layer_compute = std::chrono::microseconds(100);
  cfg.model.mla = p.mla;
  if (p.mla)
    cfg.model.kv_heads = 1;
  cfg.cluster.cp_size = p.cp;
  cfg.transfer.chunk_tokens = p.chunk_tokens;
  cfg.transfer.max_batch = 3; // several batches, rooms in flight across them
  cfg.workload.rooms = 6;
  cfg.workload.min_tokens = 1;
  cfg.workload.max_tokens = 300;
  cfg.workload.seed = p.seed;
  cfg.workload.fragmentation = 0.5;
  auto err = validate_for(cfg, config_role::demo, "equivalence");
  ASSERT_FALSE(err) << err->to_string();

  cfg.transfer.per_layer = true;
  auto layered = run_once(cfg);
  cfg.transfer.per_layer = false;
  auto bulk = run_once(cfg);

  for (auto* r : {&layered, &bulk}) {
    EXPECT_EQ(r->report.complete, cfg.workload.rooms);
    EXPECT_TRUE(r->report.bit_exact);
    EXPECT_EQ(r->report.bytes_written, r->report.bytes_expected) << "a byte sent twice or missing";
    for (auto& f : r->report.failures)
      ADD_FAILURE() << f;
  }
  ASSERT_EQ(layered.decode_pool.size(), bulk.decode_pool.size());
  EXPECT_TRUE(std::memcmp(layered.decode_pool.data(), bulk.decode_pool.data(),
                          bulk.decode_pool.size()) == 0)
      << "decode pools differ between the per-layer and the bulk path";
}

TEST(EquivalenceMixed, ShortPromptsTakeTheBulkPathInTheSameBatchesAsLongOnes) {
  log::set_level("warn");
  auto cfg = std::get<deployment_config>(load_config_string(embedded_demo_config(), "demo.toml"));
  cfg.model.layers = 6;
  cfg.model.layer_compute = std::chrono::microseconds(100);
  cfg.cluster.cp_size = 2;
  cfg.transfer.max_batch = 4;
  cfg.workload.rooms = 8;
  cfg.workload.min_tokens = 1;
  cfg.workload.max_tokens = 300;
  cfg.workload.seed = 21;
  cfg.transfer.per_layer = false;
  auto bulk = run_once(cfg);
  cfg.transfer.per_layer = true;
  cfg.transfer.per_layer_min_tokens = 150; // about half the rooms go bulk
  auto mixed = run_once(cfg);
  EXPECT_EQ(mixed.report.complete, cfg.workload.rooms);
  EXPECT_TRUE(mixed.report.bit_exact);
  EXPECT_EQ(mixed.report.bytes_written, mixed.report.bytes_expected);
  ASSERT_EQ(mixed.decode_pool.size(), bulk.decode_pool.size());
  EXPECT_TRUE(
      std::memcmp(mixed.decode_pool.data(), bulk.decode_pool.data(), bulk.decode_pool.size()) == 0);
}

INSTANTIATE_TEST_SUITE_P(Shapes, Equivalence,
                         ::testing::Values(shape{1, false, 0, 11}, shape{2, false, 0, 12},
                                           shape{4, true, 0, 13}, shape{2, false, 64, 14},
                                           shape{4, false, 32, 15}, shape{1, true, 48, 16}),
                         [](const ::testing::TestParamInfo<shape>& param_info) {
                           const auto& p = param_info.param;
                           return "cp" + std::to_string(p.cp) + (p.mla ? "_mla" : "_kv") +
                                  "_chunk" + std::to_string(p.chunk_tokens);
                         });
