// The config loader: every shipped file, the embedded default, one case per
// class of bad input, the to_toml round trip, and the CLI flags that feed it.
#include "config/loader.hpp"

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <type_traits>
#include <utility>

#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common/error.hpp"

using namespace layerstream;
namespace fs = std::filesystem;

namespace {

const fs::path config_dir{LAYERSTREAM_CONFIG_DIR};

std::string read_text(const fs::path& path) {
  std::ifstream in{path, std::ios::binary};
  std::ostringstream out;
  out << in.rdbuf();
  return out.str();
}

/// Role by file name: the convention config/README.md states.
std::optional<config_role> role_of(const std::string& name) {
  if (name == "demo.toml")
    return config_role::demo;
  if (name.find("prefill") != std::string::npos)
    return config_role::prefill;
  if (name.find("decode") != std::string::npos)
    return config_role::decode;
  return std::nullopt;
}

std::vector<fs::path> shipped_files() {
  std::vector<fs::path> files;
  for (const auto& entry : fs::directory_iterator{config_dir})
    if (entry.path().extension() == ".toml")
      files.push_back(entry.path());
  std::sort(files.begin(), files.end());
  return files;
}

deployment_config load_ok(const fs::path& path) {
  auto res = load_config_file(path.string());
  if (auto* err = std::get_if<config_error>(&res)) {
    ADD_FAILURE() << err->to_string();
    return {};
  }
  return std::get<deployment_config>(res);
}

deployment_config parse_ok(const std::string& toml) {
  auto res = load_config_string(toml, "good.toml");
  if (auto* err = std::get_if<config_error>(&res)) {
    ADD_FAILURE() << err->to_string() << "\n--- input ---\n" << toml;
    return {};
  }
  return std::get<deployment_config>(res);
}

/// Loading `toml` fails naming bad.toml, exactly `key`, and a reason containing `reason`.
void expect_refused(const std::string& toml, const std::string& key, const std::string& reason) {
  auto res = load_config_string(toml, "bad.toml");
  auto* err = std::get_if<config_error>(&res);
  ASSERT_NE(err, nullptr) << "accepted:\n" << toml;
  EXPECT_EQ(err->file, "bad.toml");
  EXPECT_EQ(err->key, key) << err->to_string();
  EXPECT_NE(err->reason.find(reason), std::string::npos)
      << "reason lacks \"" << reason << "\": " << err->to_string();
  auto line = err->to_string();
  EXPECT_EQ(line.rfind("bad.toml", 0), 0u) << line;
  EXPECT_NE(line.find(key), std::string::npos) << line;
  EXPECT_EQ(line.find('\n'), std::string::npos) << line;
}

/// validate_for(cfg, role) fails naming `key`, with a reason containing `reason`.
void expect_invalid(const deployment_config& cfg, config_role role, const std::string& key,
                    const std::string& reason) {
  auto err = validate_for(cfg, role, "cli");
  ASSERT_TRUE(err.has_value()) << "accepted for " << to_string(role);
  EXPECT_EQ(err->key, key) << err->to_string();
  EXPECT_NE(err->reason.find(reason), std::string::npos) << err->to_string();
}

/// A config valid for every role, to break one field at a time.
deployment_config valid_config() {
  deployment_config cfg;
  cfg.prefill.port = 7001;
  cfg.decode.prefill = {"127.0.0.1:7001"};
  cfg.cluster.token = "0123456789abcdef-test-token";
  return cfg;
}

} // namespace

// --- shipped files -----------------------------------------------------------

TEST(ConfigFiles, EveryShippedFileLoadsAndValidatesForItsRole) {
  auto files = shipped_files();
  ASSERT_FALSE(files.empty()) << "no .toml in " << config_dir;
  for (const auto& path : files) {
    SCOPED_TRACE(path.string());
    auto role = role_of(path.filename().string());
    ASSERT_TRUE(role.has_value())
        << "name must be demo.toml or contain 'prefill' or 'decode' (config/README.md)";
    auto cfg = load_ok(path);
    if (auto err = validate_for(cfg, *role, path.string()))
      ADD_FAILURE() << err->to_string();
  }
}

TEST(ConfigFiles, TheDocumentedSetupsAreAllShipped) {
  for (const char* name : {"demo.toml", "cluster-prefill-0.toml", "cluster-prefill-1.toml",
                           "cluster-decode.toml", "shm-prefill.toml", "shm-decode.toml"})
    EXPECT_TRUE(fs::exists(config_dir / name)) << name;
}

namespace {

/// The decode file's prefill list names the prefill files' endpoints in
/// cp_rank order, and every node agrees on geometry, CP size and provider.
void expect_consistent_cluster(const std::string& decode_file,
                               const std::vector<std::string>& prefill_files) {
  auto dec = load_ok(config_dir / decode_file);
  ASSERT_EQ(dec.decode.prefill.size(), prefill_files.size());
  ASSERT_EQ(dec.cluster.cp_size, prefill_files.size());
  for (size_t i = 0; i < prefill_files.size(); ++i) {
    SCOPED_TRACE(prefill_files[i]);
    auto pre = load_ok(config_dir / prefill_files[i]);
    EXPECT_EQ(pre.prefill.cp_rank, i);
    EXPECT_EQ(dec.decode.prefill[i], pre.prefill.host + ":" + std::to_string(pre.prefill.port));
    EXPECT_EQ(pre.cluster.cp_size, dec.cluster.cp_size);
    EXPECT_EQ(pre.cluster.token, dec.cluster.token) << "control-plane authentication would fail";
    EXPECT_EQ(pre.fabric.provider, dec.fabric.provider);
    EXPECT_EQ(pre.model.layers, dec.model.layers);
    EXPECT_EQ(pre.model.item_len(), dec.model.item_len());
    EXPECT_EQ(pre.model.mla, dec.model.mla);
    EXPECT_EQ(pre.model.page_size, dec.model.page_size);
    EXPECT_LE(dec.workload.max_tokens, pre.workload.max_tokens)
        << "decode asks for longer prompts than the prefill pool is sized for";
  }
}

} // namespace

TEST(ConfigFiles, TheClusterFilesDescribeOneConsistentCluster) {
  expect_consistent_cluster("cluster-decode.toml",
                            {"cluster-prefill-0.toml", "cluster-prefill-1.toml"});
}

TEST(ConfigFiles, TheShmFilesDescribeOneConsistentSingleHostSetup) {
  expect_consistent_cluster("shm-decode.toml", {"shm-prefill.toml"});
  EXPECT_EQ(load_ok(config_dir / "shm-decode.toml").fabric.provider, "shm");
}

TEST(ConfigFiles, TheEmbeddedDefaultIsExactlyDemoToml) {
  EXPECT_EQ(std::string{embedded_demo_config()}, read_text(config_dir / "demo.toml"));
}

// run_workload (node/nodes.cpp) opens every room at once; rooms the decode
// pool cannot hold yet wait for pages, so a larger workload runs, but one
// wave after another. The shipped files run in one wave, as their timings
// and the docs' figures assume.
TEST(ConfigFiles, EveryShippedWorkloadFitsItsDecodePoolAtOnce) {
  for (const auto& path : shipped_files()) {
    SCOPED_TRACE(path.string());
    auto role = role_of(path.filename().string());
    if (role == config_role::prefill)
      continue;
    auto cfg = load_ok(path);
    uint64_t pages_per_room =
        (cfg.workload.max_tokens + cfg.model.page_size - 1) / cfg.model.page_size;
    EXPECT_LE(uint64_t{cfg.workload.rooms} * pages_per_room, cfg.decode.pool_pages)
        << cfg.workload.rooms << " rooms of up to " << pages_per_room << " pages";
  }
}

