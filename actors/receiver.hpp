// receiver: one per decode rank; owns which rooms are complete and the pages
// they hold in the decode KV pool.
//
// Protocol:
//   open_room{room, prompt_tokens}  from the decode driver: allocate the
//                        room's pages, send transfer_info (a request bounded
//                        by room_timeout) to EVERY prefill rank; answered with
//                        room_result once every rank answered kv_ready{ok}
//                        (and the bytes check out) or the room failed
//   room_status_query{room}  answered with room_status (waiting,
//                        transferring, complete, failed) and the reason
//   close_room{room}     decode consumed a finished room: its pages go back
//                        to the allocator; answered with ok
//
// Rules: a room is complete only when every CP rank answered kv_ready with
// success and, with `verify`, every byte of tokens [0, prompt_tokens) in the
// pool matches kv_pattern (else it fails with "bytes differ": decode never
// reports complete for a room with a missing byte). The first failure (a
// kv_ready error, a request error or timeout, a prefill scheduler going
// down) fails the room with a reason naming the rank. A failed room's pages
// return to the allocator only once every rank's request has settled
// (answered or timed out), so a late write never lands in a reused page; a
// complete room's pages return on close_room. Every prefill scheduler is
// monitored; once one is down, its waiting rooms fail and new rooms fail at
// once.
//
// Lifecycle: the caller owns the kv_pool (it must outlive the actor) and the
// fabric endpoint behind `decode_pool::peer`; the receiver owns the page
// allocator. It runs until its owner sends it an exit; its state's
// destructor answers every open room with lserr::cancelled (CAF 0.17 has no
// broken-promise error).
#pragma once

#include <caf/actor.hpp>
#include <caf/actor_system_config.hpp>
#include <caf/duration.hpp>
#include <caf/error.hpp>
#include <caf/meta/type_name.hpp>
#include <caf/replies_to.hpp>
#include <caf/stateful_actor.hpp>
#include <caf/typed_actor.hpp>
#include <caf/typed_event_based_actor.hpp>
#include <caf/typed_response_promise.hpp>

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "actors/scheduler_protocol.hpp"
#include "config/config.hpp"
#include "messages/messages.hpp"
#include "model/kv_pool.hpp"

namespace layerstream {

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
  return f(caf::meta::type_name("open_room"), x.room, x.prompt_tokens);
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
  return f(caf::meta::type_name("room_result"), x.room, x.status, x.bytes, x.bit_exact,
           x.started_ns, x.finished_ns);
}

/// decode driver -> receiver: decode consumed a finished room; release its
/// pages. Answered with ok; unknown_room or bad_input (still in flight) otherwise.
struct close_room {
  room_id room = 0;
  friend bool operator==(const close_room& a, const close_room& b) { return a.room == b.room; }
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, close_room& x) {
  return f(caf::meta::type_name("close_room"), x.room);
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
  return f(caf::meta::type_name("room_status_query"), x.room);
}

enum class room_state : uint8_t {
  waiting,      // transfer_info sent, no rank has answered yet
  transferring, // some ranks answered kv_ready{ok}, others not yet
  complete,     // every rank answered ok (and the bytes matched)
  failed,       // see the reason
};

std::string to_string(room_state state);

/// receiver -> anyone, the answer to room_status_query.
struct room_status {
  room_id room = 0;
  room_state state = room_state::waiting;
  /// Why the room failed (describe() of its error); empty otherwise.
  std::string reason;
  friend bool operator==(const room_status& a, const room_status& b) {
    return a.room == b.room && a.state == b.state && a.reason == b.reason;
  }
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, room_status& x) {
  return f(caf::meta::type_name("room_status"), x.room, x.state, x.reason);
}

/// Registers the receiver's messages (to move into add_message_types later).
void receiver_message_types(caf::actor_system_config& cfg);

using receiver_actor = caf::typed_actor<caf::replies_to<open_room>::with<room_result>,
                                        caf::replies_to<room_status_query>::with<room_status>,
                                        caf::replies_to<close_room>::with<caf::ok_atom>>;

/// The decode KV pool as the receiver uses it; neither is owned.
struct decode_pool {
  /// The pool remote writers target; must outlive the receiver.
  kv_pool* pool = nullptr;
  /// What transfer_info advertises (a fabric_target's peer(), or a test value).
  fabric_peer peer;
};

struct receiver_config {
  /// Bound on each transfer_info request, i.e. on a room from open to kv_ready.
  caf::timespan room_timeout = std::chrono::seconds(60);
  /// Check a room's bytes against kv_pattern before reporting it complete.
  bool verify = true;
  /// Optional: gets a copy of every room_result (a room is ready to decode).
  caf::actor subscriber;
};

/// receiver_config from the deployment file: timeouts.room; verify on.
receiver_config make_receiver_config(const deployment_config& dep);

/// What one prefill rank has done for one room.
enum class rank_phase : uint8_t {
  pending, // transfer_info sent, no answer yet
  ready,   // kv_ready with success
  failed,  // kv_ready with an error, or the request failed or timed out
  lost,    // the rank went down while pending (its request is still out)
};

struct receiver_state {
  static inline const char* name = "layerstream.receiver";

  struct room_entry {
    /// Tells a reused room id's answers from an earlier room's (never mixed).
    uint64_t serial = 0;
    uint64_t prompt_tokens = 0;
    /// Decode pool pages, in request page order; empty once released.
    std::vector<uint64_t> pages;
    room_state state = room_state::waiting;
    std::vector<rank_phase> ranks;
    uint32_t ready = 0;
    /// transfer_info requests not yet answered or timed out.
    uint32_t outstanding = 0;
    uint64_t bytes = 0;
    caf::error failure;
    bool bit_exact = false;
    int64_t started_ns = 0;
    int64_t finished_ns = 0;
    /// close_room came while a failed room still had requests out.
    bool closed = false;
    caf::typed_response_promise<room_result> reply;
  };

  decode_pool pool;
  /// Optional only because the state must be default-constructible.
  std::optional<page_allocator> pages;
  /// Index = cp_rank.
  std::vector<scheduler_actor> prefill;
  /// Why each prefill rank is down (none while it is up).
  std::vector<caf::error> lost;
  receiver_config cfg;
  std::unordered_map<room_id, room_entry> rooms;
  uint64_t next_serial = 0;

  /// Answers every room still waiting for its ranks with lserr::cancelled.
  ~receiver_state();
};

receiver_actor::behavior_type receiver_impl(receiver_actor::stateful_pointer<receiver_state> self,
                                            decode_pool pool, page_allocator pages,
                                            std::vector<scheduler_actor> prefill,
                                            receiver_config cfg);

} // namespace layerstream
