// Every typed message of layerstream, in one place.
//
// Each struct says who sends it to whom. Statuses are caf::error (default =
// success) so that failures carry their reason everywhere, across processes
// too. All types are registered with CAF in add_message_types(), with the
// same names in every process (unregistered types arrive EMPTY in caf-io).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <caf/actor_system_config.hpp>
#include <caf/error.hpp>
#include <caf/meta/type_name.hpp>

#include "device/event.hpp"
#include "messages/bounded.hpp"
#include "transport/transfer_plan.hpp"

namespace layerstream {

/// A request's id, shared by prefill and decode (SGLang's bootstrap room).
using room_id = uint64_t;

/// A decode endpoint as known to one transport (index into its peer table).
using peer_id = uint32_t;

/// One memory region a decode rank registered (FI_REMOTE_WRITE) and
/// advertised: every dst range written there must lie inside
/// [base, base + length). `base` is the region's virtual address on the
/// decode side; for providers without FI_MR_VIRT_ADDR the transport turns a
/// dst address into the offset dst - base.
struct remote_region {
  uint64_t base = 0;
  uint64_t length = 0;
  uint64_t key = 0;
  friend bool operator==(const remote_region& a, const remote_region& b) {
    return a.base == b.base && a.length == b.length && a.key == b.key;
  }
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, remote_region& x) {
  return inspect_fields(f, caf::meta::type_name("remote_region"), x.base, x.length, x.key);
}

/// How to reach one decode rank's KV pool over the fabric.
struct fabric_peer {
  /// Provider name as fi_getinfo reports it (both sides must use the same).
  std::string provider;
  /// The decode endpoint's address (fi_getname bytes).
  std::vector<uint8_t> address;
  std::vector<remote_region> regions;
  /// The decode domain's MR addressing: true if a write names a region by
  /// its virtual address (FI_MR_VIRT_ADDR), false if by the offset from its
  /// base. The prefill side computes its remote addresses the same way (from
  /// its own domain) and refuses a peer whose mode differs.
  bool virt_addr = false;
  friend bool operator==(const fabric_peer& a, const fabric_peer& b) {
    return a.provider == b.provider && a.address == b.address && a.regions == b.regions &&
           a.virt_addr == b.virt_addr;
  }
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, fabric_peer& x) {
  return inspect_fields(f, caf::meta::type_name("fabric_peer"), x.provider, x.address, x.regions,
                        x.virt_addr);
}

/// scheduler -> transport: make a decode endpoint reachable. Answered with
/// its peer_id (the same id again for the same address and regions).
struct connect_peer {
  fabric_peer peer;
  friend bool operator==(const connect_peer& a, const connect_peer& b) { return a.peer == b.peer; }
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, connect_peer& x) {
  return inspect_fields(f, caf::meta::type_name("connect_peer"), x.peer);
}

/// What one context needs to stream one request (or one chunk of it) on one rank.
struct request_transfer {
  room_id room = 0;
  /// The decode endpoint this room's KV goes to (from connect_peer).
  peer_id peer = 0;
  /// Owned pages of this rank in this chunk, grouped into runs.
  transfer_plan plan;
  /// Per-layer base pointers and item lengths of both pools.
  kv_pointers ptrs;
  friend bool operator==(const request_transfer& a, const request_transfer& b) {
    return a.room == b.room && a.peer == b.peer && a.plan == b.plan && a.ptrs == b.ptrs;
  }
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, request_transfer& x) {
  return inspect_fields(f, caf::meta::type_name("request_transfer"), x.room, x.peer, x.plan,
                        x.ptrs);
}

/// scheduler -> manager, before the forward: the requests whose KV this
/// forward batch produces. Answered with setup_result once their context exists.
struct setup {
  std::vector<request_transfer> batch;
  friend bool operator==(const setup& a, const setup& b) { return a.batch == b.batch; }
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, setup& x) {
  return inspect_fields(f, caf::meta::type_name("setup"), x.batch);
}

/// A room of a setup the manager did not take, and why.
struct room_refusal {
  room_id room = 0;
  caf::error reason;
  friend bool operator==(const room_refusal& a, const room_refusal& b) {
    return a.room == b.room && a.reason == b.reason;
  }
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, room_refusal& x) {
  return inspect_fields(f, caf::meta::type_name("room_refusal"), x.room, x.reason);
}

/// manager -> scheduler, the answer to setup: every room of the batch but
/// the refused ones has its context, so the forward may start. One bad room
/// (an id whose earlier context is still active, bad pointers) fails alone,
/// not its batch.
struct setup_result {
  std::vector<room_refusal> refused;
  friend bool operator==(const setup_result& a, const setup_result& b) {
    return a.refused == b.refused;
  }
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, setup_result& x) {
  return inspect_fields(f, caf::meta::type_name("setup_result"), x.refused);
}

/// notifier -> manager (one per layer, from the forward thread);
/// manager -> each active context. `event` is process-local and never
/// serialized: a deserialized layer_end has no event.
struct layer_end {
  uint32_t layer = 0;
  event_ptr event;
  friend bool operator==(const layer_end& a, const layer_end& b) {
    return a.layer == b.layer && a.event == b.event;
  }
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, layer_end& x) {
  return inspect_fields(f, caf::meta::type_name("layer_end"), x.layer);
}

/// event waiter -> context, once the layer's write event completed (or failed).
struct event_ready {
  uint32_t layer = 0;
  caf::error status;
  friend bool operator==(const event_ready& a, const event_ready& b) {
    return a.layer == b.layer && a.status == b.status;
  }
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, event_ready& x) {
  return inspect_fields(f, caf::meta::type_name("event_ready"), x.layer, x.status);
}

/// context -> transport: write these blocks (one layer of one room) to `peer`.
struct submit {
  room_id room = 0;
  uint32_t layer = 0;
  peer_id peer = 0;
  std::vector<block> blocks;
  friend bool operator==(const submit& a, const submit& b) {
    return a.room == b.room && a.layer == b.layer && a.peer == b.peer && a.blocks == b.blocks;
  }
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, submit& x) {
  return inspect_fields(f, caf::meta::type_name("submit"), x.room, x.layer, x.peer, x.blocks);
}

/// transport -> context, the answer to `submit`: every block is
/// delivery-complete at the target (status ok, `bytes` written), or failed.
struct submit_done {
  room_id room = 0;
  uint32_t layer = 0;
  caf::error status;
  uint64_t bytes = 0;
  /// Steady-clock ns when the engine saw the last write delivery-complete
  /// (status ok only; 0 otherwise). Process-local: the transport and its
  /// contexts share one process.
  int64_t delivered_ns = 0;
  friend bool operator==(const submit_done& a, const submit_done& b) {
    return a.room == b.room && a.layer == b.layer && a.status == b.status && a.bytes == b.bytes &&
           a.delivered_ns == b.delivered_ns;
  }
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, submit_done& x) {
  return inspect_fields(f, caf::meta::type_name("submit_done"), x.room, x.layer, x.status, x.bytes,
                        x.delivered_ns);
}

/// One room's part of a batched submit: the next `count` blocks of the
/// batch's flat block list.
struct room_blocks {
  room_id room = 0;
  uint64_t count = 0;
  friend bool operator==(const room_blocks& a, const room_blocks& b) {
    return a.room == b.room && a.count == b.count;
  }
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, room_blocks& x) {
  return inspect_fields(f, caf::meta::type_name("room_blocks"), x.room, x.count);
}

/// context -> transport: one layer of several rooms of one forward batch,
/// all to the same `peer`, in one message instead of one submit per room
/// (bench/HISTORY.md: messages per layer were the limit at 256 rooms). The
/// rooms' blocks sit in one flat list, room after room in `rooms` order (one
/// allocation per layer, not one per room). Each room's blocks are one
/// transport job: a failed write fails its own room, never its neighbours.
struct submit_batch {
  uint32_t layer = 0;
  peer_id peer = 0;
  std::vector<room_blocks> rooms;
  std::vector<block> blocks;
  friend bool operator==(const submit_batch& a, const submit_batch& b) {
    return a.layer == b.layer && a.peer == b.peer && a.rooms == b.rooms && a.blocks == b.blocks;
  }