TEST(ConfigFiles, TheEmbeddedDefaultIsASmallLoopbackDemo) {
  auto cfg = parse_ok(embedded_demo_config());
  EXPECT_FALSE(validate_for(cfg, config_role::demo).has_value());
  EXPECT_EQ(cfg.fabric.provider, "tcp;ofi_rxm");
  EXPECT_EQ(cfg.fabric.bind_address, "127.0.0.1");
  EXPECT_EQ(cfg.model.layers, 32u);
  EXPECT_EQ(cfg.workload.rooms, 8u);
}

// --- defaults and good input -------------------------------------------------

TEST(ConfigLoader, AnEmptyFileGivesTheStructDefaults) {
  EXPECT_TRUE(same_config(parse_ok(""), deployment_config{}));
}

TEST(ConfigLoader, KeysLeftOutKeepTheirDefaults) {
  auto cfg = parse_ok("[model]\nlayers = 4\n");
  EXPECT_EQ(cfg.model.layers, 4u);
  EXPECT_EQ(cfg.model.head_dim, deployment_config{}.model.head_dim);
  EXPECT_EQ(cfg.timeouts.room, deployment_config{}.timeouts.room);
}

TEST(ConfigLoader, DurationsAreReadInTheUnitTheKeyNames) {
  auto cfg = parse_ok("[model]\nlayer_compute_us = 250\n[timeouts]\nsubmit_ms = 7\n"
                      "room_ms = 1008\nheartbeat_ms = 9\nconnection_ms = 20\n");
  EXPECT_EQ(cfg.model.layer_compute, std::chrono::microseconds{250});
  EXPECT_EQ(cfg.timeouts.submit, std::chrono::milliseconds{7});
  EXPECT_EQ(cfg.timeouts.room, std::chrono::milliseconds{1008});
  EXPECT_EQ(cfg.timeouts.heartbeat, std::chrono::milliseconds{9});
  EXPECT_EQ(cfg.timeouts.connection, std::chrono::milliseconds{20});
}

TEST(ConfigLoader, FragmentationMayBeWrittenAsAnInteger) {
  EXPECT_EQ(parse_ok("[workload]\nfragmentation = 1\n").workload.fragmentation, 1.0);
  EXPECT_EQ(parse_ok("[workload]\nfragmentation = 0\n").workload.fragmentation, 0.0);
}

TEST(ConfigLoader, EveryListedProviderIsAccepted) {
  for (const char* p :
       {"", "tcp;ofi_rxm", "net", "shm", "sockets", "verbs;ofi_rxm", "efa", "udp;ofi_rxd"})
    EXPECT_EQ(parse_ok(std::string{"[fabric]\nprovider = \""} + p + "\"\n").fabric.provider, p);
}

TEST(ConfigLoader, LimitValuesOfEachIntegerWidthAreAccepted) {
  auto cfg = parse_ok("[prefill]\nport = 65535\n[cluster]\ncp_size = 64\n"
                      "[workload]\nseed = 9223372036854775807\n");
  EXPECT_EQ(cfg.prefill.port, 65535u);
  EXPECT_EQ(cfg.cluster.cp_size, 64u);
  EXPECT_EQ(cfg.workload.seed, 9223372036854775807u);
}

TEST(ConfigLoader, AnIpv6PrefillEndpointInBracketsIsAccepted) {
  EXPECT_EQ(parse_ok("[decode]\nprefill = [\"[::1]:7001\"]\n").decode.prefill[0], "[::1]:7001");
}

TEST(ConfigLoader, AnEndpointSplitsIntoTheHostTheGuardTakesAndItsPort) {
  auto v6 = split_endpoint("[::1]:7001");
  ASSERT_TRUE(std::holds_alternative<endpoint_parts>(v6)) << std::get<std::string>(v6);
  EXPECT_EQ(std::get<endpoint_parts>(v6).host, "::1"); // no brackets for CAF and the guard
  EXPECT_EQ(std::get<endpoint_parts>(v6).port, 7001);
  auto v4 = split_endpoint("10.201.0.2:65535");
  ASSERT_TRUE(std::holds_alternative<endpoint_parts>(v4));
  EXPECT_EQ(std::get<endpoint_parts>(v4).host, "10.201.0.2");
  EXPECT_EQ(std::get<endpoint_parts>(v4).port, 65535);
  for (const char* bad : {"127.0.0.1", ":7001", "::1:7001", "[::1:7001", "[]:7001", "127.0.0.1:0",
                          "127.0.0.1:65536", "127.0.0.1:7x", "127.0.0.1:"}) {
    auto parts = split_endpoint(bad);
    ASSERT_TRUE(std::holds_alternative<std::string>(parts)) << bad << " split";
    EXPECT_FALSE(std::get<std::string>(parts).empty()) << bad;
  }
}

TEST(ConfigLoader, AFileThatDoesNotExistIsRefusedNamingIt) {
  auto res = load_config_file("/nonexistent/x.toml");
  auto* err = std::get_if<config_error>(&res);
  ASSERT_NE(err, nullptr);
  EXPECT_EQ(err->file, "/nonexistent/x.toml");
  EXPECT_NE(err->reason.find("cannot open"), std::string::npos);
}

TEST(ConfigLoader, AConfigPathThatIsNotARegularFileIsRefused) {
  // A directory reads as 0 bytes: without the check it loaded as the defaults.
  auto dir = fs::temp_directory_path() / ("ls-config-dir-" + std::to_string(::getpid()));
  fs::create_directories(dir);
  auto res = load_config_file(dir.string());
  fs::remove_all(dir);
  auto* err = std::get_if<config_error>(&res);
  ASSERT_NE(err, nullptr) << "a directory loaded as a config";
  EXPECT_EQ(err->file, dir.string());
  EXPECT_NE(err->reason.find("not a regular file"), std::string::npos) << err->to_string();
  res = load_config_file("/dev/null");
  err = std::get_if<config_error>(&res);
  ASSERT_NE(err, nullptr) << "/dev/null loaded as a config";
  EXPECT_NE(err->reason.find("not a regular file"), std::string::npos) << err->to_string();
}

// --- config_error ------------------------------------------------------------

TEST(ConfigError, ToStringIsFileKeyAndReasonOnOneLine) {
  config_error err{"config/demo.toml", "model.layers", "expected an integer, got string \"x\""};
  EXPECT_EQ(err.to_string(),
            "config/demo.toml: model.layers: expected an integer, got string \"x\"");
  err.line = 12;
  EXPECT_EQ(err.to_string(),
            "config/demo.toml:12: model.layers: expected an integer, got string \"x\"");
}

TEST(ConfigError, ToStringLeavesOutAnEmptyKey) {
  EXPECT_EQ((config_error{"a.toml", "", "cannot open"}.to_string()), "a.toml: cannot open");
}

TEST(ConfigError, ItBecomesABadInputErrorOfTheOneErrorSystem) {
  config_error err{"a.toml", "model.layers", "must be at least 1, got 0", 3};
  auto e = to_error(err);
  EXPECT_TRUE(is(e, lserr::bad_input));
  EXPECT_EQ(message_of(e), err.to_string());
}

