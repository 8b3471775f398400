// The equivalence harness: the same randomized workload through the bulk
// path and the per-layer path gives the decode node bit-for-bit the same KV
// pool, equal to the expected bytes, with exactly the owned bytes written.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <map>
#include <ostream>
#include <string>
#include <vector>

#include <caf/actor_system.hpp>
#include <caf/actor_system_config.hpp>

#include <nlohmann/json.hpp>

#include "common/log.hpp"
#include "config/loader.hpp"
#include "node/device_select.hpp"
#include "node/nodes.hpp"
#include "tests/failing_device.hpp"

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
run_result run_once(const deployment_config& cfg, std::shared_ptr<trace_recorder> trace = nullptr,
                    const device_factory& make_device = {}) {
  run_result out;
  quiet_config scfg;
  caf::actor_system sys{scfg};
  local_cluster cluster;
  if (auto err = cluster.start(sys, cfg, std::move(trace), make_device)) {
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

/// The demo config at the equivalence harness's size, for `p`.
deployment_config harness_config(const shape& p) {
  auto cfg = std::get<deployment_config>(load_config_string(embedded_demo_config(), "demo.toml"));
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
  return cfg;
}

class Equivalence : public ::testing::TestWithParam<shape> {};

} // namespace

TEST_P(Equivalence, BulkAndPerLayerGiveTheSameDecodePoolAndExactlyTheOwnedBytes) {
  log::set_level("warn");
  auto cfg = harness_config(GetParam());
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

namespace {

/// Reconcile: layers the forward never notifies (workload.skip_notify_layers)
/// reach finish unreported and go by the bulk path, and only they.
struct skip_shape {
  shape base;
  std::vector<uint64_t> skip;
};

void PrintTo(const skip_shape& s, std::ostream* os) {
  PrintTo(s.base, os);
  *os << ", skip";
  for (auto l : s.skip)
    *os << " " << l;
}

class Reconcile : public ::testing::TestWithParam<skip_shape> {};

} // namespace

TEST_P(Reconcile, LayersNeverReportedAreSentByTheBulkPathOnceAndTheRoomsComplete) {
  log::set_level("error"); // the reconcile warning is expected once per room and chunk
  auto p = GetParam();
  auto cfg = harness_config(p.base);
  cfg.transfer.per_layer = true;
  auto plain = run_once(cfg);
  cfg.workload.skip_notify_layers = p.skip;
  auto err = validate_for(cfg, config_role::demo, "reconcile");
  ASSERT_FALSE(err) << err->to_string();
  auto skipped = run_once(cfg);

  EXPECT_EQ(skipped.report.complete, cfg.workload.rooms);
  EXPECT_EQ(skipped.report.failed, 0u);
  EXPECT_TRUE(skipped.report.bit_exact);
  // Exactly the owned bytes: a layer sent by both paths would count twice,
  // a layer sent by neither would be missing.
  EXPECT_EQ(skipped.report.bytes_written, skipped.report.bytes_expected)
      << "a byte sent twice or missing";
  for (auto& f : skipped.report.failures)
    ADD_FAILURE() << f;
  EXPECT_EQ(plain.report.bytes_written, plain.report.bytes_expected);
  ASSERT_EQ(skipped.decode_pool.size(), plain.decode_pool.size());
  EXPECT_TRUE(std::memcmp(skipped.decode_pool.data(), plain.decode_pool.data(),
                          plain.decode_pool.size()) == 0)
      << "decode pools differ between the per-layer run and the reconciled one";
}

INSTANTIATE_TEST_SUITE_P(Skips, Reconcile,
                         ::testing::Values(skip_shape{{1, false, 0, 31}, {0, 3, 5}},
                                           skip_shape{{2, false, 0, 32}, {0, 3, 5}},
                                           skip_shape{{1, true, 0, 33}, {0, 3, 5}},
                                           skip_shape{{2, true, 0, 34}, {2}},
                                           skip_shape{{2, false, 64, 35}, {0, 3, 5}},
                                           skip_shape{{1, true, 48, 36}, {5}},
                                           skip_shape{{2, false, 32, 37}, {0, 1, 2, 3, 4, 5}}),
                         [](const ::testing::TestParamInfo<skip_shape>& param_info) {
                           const auto& p = param_info.param;
                           std::string name = "cp" + std::to_string(p.base.cp) +
                                              (p.base.mla ? "_mla" : "_kv") + "_chunk" +
                                              std::to_string(p.base.chunk_tokens) + "_skip";
                           for (auto l : p.skip)
                             name += std::to_string(l);
                           return name;
                         });

namespace {

/// Per room (the trace's tid on prefill rank 0): how many "layer L" transfer
/// spans each layer has.
std::map<uint64_t, std::map<std::string, int>> transfer_spans(const trace_recorder& trace,
                                                              const std::string& file) {
  std::map<uint64_t, std::map<std::string, int>> out;
  auto path = ::testing::TempDir() + file;
  EXPECT_TRUE(trace.write(path));
  std::ifstream in{path};
  auto doc = nlohmann::json::parse(in);
  for (auto& ev : doc.at("traceEvents"))
    if (ev.value("cat", "") == "transfer" && ev.at("ph") == "X" && ev.at("pid") == 0)
      ++out[ev.at("tid").get<uint64_t>()][ev.at("name").get<std::string>()];
  std::remove(path.c_str());
  return out;
}

} // namespace

TEST(EquivalenceTrace, EveryPathRecordsOneTransferSpanPerLayerOfEachRoom) {
  log::set_level("error");
  auto cfg = harness_config(shape{1, false, 0, 41});
  cfg.workload.rooms = 4;
  struct mode {
    const char* name;
    bool per_layer;
    std::vector<uint64_t> skip;
  };
  for (const auto& m : {mode{"per-layer", true, {}}, mode{"bulk", false, {}},
                        mode{"reconciled", true, {0, 2, 5}}}) {
    SCOPED_TRACE(m.name);
    cfg.transfer.per_layer = m.per_layer;
    cfg.workload.skip_notify_layers = m.skip;
    auto trace = std::make_shared<trace_recorder>();
    auto r = run_once(cfg, trace);
    ASSERT_EQ(r.report.complete, cfg.workload.rooms);
    auto spans = transfer_spans(*trace, std::string{"trace_"} + m.name + ".json");
    EXPECT_EQ(spans.size(), cfg.workload.rooms) << "rooms with transfer spans";
    for (auto& [room, layers] : spans) {
      EXPECT_EQ(layers.size(), cfg.model.layers)
          << "room " << room << ": " << layers.size() << " distinct span names";
      for (uint32_t l = 0; l < cfg.model.layers; ++l)
        EXPECT_EQ(layers["layer " + std::to_string(l)], 1) << "room " << room << ", layer " << l;
    }
  }
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

// -- a forward that fails ----------------------------------------------------

namespace {

device_factory failing_devices(std::vector<uint64_t> fail, uint32_t notified) {
  return [fail, notified](const deployment_config& cfg,
                          uint32_t) -> caf::expected<std::unique_ptr<prefill_device>> {
    auto dev = cpu_device::create(cfg.model, cfg.prefill.pool_pages);
    if (!dev)
      return dev.error();
    return std::unique_ptr<prefill_device>(
        std::make_unique<layerstream::testing::failing_device>(std::move(*dev), fail, notified));
  };
}

bool all_name_the_forward(const workload_report& rep) {
  for (const auto& f : rep.failures)
    if (f.find("forward: ") == std::string::npos ||
        f.find("kv_fill launch failed (test)") == std::string::npos) {
      ADD_FAILURE() << "not the forward's reason: " << f;
      return false;
    }
  return !rep.failures.empty();
}

} // namespace

TEST(ForwardFailure, EveryRoomOfAFailedBatchFailsWithTheForwardsReasonAndTheRestComplete) {
  log::set_level("off"); // the failures are expected
  for (bool per_layer : {true, false}) {
    SCOPED_TRACE(per_layer ? "per-layer" : "bulk");
    auto cfg = harness_config(shape{2, false, 0, 51});
    cfg.transfer.per_layer = per_layer;
    // Batch 1 of each rank fails after its first 2 layers were notified.
    auto r = run_once(cfg, nullptr, failing_devices({1}, 2));
    EXPECT_GE(r.report.failed, 1u) << "the first batch's rooms";
    EXPECT_LE(r.report.failed, cfg.transfer.max_batch * cfg.cluster.cp_size);
    EXPECT_GE(r.report.complete, 1u) << "later batches";
    EXPECT_EQ(r.report.complete + r.report.failed, cfg.workload.rooms);
    EXPECT_TRUE(r.report.bit_exact) << "a complete room with a wrong byte";
    EXPECT_TRUE(all_name_the_forward(r.report));
    for (auto& f : r.report.failures)
      EXPECT_NE(f.find("forward:"), std::string::npos) << f;
  }
}

TEST(ForwardFailure, WhenEveryBatchFailsNoRoomCompletesAndTheBulkPathSendsNothing) {
  log::set_level("off");
  for (bool per_layer : {true, false}) {
    SCOPED_TRACE(per_layer ? "per-layer" : "bulk");
    auto cfg = harness_config(shape{1, false, 64, 52});
    cfg.transfer.per_layer = per_layer;
    std::vector<uint64_t> every(64);
    for (uint64_t b = 0; b < every.size(); ++b)
      every[b] = b + 1;
    auto r = run_once(cfg, nullptr, failing_devices(every, 0));
    EXPECT_EQ(r.report.complete, 0u);
    EXPECT_EQ(r.report.failed, cfg.workload.rooms);
    EXPECT_TRUE(all_name_the_forward(r.report));
    // No layer was notified and the bulk path must not send what the forward
    // did not write: not one byte reaches decode.
    EXPECT_EQ(r.report.bytes_written, 0u);
  }
}

// -- the same harness on the GPU forward ----------------------------------------

namespace {

/// Why the GPU forward cannot run here ("" = it can). Only a build without
/// CUDA or a machine with no visible device skips: where a device is seen,
/// a GPU forward that fails to start fails the test with its reason.
std::string gpu_unavailable() {
  if (!built_with_cuda())
    return "this build has no CUDA (nvcc not found, or a sanitizer build)";
  auto devices = visible_cuda_devices();
  if (!devices)
    return "no CUDA device: " + describe(devices.error());
  return *devices == 0 ? "no CUDA device is visible" : std::string{};
}

/// The GPU run completed every room, bit-exact, and decode's pool is the CPU run's.
void expect_same_decode_bytes(const run_result& gpu, const run_result& cpu, uint32_t rooms) {
  EXPECT_EQ(gpu.report.complete, rooms);
  EXPECT_TRUE(gpu.report.bit_exact);
  EXPECT_EQ(gpu.report.bytes_written, gpu.report.bytes_expected);
  for (auto& f : gpu.report.failures)
    ADD_FAILURE() << f;
  ASSERT_EQ(gpu.decode_pool.size(), cpu.decode_pool.size());
  EXPECT_TRUE(std::memcmp(gpu.decode_pool.data(), cpu.decode_pool.data(), cpu.decode_pool.size()) ==
              0)
      << "decode pools differ between the CPU and the GPU forward";
}

} // namespace

TEST(EquivalenceGpu, TheGpuForwardGivesDecodeTheSameBytesAsTheCpuForward) {
  if (auto why = gpu_unavailable(); !why.empty())
    GTEST_SKIP() << "GPU test skipped: " << why;
  log::set_level("warn");
  for (const auto& p : {shape{1, false, 0, 61}, shape{2, true, 48, 62}, shape{2, false, 64, 63}}) {
    for (bool per_layer : {true, false}) {
      SCOPED_TRACE(::testing::PrintToString(p) + (per_layer ? ", per-layer" : ", bulk"));
      auto cfg = harness_config(p);
      cfg.transfer.per_layer = per_layer;
      auto cpu = run_once(cfg);
      cfg.prefill.device = "gpu";
      cfg.prefill.kv_export = "staging";
      expect_same_decode_bytes(run_once(cfg), cpu, cfg.workload.rooms);
    }
  }
}

// kv_export "auto" on GPU: direct registration where the rank's provider
// registers the device pool (the probe tries it), staging otherwise; decode's
// bytes are the CPU forward's either way. "hmem" runs the direct path where
// it is possible and is refused with the probe's reason where it is not.
TEST(EquivalenceGpu, EveryKvExportTheFabricAllowsGivesDecodeTheCpuForwardsBytes) {
  if (auto why = gpu_unavailable(); !why.empty())
    GTEST_SKIP() << "GPU test skipped: " << why;
  log::set_level("warn");
  for (const char* provider : {"shm", "tcp;ofi_rxm"}) {
    SCOPED_TRACE(provider);
    auto cfg = harness_config(shape{2, false, 0, 64});
    cfg.fabric.provider = provider;
    auto cpu = run_once(cfg);
    cfg.prefill.device = "gpu";
    for (const char* exp : {"auto", "hmem"}) {
      SCOPED_TRACE(exp);
      cfg.prefill.kv_export = exp;
      auto dev = make_prefill_device(cfg, 0);
      if (!dev) {
        EXPECT_STREQ(exp, "hmem") << "auto must fall back to staging: " << describe(dev.error());
        EXPECT_NE(describe(dev.error()).find("cannot register the device pool"), std::string::npos)
            << describe(dev.error());
        std::printf("kv_export hmem over %s: refused: %s\n", provider,
                    describe(dev.error()).c_str());
        continue;
      }
      std::printf("kv_export %s over %s: %s\n", exp, provider, (*dev)->name().c_str());
      dev->reset();
      expect_same_decode_bytes(run_once(cfg), cpu, cfg.workload.rooms);
    }
  }
}

TEST(DeviceSelect, AGpuChoiceThisBuildOrMachineCannotHonourIsRefusedWithTheReason) {
  auto cfg = harness_config(shape{1, false, 0, 1});
  cfg.prefill.device = "gpu";
  auto dev = make_prefill_device(cfg, 0);
  if (!built_with_cuda()) {
    ASSERT_FALSE(dev);
    EXPECT_NE(describe(dev.error()).find("built without CUDA"), std::string::npos)
        << describe(dev.error());
  } else if (!dev) {
    EXPECT_NE(describe(dev.error()).find("device gpu"), std::string::npos) << describe(dev.error());
  }
  // "hmem" is honoured or refused with the reason, never quietly staged.
  cfg.prefill.kv_export = "hmem";
  auto hmem = make_prefill_device(cfg, 0);
  if (hmem) {
    EXPECT_EQ((*hmem)->name(), "gpu (hmem)");
    EXPECT_TRUE((*hmem)->src().cuda) << "the direct path registers device memory";
    return;
  }
  const auto why = describe(hmem.error());
  EXPECT_TRUE(why.find("cannot register the device pool") != std::string::npos ||
              why.find("built without CUDA") != std::string::npos ||
              why.find("device gpu") != std::string::npos)
      << why;
}
