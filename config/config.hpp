// The deployment config: the single source of every option.
//
// One struct per TOML table; the loader (config/loader.hpp) fills it from a
// file (or the embedded demo default) and the CLI flags override single
// fields afterwards. Every field has its default here and its meaning in a
// comment; config/README.md lists them as TOML keys.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

namespace layerstream {

/// [model]: the simulated model's KV geometry.
struct model_config {
  uint32_t layers = 32;
  uint32_t kv_heads = 8;
  uint32_t head_dim = 128;
  uint32_t dtype_bytes = 2;
  /// Tokens per KV page.
  uint32_t page_size = 16;
  /// MLA: one fused KV buffer per layer (kv_heads must be 1).
  bool mla = false;
  /// Simulated compute time of one layer on the forward thread.
  std::chrono::microseconds layer_compute{1000};
  /// How the cpu device's forward thread spends that time: "spin" (busy, a
  /// host that computes: the default) or "sleep" (a host that waits for a
  /// GPU: it sleeps to just before the layer's end and spins the rest, so its
  /// core is free for other threads meanwhile). The gpu device ignores it.
  std::string compute_wait = "spin";

  /// Bytes of one page of one layer's K (or V, or fused MLA) buffer.
  uint64_t item_len() const { return uint64_t{page_size} * kv_heads * head_dim * dtype_bytes; }
};

/// [transfer]: how KV moves.
struct transfer_config {
  /// false: the classic bulk transfer after the forward for every request.
  bool per_layer = true;
  /// Requests shorter than this many tokens use the bulk path.
  uint64_t per_layer_min_tokens = 0;
  /// Chunked prefill: tokens per forward chunk (0 = no chunking); a multiple
  /// of model.page_size.
  uint64_t chunk_tokens = 0;
  /// Most requests (chunks) in one forward batch.
  uint32_t max_batch = 16;
  /// The notifier's drain thread polls this often while a forward runs;
  /// 0 = the forward thread sends each layer_end itself (see actors/notifier.hpp).
  std::chrono::microseconds notify_poll{50};
  /// Once it has sent a forward's second-to-last layer, the drain thread
  /// yields in a loop instead of sleeping until the last layer comes, from
  /// min(a quarter layer, half this) before it is due, for at most this long;
  /// 0 = never (see actors/notifier.hpp).
  std::chrono::microseconds notify_spin{2000};
};

/// [fabric]: the data plane.
struct fabric_section {
  /// "tcp;ofi_rxm", "net", "shm", "sockets", "verbs;ofi_rxm", "efa", "udp;ofi_rxd";
  /// "" = the fastest offered.
  std::string provider;
  /// Address the fabric endpoint binds to (IP providers).
  std::string bind_address = "127.0.0.1";
  /// Most blocks of one room one write carries (fi_writemsg iov pairs);
  /// 0 = the provider's limit (4 for tcp and net, 8 for sockets; shm is
  /// always 1, see transport/fabric/endpoint.cpp), 1 = a write per block.
  /// Larger than the provider's limit is capped to it.
  uint32_t write_iov = 0;
};

/// [timeouts]
struct timeouts_config {
  /// One submit (a layer of a room) from post to delivery-complete.
  std::chrono::milliseconds submit{10'000};
  /// A room from transfer_info to kv_ready, on both sides.
  std::chrono::milliseconds room{60'000};
  /// caf-io heartbeat interval and the connection timeout (both sides).
  std::chrono::milliseconds heartbeat{500};
  std::chrono::milliseconds connection{3'000};
};

/// [prefill]: one rank of the prefill cluster.
struct prefill_config {
  /// Control-plane address and port this rank publishes its authentication gate on.
  std::string host = "127.0.0.1";
  uint16_t port = 0;
  uint32_t cp_rank = 0;
  /// KV pool pages of this rank.
  uint64_t pool_pages = 4096;
  /// Where the forward runs and its KV pool lives: "cpu" (host pool, the
  /// simulated forward on a thread) or "gpu" (CUDA builds: a device pool
  /// written by a kernel per layer, CUDA events).
  std::string device = "cpu";
  /// device "gpu": how the fabric reads the device pool. "staging" copies
  /// each layer to a pinned host mirror after its event; "hmem" registers
  /// the device pool with the fabric (FI_HMEM, iface CUDA) and is refused
  /// where the provider cannot; "auto" = hmem where a registration probe on
  /// the rank's provider succeeds, staging otherwise.
  std::string kv_export = "auto";
};

/// [decode]
struct decode_config {
  uint64_t pool_pages = 4096;
  /// The prefill ranks' control-plane endpoints, in cp_rank order ("host:port").
  std::vector<std::string> prefill;
};

/// [workload]: the rooms the decode side asks for (decode and demo).
struct workload_config {
  uint32_t rooms = 8;
  /// The first room id; the run's rooms are first_room, first_room + 1, ...
  /// A prefill rank keys its rooms by id alone (as SGLang's bootstrap_room),
  /// so decode nodes that share prefill ranks need disjoint ranges.
  uint64_t first_room = 1;
  uint64_t min_tokens = 64;
  uint64_t max_tokens = 1024;
  /// Seed of prompt lengths and page layouts.
  uint64_t seed = 1;
  /// Fraction (0..1) of decode pages allocated out of order, to exercise the
  /// run grouping (0 = every room gets one contiguous range when it can).
  double fragmentation = 0.3;
  /// TESTING ONLY (fault injection, tests/process/bad_transfer_info.sh): the
  /// decode receiver corrupts these rooms' transfer_info (dst_k_ptrs[0] moved
  /// past the end of the advertised region), so that they must fail cleanly.
  /// Empty (the default) in every real deployment.
  std::vector<uint64_t> corrupt_rooms;
  /// TESTING ONLY (fault injection, `demo --fault-rate`): the probability
  /// that a prefill rank's write completion is turned into a CQ error
  /// completion (transport/fabric/fault_injection.hpp; seeded from `seed`).
  /// 0 (the default) in every real deployment.
  double fault_rate = 0;
  /// TESTING ONLY (the reconcile tests, tests/equivalence_test.cpp): layers
  /// for which the prefill forward never calls the notifier, as if their
  /// layer_end were lost; per-layer rooms then finish with them unreported and
  /// the scheduler sends exactly them by the bulk path. Each < model.layers.
  /// Empty (the default) in every real deployment.
  std::vector<uint64_t> skip_notify_layers;
};

/// [cluster]
struct cluster_config {
  /// Number of prefill ranks writing each room (context parallelism).
  uint32_t cp_size = 1;
  /// The cluster's shared secret (at least 16 characters; required for
  /// `prefill` and `decode`). Control-plane peers prove they hold it with an
  /// HMAC-SHA256 challenge/response (node/auth.hpp) before any fabric address
  /// or key is exchanged; the token itself is never sent.
  std::string token;
  /// Which addresses this process may use outside loopback (common/net_guard.hpp):
  /// "test": only inside a test host made by tests/cluster/hosts.sh;
  /// "deployment": a real cluster, the addresses in this file are trusted.
  std::string network = "test";
};

/// [tls] TLS for the control plane (CAF's OpenSSL module), off by default.
/// All three paths set: prefill publishes and decode connects over TLS, and
/// each side verifies the other's certificate against ca_file (mutual). All
/// three empty: plain caf-io. The token handshake runs on top either way.
struct tls_config {
  /// This node's certificate (PEM).
  std::string certificate;
  /// Its private key (PEM, unencrypted).
  std::string key;
  /// The CA (PEM) that signed every peer's certificate.
  std::string ca_file;
  bool enabled() const { return !certificate.empty() || !key.empty() || !ca_file.empty(); }
};

/// [log]
struct log_config {
  /// trace, debug, info, warn, error, off
  std::string level = "info";
};

struct deployment_config {
  model_config model;
  transfer_config transfer;
  fabric_section fabric;
  timeouts_config timeouts;
  prefill_config prefill;
  decode_config decode;
  workload_config workload;
  cluster_config cluster;
  tls_config tls;
  log_config log;
};

} // namespace layerstream