TEST(ConfigError, TypeErrorsCarryTheLineOfTheValue) {
  auto res = load_config_string("[model]\n\nlayers = \"x\"\n", "bad.toml");
  ASSERT_TRUE(std::holds_alternative<config_error>(res));
  EXPECT_EQ(std::get<config_error>(res).to_string(),
            "bad.toml:3: model.layers: expected a non-negative integer, got string \"x\"");
}

TEST(ConfigError, ValueErrorsFoundAfterLoadingCarryTheLineOfTheKey) {
  auto res = load_config_string("[decode]\nprefill = [\n  \"a:1\",\n  \"b\",\n]\n", "bad.toml");
  ASSERT_TRUE(std::holds_alternative<config_error>(res));
  EXPECT_EQ(std::get<config_error>(res).to_string(),
            "bad.toml:4: decode.prefill[1]: expected \"host:port\", got \"b\": missing \":port\"");
}

// --- syntax, unknown tables and keys -----------------------------------------

TEST(ConfigLoader, BrokenTomlSyntaxIsRefusedWithItsLine) {
  auto res = load_config_string("[model]\nlayers = = 3\n", "bad.toml");
  auto* err = std::get_if<config_error>(&res);
  ASSERT_NE(err, nullptr);
  EXPECT_EQ(err->line, 2u);
  EXPECT_NE(err->reason.find("TOML syntax"), std::string::npos);
}

TEST(ConfigLoader, ADuplicateKeyIsRefused) {
  auto res = load_config_string("[model]\nlayers = 3\nlayers = 4\n", "bad.toml");
  EXPECT_TRUE(std::holds_alternative<config_error>(res));
}

TEST(ConfigLoader, AnUnknownTableIsRefusedWithASuggestion) {
  expect_refused("[modle]\nlayers = 3\n", "modle", "did you mean [model]?");
}

TEST(ConfigLoader, AnUnrelatedUnknownTableIsRefused) {
  expect_refused("[gpu]\nid = 0\n", "gpu", "unknown table");
}

TEST(ConfigLoader, AnUnknownTableErrorListsEveryTable) {
  expect_refused("[gpu]\nid = 0\n", "gpu",
                 "(tables: model, transfer, fabric, timeouts, prefill, decode, workload, "
                 "cluster, tls, log)");
}

TEST(ConfigLoader, AnUnknownKeyIsRefusedWithASuggestion) {
  expect_refused("[model]\nlayer = 3\n", "model.layer", "did you mean layers?");
}

TEST(ConfigLoader, AKeyInTheWrongTableIsRefusedNamingTheRightOne) {
  expect_refused("[model]\nchunk_tokens = 32\n", "model.chunk_tokens",
                 "did you mean transfer.chunk_tokens?");
}

TEST(ConfigLoader, ADurationWithoutItsUnitSuffixIsRefused) {
  expect_refused("[timeouts]\nsubmit = 10\n", "timeouts.submit", "did you mean submit_ms?");
}

TEST(ConfigLoader, ATopLevelKeyIsRefusedNamingItsTable) {
  expect_refused("layers = 3\n", "layers", "did you mean model.layers?");
}

TEST(ConfigLoader, ATableWrittenAsAValueIsRefused) {
  expect_refused("model = 3\n", "model", "expected a table");
}

// --- types and ranges --------------------------------------------------------

TEST(ConfigLoader, AStringWhereAnIntegerBelongsIsRefused) {
  expect_refused("[model]\nlayers = \"x\"\n", "model.layers",
                 "expected a non-negative integer, got string \"x\"");
}

TEST(ConfigLoader, ANegativeUnsignedValueIsRefused) {
  expect_refused("[transfer]\nmax_batch = -1\n", "transfer.max_batch",
                 "expected a non-negative integer, got integer -1");
}

TEST(ConfigLoader, AFloatWhereAnIntegerBelongsIsRefused) {
  expect_refused("[model]\npage_size = 16.0\n", "model.page_size", "got float 16.0");
}

TEST(ConfigLoader, APortAbove65535IsRefused) {
  expect_refused("[prefill]\nport = 70000\n", "prefill.port",
                 "out of range: 70000 (at most 65535)");
}

TEST(ConfigLoader, AValueAboveUint32IsRefused) {
  expect_refused("[model]\nlayers = 4294967296\n", "model.layers", "at most 4294967295");
}

TEST(ConfigLoader, AnIntegerBeyondTomlsRangeIsASyntaxError) {
  auto res = load_config_string("[workload]\nseed = 18446744073709551615\n", "bad.toml");
  EXPECT_TRUE(std::holds_alternative<config_error>(res));
}

TEST(ConfigLoader, AStringWhereABooleanBelongsIsRefused) {
  expect_refused("[model]\nmla = \"yes\"\n", "model.mla", "expected true or false");
}

TEST(ConfigLoader, AnIntegerWhereAStringBelongsIsRefused) {
  expect_refused("[fabric]\nprovider = 3\n", "fabric.provider", "expected a string, got integer 3");
}

TEST(ConfigLoader, AStringWhereANumberBelongsIsRefused) {
  expect_refused("[workload]\nfragmentation = \"0.3\"\n", "workload.fragmentation",
                 "expected a number");
}

TEST(ConfigLoader, AFloatDurationIsRefused) {
  expect_refused("[timeouts]\nroom_ms = 1.5\n", "timeouts.room_ms", "expected an integer");
}

TEST(ConfigLoader, APrefillListThatIsNotAnArrayIsRefused) {
  expect_refused("[decode]\nprefill = \"127.0.0.1:7001\"\n", "decode.prefill",
                 "expected an array of strings");
}

TEST(ConfigLoader, ANonStringInThePrefillListIsRefusedNamingItsIndex) {
  expect_refused("[decode]\nprefill = [\"127.0.0.1:7001\", 7002]\n", "decode.prefill[1]",
                 "expected a string, got integer 7002");
}

// --- impossible geometry -----------------------------------------------------

TEST(ConfigLoader, ZeroLayersIsRefused) {
  expect_refused("[model]\nlayers = 0\n", "model.layers", "must be at least 1");
}

TEST(ConfigLoader, MoreThan4096LayersIsRefused) {
  expect_refused("[model]\nlayers = 4097\n", "model.layers", "must be at most 4096, got 4097");
  EXPECT_EQ(parse_ok("[model]\nlayers = 4096\n").model.layers, 4096u);
}

TEST(ConfigLoader, ZeroPageSizeIsRefused) {
  expect_refused("[model]\npage_size = 0\n", "model.page_size", "must be at least 1");
}

TEST(ConfigLoader, ZeroKvHeadsIsRefused) {
  expect_refused("[model]\nkv_heads = 0\n", "model.kv_heads", "must be at least 1");
}

TEST(ConfigLoader, ZeroHeadDimIsRefused) {
  expect_refused("[model]\nhead_dim = 0\n", "model.head_dim", "must be at least 1");
}

TEST(ConfigLoader, ADtypeOtherThanOneTwoOrFourBytesIsRefused) {
  expect_refused("[model]\ndtype_bytes = 3\n", "model.dtype_bytes", "must be 1, 2 or 4");
  expect_refused("[model]\ndtype_bytes = 8\n", "model.dtype_bytes", "got 8");
}

TEST(ConfigLoader, MlaWithMoreThanOneKvHeadIsRefused) {
  expect_refused("[model]\nmla = true\nkv_heads = 8\n", "model.kv_heads", "must be 1 with");
  EXPECT_TRUE(parse_ok("[model]\nmla = true\nkv_heads = 1\n").model.mla);
}