  /// Appends one room with its blocks.
  void add_room(room_id room, block_span part) {
    rooms.push_back(room_blocks{room, part.size()});
    blocks.insert(blocks.end(), part.begin(), part.end());
  }
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, submit_batch& x) {
  return inspect_fields(f, caf::meta::type_name("submit_batch"), x.layer, x.peer, x.rooms,
                        x.blocks);
}

/// Null when the rooms' block counts add up to exactly `blocks.size()`;
/// otherwise bad_input naming the first room whose blocks run past the list
/// (or the blocks no room claims).
caf::error check_block_counts(const submit_batch& batch);

/// Calls fn(k, room, blocks) for each room k in order, with its part of the
/// flat list. Only after check_block_counts passed.
template <class F>
void for_each_room(const submit_batch& batch, F&& fn) {
  size_t first = 0;
  for (size_t k = 0; k < batch.rooms.size(); ++k) {
    const auto n = static_cast<size_t>(batch.rooms[k].count);
    fn(k, batch.rooms[k].room, block_span{batch.blocks.data() + first, n});
    first += n;
  }
}

/// transport -> context, the answer to `submit_batch` once every room's
/// job is settled: one submit_done per room, in the order of the request.
struct submit_batch_done {
  uint32_t layer = 0;
  std::vector<submit_done> rooms;
  friend bool operator==(const submit_batch_done& a, const submit_batch_done& b) {
    return a.layer == b.layer && a.rooms == b.rooms;
  }
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, submit_batch_done& x) {
  return inspect_fields(f, caf::meta::type_name("submit_batch_done"), x.layer, x.rooms);
}

/// scheduler -> manager -> context, after the forward.
struct finish {
  room_id room = 0;
  friend bool operator==(const finish& a, const finish& b) { return a.room == b.room; }
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, finish& x) {
  return inspect_fields(f, caf::meta::type_name("finish"), x.room);
}

/// context -> manager -> scheduler, the answer to `finish`: sent once every
/// submitted layer completed. Success only if every layer with owned pages
/// was sent. A repeated finish gets the same answer.
///
/// `unreported_layers`: the layers with owned pages that never got a
/// layer_end, in ascending order. Set only when they are the room's sole
/// problem: `status` is then missing_layer and the scheduler may send exactly
/// those layers by the bulk path (reconcile). After any other failure (a
/// failed wait or submit) it stays empty and the room fails closed.
struct finish_result {
  room_id room = 0;
  caf::error status;
  uint32_t layers_sent = 0;
  uint64_t bytes = 0;
  // "= {}" keeps the four-field form {room, status, sent, bytes} free of
  // -Wmissing-field-initializers.
  std::vector<uint32_t> unreported_layers = {};
  /// The latest submit_done::delivered_ns of its ok layers, whatever the
  /// status (the reconcile path adds the bulk layers to it); 0: none.
  int64_t delivered_ns = 0;
  friend bool operator==(const finish_result& a, const finish_result& b) {
    return a.room == b.room && a.status == b.status && a.layers_sent == b.layers_sent &&
           a.bytes == b.bytes && a.unreported_layers == b.unreported_layers &&
           a.delivered_ns == b.delivered_ns;
  }
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, finish_result& x) {
  return inspect_fields(f, caf::meta::type_name("finish_result"), x.room, x.status, x.layers_sent,
                        x.bytes, x.unreported_layers, x.delivered_ns);
}

/// context -> itself: the deadline for `room`'s outstanding layers after its `finish`.
struct finish_deadline {
  room_id room = 0;
  friend bool operator==(const finish_deadline& a, const finish_deadline& b) {
    return a.room == b.room;
  }
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, finish_deadline& x) {
  return inspect_fields(f, caf::meta::type_name("finish_deadline"), x.room);
}

/// decode -> each prefill rank's scheduler (control plane, caf-io): a request
/// and where its KV goes. Answered with kv_ready once that rank's writes for
/// the room are all delivery-complete (after the last chunk), or failed: with
/// lserr::writes_in_flight whenever writes it handed over may still land
/// (decode then never reuses the room's pages), else only once none can.
struct transfer_info {
  room_id room = 0;
  /// Prompt length in tokens (the simulated model writes this many).
  uint64_t prompt_tokens = 0;
  /// The decode endpoint: provider, fabric address, advertised regions (keys).
  fabric_peer decode;
  /// Decode pool pages, one per request page, in page order.
  std::vector<uint64_t> dst_pages;
  /// Decode per-layer base pointers; dst_v empty for MLA.
  std::vector<uint64_t> dst_k_ptrs;
  std::vector<uint64_t> dst_v_ptrs;
  /// Bytes of one page of each decode buffer, [K_0..K_{N-1}, V_0..V_{N-1}] or N entries.
  std::vector<uint64_t> item_lens;
  /// How many prefill ranks write this room (each its own contiguous slice).
  uint32_t cp_size = 1;
  /// The key of the authenticated session it is sent through (node/auth.hpp):
  /// a session forwards only a transfer_info that carries its key. Empty
  /// inside one process, where no session stands between the actors.
  std::vector<uint8_t> session_key;
  friend bool operator==(const transfer_info& a, const transfer_info& b) {
    return a.room == b.room && a.prompt_tokens == b.prompt_tokens && a.decode == b.decode &&
           a.dst_pages == b.dst_pages && a.dst_k_ptrs == b.dst_k_ptrs &&
           a.dst_v_ptrs == b.dst_v_ptrs && a.item_lens == b.item_lens && a.cp_size == b.cp_size &&
           a.session_key == b.session_key;
  }
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, transfer_info& x) {
  return inspect_fields(f, caf::meta::type_name("transfer_info"), x.room, x.prompt_tokens, x.decode,
                        x.dst_pages, x.dst_k_ptrs, x.dst_v_ptrs, x.item_lens, x.cp_size,
                        x.session_key);
}

/// What a prefill rank expects of every transfer_info it receives: its
/// model's geometry and its cluster's CP size.
struct transfer_info_shape {
  uint32_t page_size = 1;
  uint32_t cp_size = 1;
  uint32_t layers = 0;
  bool mla = false;
  /// Bytes of one page (for the error text) and the exact item_lens expected.
  uint64_t item_len = 0;
  std::vector<uint64_t> item_lens;
};

/// The checks a prefill rank applies to a transfer_info on receipt, before
/// any page is allocated: lengths match the prompt, the model and the
/// cluster; no dst page is named twice; every dst page of every layer and
/// buffer lies inside one region decode advertised (info.decode.regions).
caf::error check_transfer_info(const transfer_info& info, const transfer_info_shape& shape);

/// prefill rank -> decode, the answer to transfer_info: sent only after all
/// of that rank's writes for the room completed (status ok), or with the reason
/// it failed.
struct kv_ready {
  room_id room = 0;
  uint32_t cp_rank = 0;
  caf::error status;
  /// Bytes this rank wrote for the room.
  uint64_t bytes = 0;
  friend bool operator==(const kv_ready& a, const kv_ready& b) {
    return a.room == b.room && a.cp_rank == b.cp_rank && a.status == b.status && a.bytes == b.bytes;
  }
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, kv_ready& x) {
  return inspect_fields(f, caf::meta::type_name("kv_ready"), x.room, x.cp_rank, x.status, x.bytes);
}

// -- control-plane authentication (node/auth.hpp) ----------------------------
// Mutual HMAC-SHA256 challenge/response over the cluster token; the token
// itself never crosses the wire. Wire layout of every proof (32 bytes):
//   HMAC(token, "layerstream-auth-v1 " + role + client_nonce + server_nonce)
// with role "prefill" (server proof) or "decode" (client proof).

/// decode -> prefill gate: a fresh 32-byte nonce. Answered with auth_challenge.
struct auth_hello {
  std::vector<uint8_t> client_nonce;
  friend bool operator==(const auth_hello& a, const auth_hello& b) {
    return a.client_nonce == b.client_nonce;
  }
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, auth_hello& x) {
  return inspect_fields(f, caf::meta::type_name("auth_hello"), x.client_nonce);
}

/// What a prefill rank says of itself in its challenge, so that decode can
/// refuse a rank that does not fit its own config before any room: its place
/// in the cluster and the timeouts its answers are bounded by.
struct rank_facts {
  uint32_t cp_rank = 0;
  uint32_t cp_size = 0;
  uint64_t room_ms = 0;
  uint64_t submit_ms = 0;
  friend bool operator==(const rank_facts& a, const rank_facts& b) {
    return a.cp_rank == b.cp_rank && a.cp_size == b.cp_size && a.room_ms == b.room_ms &&
           a.submit_ms == b.submit_ms;
  }
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, rank_facts& x) {
  return inspect_fields(f, caf::meta::type_name("rank_facts"), x.cp_rank, x.cp_size, x.room_ms,
                        x.submit_ms);
}

/// prefill gate -> decode, the answer to auth_hello: the gate's nonce and its
/// proof that it holds the token (checked before decode sends any key), and
/// the rank's facts.
struct auth_challenge {
  std::vector<uint8_t> server_nonce;
  std::vector<uint8_t> server_proof;
  rank_facts rank;
  friend bool operator==(const auth_challenge& a, const auth_challenge& b) {
    return a.server_nonce == b.server_nonce && a.server_proof == b.server_proof && a.rank == b.rank;
  }
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, auth_challenge& x) {
  return inspect_fields(f, caf::meta::type_name("auth_challenge"), x.server_nonce, x.server_proof,
                        x.rank);
}

/// decode -> prefill gate: its proof for one challenge (used once). Answered
/// with a session (the scheduler protocol) or lserr::unauthorized.
struct auth_proof {
  std::vector<uint8_t> server_nonce;
  std::vector<uint8_t> client_proof;
  friend bool operator==(const auth_proof& a, const auth_proof& b) {
    return a.server_nonce == b.server_nonce && a.client_proof == b.client_proof;
  }
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, auth_proof& x) {
  return inspect_fields(f, caf::meta::type_name("auth_proof"), x.server_nonce, x.client_proof);
}

// -- scheduler (prefill rank) ------------------------------------------------

/// forward thread -> scheduler: a batch's forward ended (steady-clock ns).
struct batch_done {
  uint64_t batch = 0;
  int64_t start_ns = 0;
  int64_t end_ns = 0;
  /// Per layer: how long the notifier call took on the forward thread.
  std::vector<int64_t> notify_ns;
  /// Set when the forward did not write the batch's KV (the device failed):
  /// every room of the batch fails with this reason.
  caf::error status;
  friend bool operator==(const batch_done& a, const batch_done& b) {
    return a.batch == b.batch && a.start_ns == b.start_ns && a.end_ns == b.end_ns &&
           a.notify_ns == b.notify_ns && a.status == b.status;
  }
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, batch_done& x) {
  return inspect_fields(f, caf::meta::type_name("batch_done"), x.batch, x.start_ns, x.end_ns,
                        x.notify_ns, x.status);
}

/// local (bench) -> scheduler: start no forward batch until `rooms` requests
/// are queued, so that a benchmark's rooms share one batch. One-shot; released
/// after `max_wait` at the latest (hold id `id`), or by rooms = 0 with the same id.
struct hold_forward {
  uint32_t rooms = 0;
  uint64_t id = 0;
  caf::timespan max_wait{0};
  friend bool operator==(const hold_forward& a, const hold_forward& b) {
    return a.rooms == b.rooms && a.id == b.id && a.max_wait == b.max_wait;
  }
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, hold_forward& x) {
  return inspect_fields(f, caf::meta::type_name("hold_forward"), x.rooms, x.id, x.max_wait);
}

struct stats_query {
  friend bool operator==(const stats_query&, const stats_query&) { return true; }
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, stats_query&) {
  return inspect_fields(f, caf::meta::type_name("stats_query"));
}

/// What one rank did so far.
struct scheduler_stats {
  uint64_t rooms_complete = 0;
  uint64_t rooms_failed = 0;
  uint64_t bytes = 0;
  /// Per batch: forward time and exposed tail (forward end to the last byte
  /// of the batch's successful rooms delivery-complete, when the engine read
  /// that completion; a batch that sent nothing ends when it settles), ns. A
  /// batch with no successful room adds no tail. The first
  /// scheduler_config::stats_batches_max batches only.
  std::vector<int64_t> forward_ns;
  std::vector<int64_t> tail_ns;
  /// Per batch, next to tail_ns: forward end to when this scheduler settled
  /// the batch's last successful room (the tail plus the actor hops that
  /// report it), ns.
  std::vector<int64_t> settled_tail_ns;
  /// Per layer of every batch: the notifier call on the forward thread, ns
  /// (the first notify_samples_max only).
  std::vector<int64_t> notify_ns;
  static constexpr size_t notify_samples_max = size_t{1} << 20;
  /// Now: rooms this rank still holds, and its free and total src pages
  /// (a settled room holds nothing: the leak checks of the soak).
  uint64_t rooms_open = 0;
  uint64_t pages_free = 0;
  uint64_t pages_total = 0;
  /// Rooms that found too few free src pages on arrival and waited for
  /// settling rooms to free them (in arrival order).
  uint64_t rooms_waited_for_pages = 0;
  friend bool operator==(const scheduler_stats& a, const scheduler_stats& b) {
    return a.rooms_complete == b.rooms_complete && a.rooms_failed == b.rooms_failed &&
           a.bytes == b.bytes && a.forward_ns == b.forward_ns && a.tail_ns == b.tail_ns &&
           a.settled_tail_ns == b.settled_tail_ns && a.notify_ns == b.notify_ns &&
           a.rooms_open == b.rooms_open && a.pages_free == b.pages_free &&
           a.pages_total == b.pages_total && a.rooms_waited_for_pages == b.rooms_waited_for_pages;
  }
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, scheduler_stats& x) {
  return inspect_fields(f, caf::meta::type_name("scheduler_stats"), x.rooms_complete,
                        x.rooms_failed, x.bytes, x.forward_ns, x.tail_ns, x.settled_tail_ns,
                        x.notify_ns, x.rooms_open, x.pages_free, x.pages_total,
                        x.rooms_waited_for_pages);
}

// -- receiver (decode rank) --------------------------------------------------

/// decode driver -> receiver: stream `room`'s KV (`prompt_tokens` tokens)
/// from every prefill rank into this rank's pool. Answered with room_result.
struct open_room {
  room_id room = 0;
  uint64_t prompt_tokens = 0;
  friend bool operator==(const open_room& a, const open_room& b) {
    return a.room == b.room && a.prompt_tokens == b.prompt_tokens;
  }
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, open_room& x) {
  return inspect_fields(f, caf::meta::type_name("open_room"), x.room, x.prompt_tokens);
}

/// receiver -> decode driver (the answer to open_room) and -> the optional
/// subscriber: a room finished, complete (status ok) or failed.
struct room_result {
  room_id room = 0;
  caf::error status;
  /// Bytes the prefill ranks reported writing (sum over the ranks that answered).
  uint64_t bytes = 0;
  /// True only if the pool's bytes were checked against kv_pattern and matched.
  bool bit_exact = false;
  /// Nanoseconds since the actor clock's (steady) epoch: open_room seen, room finished.
  int64_t started_ns = 0;
  int64_t finished_ns = 0;
  friend bool operator==(const room_result& a, const room_result& b) {
    return a.room == b.room && a.status == b.status && a.bytes == b.bytes &&
           a.bit_exact == b.bit_exact && a.started_ns == b.started_ns &&
           a.finished_ns == b.finished_ns;
  }
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, room_result& x) {
  return inspect_fields(f, caf::meta::type_name("room_result"), x.room, x.status, x.bytes,
                        x.bit_exact, x.started_ns, x.finished_ns);
}

/// decode driver -> receiver: decode consumed a finished room; release its
/// pages. Answered with ok; unknown_room or bad_input (still in flight) otherwise.
struct close_room {
  room_id room = 0;
  friend bool operator==(const close_room& a, const close_room& b) { return a.room == b.room; }
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, close_room& x) {
  return inspect_fields(f, caf::meta::type_name("close_room"), x.room);
}

/// receiver -> itself: `room` (its open number `serial`, which tells a reused
/// room id apart) reached timeouts.room_ms without every rank's answer.
struct room_deadline {
  room_id room = 0;
  uint64_t serial = 0;
  friend bool operator==(const room_deadline& a, const room_deadline& b) {
    return a.room == b.room && a.serial == b.serial;
  }
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, room_deadline& x) {
  return inspect_fields(f, caf::meta::type_name("room_deadline"), x.room, x.serial);
}

/// anyone -> receiver: where does `room` stand? Answered with room_status,
/// or unknown_room.
struct room_status_query {
  room_id room = 0;
  friend bool operator==(const room_status_query& a, const room_status_query& b) {
    return a.room == b.room;
  }
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, room_status_query& x) {
  return inspect_fields(f, caf::meta::type_name("room_status_query"), x.room);
}

enum class room_state : uint8_t {
  waiting,      // for decode pages (the reason says how many), or transfer_info
                // sent and no rank has answered yet (no reason)
  transferring, // some ranks answered kv_ready{ok}, others not yet
  complete,     // every rank answered ok (and the bytes matched)
  failed,       // see the reason
};

std::string to_string(room_state state);

/// receiver -> anyone, the answer to room_status_query.
struct room_status {
  room_id room = 0;
  room_state state = room_state::waiting;
  /// Why the room failed (describe() of its error), and for a room whose
  /// pages stay held, that they do; empty otherwise.
  std::string reason;
  friend bool operator==(const room_status& a, const room_status& b) {
    return a.room == b.room && a.state == b.state && a.reason == b.reason;
  }
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, room_status& x) {
  return inspect_fields(f, caf::meta::type_name("room_status"), x.room, x.state, x.reason);
}

/// Registers every message type above with `cfg`, under fixed names.
void add_message_types(caf::actor_system_config& cfg);

} // namespace layerstream