TEST(ConfigLoader, APageLargerThan2To64BytesIsRefused) {
  expect_refused("[model]\npage_size = 4294967295\nkv_heads = 4294967295\n"
                 "head_dim = 4294967295\n",
                 "model", "passes 2^64");
}

TEST(ConfigLoader, ChunkTokensNotAMultipleOfThePageSizeIsRefused) {
  expect_refused("[model]\npage_size = 16\n[transfer]\nchunk_tokens = 100\n",
                 "transfer.chunk_tokens", "must be a multiple of model.page_size (16)");
  EXPECT_EQ(parse_ok("[transfer]\nchunk_tokens = 128\n").transfer.chunk_tokens, 128u);
}

TEST(ConfigLoader, ZeroMaxBatchIsRefused) {
  expect_refused("[transfer]\nmax_batch = 0\n", "transfer.max_batch", "must be at least 1");
}

TEST(ConfigLoader, NotifyPollIsReadAndBounded) {
  EXPECT_EQ(parse_ok("").transfer.notify_poll, std::chrono::microseconds(50));
  EXPECT_EQ(parse_ok("[transfer]\nnotify_poll_us = 0\n").transfer.notify_poll.count(), 0);
  expect_refused("[transfer]\nnotify_poll_us = 20000\n", "transfer.notify_poll_us",
                 "must be at most 10000");
  expect_refused("[transfer]\nnotify_poll_us = -1\n", "transfer.notify_poll_us",
                 "must not be negative");
}

TEST(ConfigLoader, NotifySpinIsReadAndBounded) {
  EXPECT_EQ(parse_ok("").transfer.notify_spin, std::chrono::microseconds(2000));
  EXPECT_EQ(parse_ok("[transfer]\nnotify_spin_us = 0\n").transfer.notify_spin.count(), 0);
  EXPECT_EQ(parse_ok("[transfer]\nnotify_spin_us = 100000\n").transfer.notify_spin.count(), 100000);
  expect_refused("[transfer]\nnotify_spin_us = 100001\n", "transfer.notify_spin_us",
                 "must be at most 100000");
  expect_refused("[transfer]\nnotify_spin_us = -1\n", "transfer.notify_spin_us",
                 "must not be negative");
}

TEST(ConfigLoader, WriteIovIsReadAndBounded) {
  EXPECT_EQ(parse_ok("").fabric.write_iov, 0u);
  EXPECT_EQ(parse_ok("[fabric]\nwrite_iov = 1\n").fabric.write_iov, 1u);
  expect_refused("[fabric]\nwrite_iov = 65\n", "fabric.write_iov", "must be at most 64");
  expect_refused("[fabric]\nwrite_iov = -1\n", "fabric.write_iov",
                 "expected a non-negative integer");
}

TEST(ConfigLoader, ZeroMinTokensIsRefused) {
  expect_refused("[workload]\nmin_tokens = 0\n", "workload.min_tokens", "must be at least 1");
}

TEST(ConfigLoader, MinTokensAboveMaxTokensIsRefused) {
  expect_refused("[workload]\nmin_tokens = 600\nmax_tokens = 512\n", "workload.min_tokens",
                 "must not exceed workload.max_tokens (512)");
}

TEST(ConfigLoader, ZeroRoomsIsRefused) {
  expect_refused("[workload]\nrooms = 0\n", "workload.rooms", "must be at least 1");
}

TEST(ConfigLoader, FragmentationOutsideZeroToOneIsRefused) {
  expect_refused("[workload]\nfragmentation = 1.5\n", "workload.fragmentation",
                 "must be in [0, 1], got 1.5");
  expect_refused("[workload]\nfragmentation = -0.1\n", "workload.fragmentation", "got -0.1");
  expect_refused("[workload]\nfragmentation = nan\n", "workload.fragmentation", "got nan");
}

TEST(ConfigLoader, SkipNotifyLayersAreReadAndEachMustBeBelowTheLayerCount) {
  EXPECT_TRUE(parse_ok("").workload.skip_notify_layers.empty());
  EXPECT_EQ(parse_ok("[model]\nlayers = 6\n[workload]\nskip_notify_layers = [0, 5]\n")
                .workload.skip_notify_layers,
            (std::vector<uint64_t>{0, 5}));
  expect_refused("[model]\nlayers = 6\n[workload]\nskip_notify_layers = [0, 6]\n",
                 "workload.skip_notify_layers[1]", "must be below model.layers (6), got 6");
}

TEST(ConfigLoader, ZeroCpSizeIsRefused) {
  expect_refused("[cluster]\ncp_size = 0\n", "cluster.cp_size", "must be in 1..64, got 0");
}

TEST(ConfigLoader, CpSizeAbove64IsRefused) {
  expect_refused("[cluster]\ncp_size = 65\n", "cluster.cp_size", "got 65");
}

TEST(ConfigLoader, ACpRankNotBelowCpSizeIsRefused) {
  expect_refused("[cluster]\ncp_size = 2\n[prefill]\ncp_rank = 2\n", "prefill.cp_rank",
                 "must be below cluster.cp_size (2), got 2");
}

TEST(ConfigLoader, ZeroPoolPagesIsRefused) {
  expect_refused("[prefill]\npool_pages = 0\n", "prefill.pool_pages", "must be at least 1");
  expect_refused("[decode]\npool_pages = 0\n", "decode.pool_pages", "must be at least 1");
}

TEST(ConfigLoader, APoolWhoseBytesPass2To64IsRefused) {
  // 2^38 bytes a page over all layers (the prefill pool's one page is under
  // the 1 TiB cap), 2^26 pages.
  expect_refused("[model]\nlayers = 4096\nkv_heads = 1\nhead_dim = 1048576\ndtype_bytes = 2\n"
                 "page_size = 16\nmla = false\n[prefill]\npool_pages = 1\n"
                 "[decode]\npool_pages = 67108864\n",
                 "decode.pool_pages", "pass 2^64");
}

TEST(ConfigLoader, APoolPast1TiBIsRefusedForTheRolesThatMapIt) {
  // 2 MiB a page (one layer, one buffer): 2^19 pages are 1 TiB exactly.
  const std::string big = "[model]\nlayers = 1\nkv_heads = 1\nhead_dim = 1024\ndtype_bytes = 2\n"
                          "page_size = 1024\nmla = true\n";
  auto cfg = parse_ok(big + "[prefill]\npool_pages = 524289\n[decode]\npool_pages = 524288\n");
  expect_invalid(cfg, config_role::demo, "prefill.pool_pages", "past the 1 TiB a pool may map");
  // A decode node maps only its own pool, which is 1 TiB exactly.
  cfg.cluster.token = std::string(32, 't');
  cfg.cluster.cp_size = 1;
  cfg.decode.prefill = {"127.0.0.1:7001"};
  EXPECT_FALSE(validate_for(cfg, config_role::decode, "cli").has_value());
  cfg.decode.pool_pages = 524289;
  expect_invalid(cfg, config_role::decode, "decode.pool_pages", "past the 1 TiB a pool may map");
}

TEST(ConfigLoader, FirstRoomIsAtLeastOne) {
  EXPECT_EQ(parse_ok("").workload.first_room, 1u);
  EXPECT_EQ(parse_ok("[workload]\nfirst_room = 1001\n").workload.first_room, 1001u);
  expect_refused("[workload]\nfirst_room = 0\n", "workload.first_room", "must be at least 1");
}

TEST(ConfigLoader, AWorkloadOfMoreThan2To20RoomsIsRefused) {
  expect_refused("[workload]\nrooms = 1048577\n", "workload.rooms",
                 "must be at most 1048576 (2^20), got 1048577");
}

TEST(ConfigLoader, APoolOfMoreThan2To26PagesIsRefusedBeforeAnythingIsAllocated) {
  // 1-byte pages: 4 GiB of pool would pass, but the page lists would take 32 GiB.
  const std::string tiny = "[model]\nlayers = 1\nkv_heads = 1\nhead_dim = 1\ndtype_bytes = 1\n"
                           "page_size = 1\nmla = true\n";
  expect_refused(tiny + "[decode]\npool_pages = 4294967296\n", "decode.pool_pages",
                 "must be at most 67108864 (2^26) pages, got 4294967296");
  expect_refused(tiny + "[prefill]\npool_pages = 67108865\n", "prefill.pool_pages",
                 "must be at most 67108864");
  EXPECT_EQ(parse_ok(tiny + "[decode]\npool_pages = 67108864\n").decode.pool_pages, 67108864u);
}

TEST(ConfigLoader, AnUnknownProviderIsRefusedListingTheValidOnes) {
  expect_refused("[fabric]\nprovider = \"rdma\"\n", "fabric.provider", "unknown provider \"rdma\"");
  expect_refused("[fabric]\nprovider = \"rdma\"\n", "fabric.provider", "\"verbs;ofi_rxm\"");
}

TEST(ConfigLoader, AMisspelledProviderGetsASuggestion) {
  expect_refused("[fabric]\nprovider = \"tcp;ofi_rx\"\n", "fabric.provider",
                 "did you mean \"tcp;ofi_rxm\"?");
}

TEST(ConfigLoader, AProviderWithoutItsUtilityGetsASuggestion) {
  expect_refused("[fabric]\nprovider = \"verbs\"\n", "fabric.provider",
                 "did you mean \"verbs;ofi_rxm\"?");
}

TEST(ConfigLoader, AnUnknownLogLevelIsRefused) {
  expect_refused("[log]\nlevel = \"verbose\"\n", "log.level", "unknown level \"verbose\"");
  expect_refused("[log]\nlevel = \"INFO\"\n", "log.level", "one of \"trace\"");
}

TEST(ConfigLoader, ComputeWaitIsSpinOrSleep) {
  EXPECT_EQ(parse_ok("").model.compute_wait, "spin");
  EXPECT_EQ(parse_ok("[model]\ncompute_wait = \"sleep\"\n").model.compute_wait, "sleep");
  expect_refused("[model]\ncompute_wait = \"nap\"\n", "model.compute_wait",
                 "unknown value \"nap\"; one of \"spin\", \"sleep\"");
}

TEST(ConfigLoader, EveryLogLevelIsAccepted) {
  for (const char* level : {"trace", "debug", "info", "warn", "error", "off"})
    EXPECT_EQ(parse_ok(std::string{"[log]\nlevel = \""} + level + "\"\n").log.level, level);
}

TEST(ConfigLoader, AZeroOrNegativeDurationIsRefused) {
  expect_refused("[model]\nlayer_compute_us = 0\n", "model.layer_compute_us",
                 "must be positive, got 0");
  expect_refused("[timeouts]\nsubmit_ms = 0\n", "timeouts.submit_ms", "must be positive");
  expect_refused("[timeouts]\nroom_ms = -5\n", "timeouts.room_ms", "must be positive, got -5");
  expect_refused("[timeouts]\nheartbeat_ms = 0\n", "timeouts.heartbeat_ms", "must be positive");
  expect_refused("[timeouts]\nconnection_ms = -1\n", "timeouts.connection_ms", "must be positive");
}

TEST(ConfigLoader, ADurationLongerThanADayIsRefused) {
  // Unbounded, 2^63 - 1 ms overflowed to a negative timeout in nanoseconds.
  for (const char* key : {"submit_ms", "room_ms", "heartbeat_ms", "connection_ms"}) {
    SCOPED_TRACE(key);
    expect_refused(std::string{"[timeouts]\n"} + key + " = 86400001\n",
                   std::string{"timeouts."} + key, "must be at most 86400000 (1 day)");
    expect_refused(std::string{"[timeouts]\n"} + key + " = 9223372036854775807\n",
                   std::string{"timeouts."} + key, "1 day");
  }
  expect_refused("[model]\nlayer_compute_us = 86400000001\n", "model.layer_compute_us",
                 "must be at most 86400000000 (1 day)");
  auto cfg =
      parse_ok("[model]\nlayers = 1\nlayer_compute_us = 86400000000\n[timeouts]\nsubmit_ms = "
               "60000000\n"
               "room_ms = 86400000\nheartbeat_ms = 43200000\nconnection_ms = 86400000\n");
  // The longest sum a node forms (the gate's session timeout) stays positive in ns.
  auto session = 2 * cfg.timeouts.room + cfg.timeouts.submit;
  EXPECT_GT(std::chrono::duration_cast<std::chrono::nanoseconds>(session).count(), 0);
}

TEST(ConfigLoader, AForwardLongerThanTheRoomDeadlineIsRefused) {
  // 32 layers of 400 ms: a 12.8 s forward, every room failed at 10 s.
  expect_refused("[model]\nlayers = 32\nlayer_compute_us = 400000\n[timeouts]\nroom_ms = 10000\n",
                 "model.layer_compute_us",
                 "times model.layers (32) is a forward of 12800 ms, longer than timeouts.room_ms "
                 "(10000): every room would fail at its deadline");
  auto cfg = parse_ok(
      "[model]\nlayers = 32\nlayer_compute_us = 312500\n[timeouts]\nsubmit_ms = 5000\nroom_ms = "
      "10000\n");
  EXPECT_EQ(cfg.model.layer_compute * cfg.model.layers, std::chrono::milliseconds{10000});
}

TEST(ConfigLoader, AWriteDeadlineWhoseAnswerOutlastsTheRoomDeadlineIsRefused) {
  // A submit is answered up to submit_ms plus a quarter (at least 1 s) after
  // it was posted: 10 s -> 12.5 s, 100 ms -> 1.1 s. The room's deadline must
  // come later, or a write inside its own deadline fails as writes_in_flight.
  expect_refused("[timeouts]\nsubmit_ms = 10000\nroom_ms = 12500\n", "timeouts.submit_ms",
                 "10000 ms with its answer's margin is 12500 ms, not shorter than "
                 "timeouts.room_ms (12500): a layer's write still inside its own deadline would "
                 "fail at the room's");
  expect_refused("[timeouts]\nsubmit_ms = 100\nroom_ms = 1100\n", "timeouts.submit_ms",
                 "is 1100 ms");
  EXPECT_EQ(parse_ok("[timeouts]\nsubmit_ms = 10000\nroom_ms = 12501\n").timeouts.room,
            std::chrono::milliseconds{12501});
  EXPECT_EQ(parse_ok("[timeouts]\nsubmit_ms = 100\nroom_ms = 1101\n").timeouts.submit,
            std::chrono::milliseconds{100});
}

TEST(ConfigLoader, AHeartbeatNotWellBelowTheConnectionTimeoutIsRefused) {
  expect_refused("[timeouts]\nheartbeat_ms = 2000\nconnection_ms = 3000\n", "timeouts.heartbeat_ms",
                 "must be at most half of timeouts.connection_ms (3000), got 2000: a quiet but "
                 "live peer would be dropped between heartbeats");
  expect_refused("[timeouts]\nconnection_ms = 400\n", "timeouts.heartbeat_ms", "got 500");
  auto cfg = parse_ok("[timeouts]\nheartbeat_ms = 1500\nconnection_ms = 3000\n");
  EXPECT_EQ(cfg.timeouts.heartbeat, std::chrono::milliseconds{1500});
  EXPECT_TRUE(deployment_config{}.timeouts.heartbeat * 2 <=
              deployment_config{}.timeouts.connection);
}

TEST(ConfigLoader, APrefillEndpointWithoutAPortIsRefused) {
  expect_refused("[decode]\nprefill = [\"127.0.0.1\"]\n", "decode.prefill[0]", "missing \":port\"");
}

TEST(ConfigLoader, APrefillEndpointWithABadPortIsRefused) {
  expect_refused("[decode]\nprefill = [\"h:7001\", \"h:0\"]\n", "decode.prefill[1]",
                 "port \"0\" is not a number in 1..65535");
  expect_refused("[decode]\nprefill = [\"h:65536\"]\n", "decode.prefill[0]", "1..65535");
  expect_refused("[decode]\nprefill = [\"h:70a\"]\n", "decode.prefill[0]", "1..65535");
  expect_refused("[decode]\nprefill = [\"h:\"]\n", "decode.prefill[0]", "1..65535");
}

TEST(ConfigLoader, APrefillEndpointWithoutAHostIsRefused) {
  expect_refused("[decode]\nprefill = [\":7001\"]\n", "decode.prefill[0]", "missing host");
}

TEST(ConfigLoader, AnUnbracketedIpv6EndpointIsRefused) {
  expect_refused("[decode]\nprefill = [\"::1:7001\"]\n", "decode.prefill[0]", "[addr]:port");
}

TEST(ConfigLoader, APrefillEndpointListedTwiceIsRefused) {
  expect_refused("[decode]\nprefill = [\"127.0.0.1:7001\", \"127.0.0.1:7001\"]\n",
                 "decode.prefill[1]", "duplicate of decode.prefill[0] (\"127.0.0.1:7001\"");
  // The same host and port however written.
  expect_refused("[decode]\nprefill = [\"Node-A:7001\", \"b:7001\", \"node-a:07001\"]\n",
                 "decode.prefill[2]",
                 "duplicate of decode.prefill[0] (\"Node-A:7001\" and \"node-a:07001\")");
  auto res = load_config_string("[decode]\nprefill = [\n  \"a:1\",\n  \"b:2\",\n  \"a:1\",\n]\n",
                                "bad.toml");
  ASSERT_TRUE(std::holds_alternative<config_error>(res));
  EXPECT_EQ(std::get<config_error>(res).line, 5u);
  auto cfg = valid_config();
  cfg.cluster.cp_size = 2;
  cfg.decode.prefill = {"127.0.0.1:7001", "127.0.0.1:7001"};
  expect_invalid(cfg, config_role::decode, "decode.prefill[1]", "duplicate");
}

// --- role requirements (validate_for) ----------------------------------------

TEST(ConfigRoles, TheValidConfigPassesForEveryRole) {
  for (auto role : {config_role::demo, config_role::prefill, config_role::decode})
    EXPECT_FALSE(validate_for(valid_config(), role).has_value()) << to_string(role);
}

TEST(ConfigRoles, APrefillRankNeedsAPort) {
  auto cfg = valid_config();
  cfg.prefill.port = 0;
  expect_invalid(cfg, config_role::prefill, "prefill.port", "required for a prefill rank");
  EXPECT_FALSE(validate_for(cfg, config_role::demo).has_value());
}

TEST(ConfigRoles, APrefillRankNeedsAHost) {
  auto cfg = valid_config();
  cfg.prefill.host.clear();
  expect_invalid(cfg, config_role::prefill, "prefill.host", "required for a prefill rank");
}

TEST(ConfigRoles, ADecodeNodeNeedsItsPrefillList) {
  auto cfg = valid_config();
  cfg.decode.prefill.clear();
  expect_invalid(cfg, config_role::decode, "decode.prefill", "required for a decode node");
  EXPECT_FALSE(validate_for(cfg, config_role::demo).has_value());
}

TEST(ConfigRoles, ADecodeNodeNeedsOnePrefillEndpointPerCpRank) {
  auto cfg = valid_config();
  cfg.cluster.cp_size = 2;
  expect_invalid(cfg, config_role::decode, "decode.prefill",
                 "lists 1 prefill ranks but cluster.cp_size is 2");
}

TEST(ConfigRoles, PrefillAndDecodeNeedTheClusterToken) {
  auto cfg = valid_config();
  cfg.cluster.token.clear();
  expect_invalid(cfg, config_role::prefill, "cluster.token", "required for prefill and decode");
  expect_invalid(cfg, config_role::decode, "cluster.token", "required for prefill and decode");
  EXPECT_FALSE(validate_for(cfg, config_role::demo).has_value()); // no control plane
  cfg.cluster.token = "fifteen-chars!!";
  expect_invalid(cfg, config_role::decode, "cluster.token", "too short: 15 characters");
}

TEST(ConfigLoader, TlsNeedsAllThreePathsOrNone) {
  expect_refused("[tls]\ncertificate = \"a.pem\"\nkey = \"a.key\"\n", "tls.ca_file",
                 "TLS needs all three of tls.certificate, tls.key and tls.ca_file");
  expect_refused("[tls]\nca_file = \"ca.pem\"\n", "tls.certificate", "missing");
  auto res = load_config_string("[tls]\ncertificate = \"a.pem\"\nkey = \"a.key\"\n"
                                "ca_file = \"ca.pem\"\n",
                                "t.toml");
  ASSERT_TRUE(std::holds_alternative<deployment_config>(res));
  const auto& tls = std::get<deployment_config>(res).tls;
  EXPECT_TRUE(tls.enabled());
  EXPECT_EQ(tls.certificate, "a.pem");
  EXPECT_EQ(tls.key, "a.key");
  EXPECT_EQ(tls.ca_file, "ca.pem");
  EXPECT_FALSE(deployment_config{}.tls.enabled()); // off by default
}

TEST(ConfigRoles, PrefillAndDecodeNeedReadableTlsFiles) {
  auto dir = fs::temp_directory_path() / ("ls-config-tls-" + std::to_string(::getpid()));
  fs::create_directories(dir);
  for (const char* name : {"node.pem", "node.key", "ca.pem"})
    std::ofstream{dir / name} << "-----BEGIN TEST-----\n";
  std::ofstream{dir / "empty.pem"}.flush();
  auto cfg = valid_config();
  cfg.tls = {(dir / "node.pem").string(), (dir / "node.key").string(), (dir / "ca.pem").string()};
  for (auto role : {config_role::demo, config_role::prefill, config_role::decode})
    EXPECT_FALSE(validate_for(cfg, role).has_value()) << to_string(role);
  cfg.tls.key = (dir / "missing.key").string();
  expect_invalid(cfg, config_role::prefill, "tls.key", "No such file or directory");
  expect_invalid(cfg, config_role::decode, "tls.key", "cannot read");
  EXPECT_FALSE(validate_for(cfg, config_role::demo).has_value()); // no control plane
  cfg.tls.key = (dir / "node.key").string();
  cfg.tls.ca_file = (dir / "empty.pem").string();
  expect_invalid(cfg, config_role::decode, "tls.ca_file", "empty file");
  cfg.tls.ca_file = dir.string(); // a directory
  expect_invalid(cfg, config_role::prefill, "tls.ca_file", "not a regular file");
  cfg.tls.ca_file = "/dev/stdin"; // never read: it could block
  expect_invalid(cfg, config_role::prefill, "tls.ca_file", "cannot read");
  cfg.tls.certificate.clear();
  expect_invalid(cfg, config_role::demo, "tls.certificate", "TLS needs all three");
  fs::remove_all(dir);
}

TEST(ConfigLoader, NonAsciiTextIsRefusedWithItsLine) {
  // toml++ 3.3 has undefined behaviour on some non-ASCII whitespace (fuzzer finding).
  expect_refused("[model]\nlayers = 4\n# caf\xc3\xa9\n", "", "non-ASCII byte");
}

TEST(ConfigLoader, TheClusterTokenIsRead) {
  auto res = load_config_string("[cluster]\ntoken = \"a-long-enough-secret\"\n", "t.toml");
  ASSERT_TRUE(std::holds_alternative<deployment_config>(res));
  EXPECT_EQ(std::get<deployment_config>(res).cluster.token, "a-long-enough-secret");
}

TEST(ConfigRoles, APrefillPoolTooSmallForAFullBatchIsRefused) {
  auto cfg = valid_config();
  cfg.workload.max_tokens = 1000; // 63 pages of 16 tokens
  cfg.transfer.max_batch = 4;
  cfg.prefill.pool_pages = 4 * 63 - 1;
  expect_invalid(cfg, config_role::prefill, "prefill.pool_pages", "need at least 252");
  expect_invalid(cfg, config_role::demo, "prefill.pool_pages", "need at least 252");
  EXPECT_FALSE(validate_for(cfg, config_role::decode).has_value());
  cfg.prefill.pool_pages = 252;
  EXPECT_FALSE(validate_for(cfg, config_role::prefill).has_value());
}

TEST(ConfigRoles, ABatchWhosePagesPass2To64SaysSoAndNotAWrappedCount) {
  auto cfg = valid_config();
  cfg.model.page_size = 1;
  cfg.workload.max_tokens = (uint64_t{1} << 62) + 1; // x 5 wraps to 2^62 + 5
  cfg.transfer.max_batch = 5;
  expect_invalid(cfg, config_role::prefill, "prefill.pool_pages", "need at least more than 2^64");
}

TEST(ConfigRoles, APrefillPoolOnlyHoldsItsOwnCpSlice) {
  auto cfg = valid_config();
  cfg.workload.max_tokens = 1000; // 63 pages: rank 0 of 2 owns 32
  cfg.transfer.max_batch = 4;
  cfg.cluster.cp_size = 2;
  cfg.decode.prefill = {"a:1", "b:2"};
  cfg.prefill.pool_pages = 128;
  EXPECT_FALSE(validate_for(cfg, config_role::prefill).has_value());
  cfg.prefill.pool_pages = 127;
  expect_invalid(cfg, config_role::prefill, "prefill.pool_pages", "need at least 128");
}

TEST(ConfigRoles, ADecodePoolTooSmallForOneRequestIsRefused) {
  auto cfg = valid_config();
  cfg.workload.max_tokens = 1000;
  cfg.decode.pool_pages = 62;
  expect_invalid(cfg, config_role::decode, "decode.pool_pages", "need at least 63");
  expect_invalid(cfg, config_role::demo, "decode.pool_pages", "need at least 63");
  EXPECT_FALSE(validate_for(cfg, config_role::prefill).has_value());
}

TEST(ConfigRoles, ValidateForAlsoAppliesTheGeneralChecksToOverriddenFields) {
  auto cfg = valid_config();
  cfg.transfer.chunk_tokens = 20; // as if from --chunk-tokens 20
  expect_invalid(cfg, config_role::demo, "transfer.chunk_tokens", "multiple of");
  cfg = valid_config();
  cfg.model.mla = true; // as if from --mla with kv_heads 8
  expect_invalid(cfg, config_role::demo, "model.kv_heads", "must be 1 with");
  EXPECT_EQ(validate(cfg, "cli")->key, "model.kv_heads");
}

TEST(ConfigRoles, RoleNamesMatchTheCliSubcommands) {
  EXPECT_STREQ(to_string(config_role::demo), "demo");
  EXPECT_STREQ(to_string(config_role::prefill), "prefill");
  EXPECT_STREQ(to_string(config_role::decode), "decode");
}

// --- to_toml -----------------------------------------------------------------

TEST(ConfigToToml, TheDefaultsRoundTrip) {
  deployment_config def;
  auto text = to_toml(def);
  EXPECT_TRUE(same_config(parse_ok(text), def)) << text;
}

TEST(ConfigToToml, EveryShippedFileRoundTrips) {
  for (const auto& path : shipped_files()) {
    SCOPED_TRACE(path.string());
    auto cfg = load_ok(path);
    auto text = to_toml(cfg, secrets::reveal);
    auto again = parse_ok(text);
    EXPECT_TRUE(same_config(again, cfg)) << text;
    EXPECT_EQ(to_toml(again, secrets::reveal), text);
  }
}

TEST(ConfigToToml, UnusualValuesRoundTrip) {
  auto cfg = valid_config();
  cfg.model.mla = true;
  cfg.model.kv_heads = 1;
  cfg.model.dtype_bytes = 1;
  cfg.model.layer_compute = std::chrono::microseconds{1};
  cfg.transfer.per_layer = false;
  cfg.transfer.chunk_tokens = 64;
  cfg.fabric.provider = "";
  cfg.fabric.bind_address = "weird \"name\"\\\t\x01";
  cfg.prefill.port = 65535;
  cfg.decode.prefill = {"[fe80::1]:1", "b:65535"};
  cfg.workload.seed = 9223372036854775807u;
  cfg.workload.fragmentation = 0.1;
  cfg.log.level = "off";
  cfg.cluster.token = "a \"quoted\" token of some length";
  auto text = to_toml(cfg, secrets::reveal);
  auto again = parse_ok(text);
  EXPECT_TRUE(same_config(again, cfg)) << text;
  EXPECT_EQ(again.fabric.bind_address, cfg.fabric.bind_address);
  EXPECT_EQ(again.workload.fragmentation, 0.1);
}

TEST(ConfigToToml, ItNamesEveryTableAndDurationsWithTheirUnit) {
  auto text = to_toml(deployment_config{});
  for (const char* needle :
       {"[model]", "[transfer]", "[fabric]", "[timeouts]", "[prefill]", "[decode]", "[workload]",
        "[cluster]", "[log]", "layer_compute_us = 1000", "submit_ms = 10000", "room_ms = 60000",
        "heartbeat_ms = 500", "connection_ms = 3000", "fragmentation = 0.3", "prefill = []"})
    EXPECT_NE(text.find(needle), std::string::npos) << needle << " in\n" << text;
}

TEST(ConfigToToml, TheTokenIsRedactedUnlessRevealed) {
  auto cfg = valid_config();
  cfg.cluster.token = "0123456789abcdef01234567"; // 24 characters
  auto text = to_toml(cfg);
  EXPECT_EQ(text.find(cfg.cluster.token), std::string::npos) << text;
  EXPECT_NE(text.find("token = \"<redacted: 24 chars>\""), std::string::npos) << text;
  EXPECT_NE(to_toml(cfg, secrets::reveal).find("token = \"" + cfg.cluster.token + "\""),
            std::string::npos);
  // No token: nothing to hide, printed as empty (a redacted text never loads as a valid token).
  cfg.cluster.token.clear();
  EXPECT_NE(to_toml(cfg).find("token = \"\""), std::string::npos);
  EXPECT_EQ(redacted("short"), "<redacted: 5 chars>");
}

// The effective config a command logs at debug is a valid file but for the
// token: its placeholder must not pass for a token of 20 characters.
TEST(ConfigToToml, ARedactedDumpDoesNotLoadWithItsPlaceholderAsTheToken) {
  auto text = to_toml(valid_config());
  ASSERT_NE(text.find("<redacted: "), std::string::npos) << text;
  auto cfg = parse_ok(text);
  for (auto role : {config_role::prefill, config_role::decode})
    expect_invalid(cfg, role, "cluster.token", "placeholder a redacted config dump prints");
  EXPECT_FALSE(
      validate_for(parse_ok(to_toml(valid_config(), secrets::reveal)), config_role::prefill, "cli")
          .has_value());
}

// A flag can set a 64-bit unsigned value that no TOML file can hold (TOML
// integers are signed): refused, so the logged config always loads again.
TEST(ConfigToToml, AnUnsignedValuePast2To63IsRefusedSoEveryValidConfigPrintsAsToml) {
  auto cfg = valid_config();
  cfg.transfer.chunk_tokens = uint64_t{1} << 63; // a multiple of every page size
  expect_invalid(cfg, config_role::demo, "transfer.chunk_tokens", "at most 2^63 - 1");
  cfg.transfer.chunk_tokens = (uint64_t{1} << 63) - 16;
  EXPECT_FALSE(validate_for(cfg, config_role::demo, "cli").has_value());
  EXPECT_EQ(parse_ok(to_toml(cfg, secrets::reveal)).transfer.chunk_tokens,
            cfg.transfer.chunk_tokens);
}

namespace {

// How many members an aggregate has: the most initializers T{...} takes.
// (No member of the config structs is itself an aggregate, so brace
// elision cannot make the count too high.)
struct any_value {
  template <class T>
  operator T() const; // only in unevaluated contexts
};

template <class T, class Indices, class = void>
struct takes_initializers : std::false_type {};

template <class T, size_t... I>
struct takes_initializers<T, std::index_sequence<I...>,
                          std::void_t<decltype(T{(void(I), any_value{})...})>> : std::true_type {};

template <class T, size_t N = 0>
constexpr size_t member_count() {
  if constexpr (takes_initializers<T, std::make_index_sequence<N + 1>>::value)
    return member_count<T, N + 1>();
  else
    return N;
}

} // namespace

// The round trip and same_config compare to_toml texts, so a struct member
// that visit_fields (loader.cpp) leaves out would pass both unseen: every
// member of every table must appear as one key, and every table as one table.
TEST(ConfigToToml, EveryMemberOfEveryConfigStructIsAKey) {
  std::map<std::string, size_t> keys;
  std::string table;
  std::istringstream text{to_toml(valid_config())};
  for (std::string line; std::getline(text, line);) {
    if (line.empty())
      continue;
    if (line.front() == '[') {
      table = line.substr(1, line.find(']') - 1);
      keys[table];
    } else if (line.find(" = ") != std::string::npos) {
      ++keys[table];
    }
  }
  EXPECT_EQ(keys.size(), member_count<deployment_config>());
  EXPECT_EQ(keys["model"], member_count<model_config>());
  EXPECT_EQ(keys["transfer"], member_count<transfer_config>());
  EXPECT_EQ(keys["fabric"], member_count<fabric_section>());
  EXPECT_EQ(keys["timeouts"], member_count<timeouts_config>());
  EXPECT_EQ(keys["prefill"], member_count<prefill_config>());
  EXPECT_EQ(keys["decode"], member_count<decode_config>());
  EXPECT_EQ(keys["workload"], member_count<workload_config>());
  EXPECT_EQ(keys["cluster"], member_count<cluster_config>());
  EXPECT_EQ(keys["tls"], member_count<tls_config>());
  EXPECT_EQ(keys["log"], member_count<log_config>());
}

TEST(ConfigToToml, SameConfigSeesAChangeInAnyField) {
  auto a = valid_config();
  auto b = a;
  EXPECT_TRUE(same_config(a, b));
  b.workload.fragmentation = 0.30000000000000004;
  EXPECT_FALSE(same_config(a, b));
  b = a;
  b.decode.prefill.push_back("c:3");
  EXPECT_FALSE(same_config(a, b));
  b = a;
  b.cluster.token += "x"; // redacted in print, still compared
  EXPECT_FALSE(same_config(a, b));
}

// --- CLI flags (the layerstream binary) --------------------------------------

namespace {

struct run_result {
  int exit_code = -1;
  std::string output;
};

/// Runs `layerstream <args>` (stdout and stderr together), bounded by `timeout 20`.
run_result run_cli(const std::string& args) {
  run_result res;
  std::string cmd = std::string{"timeout 20 '"} + LAYERSTREAM_BIN + "' " + args + " 2>&1";
  FILE* pipe = ::popen(cmd.c_str(), "r");
  if (pipe == nullptr)
    return res;
  char buf[512];
  while (size_t n = std::fread(buf, 1, sizeof(buf), pipe))
    res.output.append(buf, n);
  int status = ::pclose(pipe);
  if (WIFEXITED(status))
    res.exit_code = WEXITSTATUS(status);
  return res;
}

} // namespace

TEST(ConfigCli, AnUnknownLogLevelFlagIsRefusedByEveryCommand) {
  // prefill and decode ignored set_level's false and ran at the file's level.
  // Valid for both roles; nothing listens on 127.0.0.1:1, and 1 is privileged,
  // so without the check each command fails fast with another reason.
  auto dir = fs::temp_directory_path() / ("ls-config-cli-" + std::to_string(::getpid()));
  fs::create_directories(dir);
  std::ofstream{dir / "node.toml"} << "[timeouts]\nheartbeat_ms = 100\nconnection_ms = 300\n"
                                      "[prefill]\nport = 1\n"
                                      "[decode]\nprefill = [\"127.0.0.1:1\"]\n"
                                      "[workload]\nrooms = 1\n"
                                      "[cluster]\ntoken = \"0123456789abcdef-test-token\"\n";
  const std::string config = "--config '" + (dir / "node.toml").string() + "'";
  for (const char* command : {"demo", "prefill", "decode"}) {
    SCOPED_TRACE(command);
    auto res = run_cli(std::string{command} + " " + config + " --log-level loud");
    EXPECT_EQ(res.exit_code, 2) << res.output;
    EXPECT_NE(res.output.find("log.level: unknown level \"loud\""), std::string::npos)
        << res.output;
  }
  fs::remove_all(dir);
}

TEST(ConfigCli, AConfigDirectoryIsRefusedWithExitTwo) {
  auto res = run_cli("demo --config " + fs::temp_directory_path().string());
  EXPECT_EQ(res.exit_code, 2) << res.output;
  EXPECT_NE(res.output.find("not a regular file"), std::string::npos) << res.output;
}
