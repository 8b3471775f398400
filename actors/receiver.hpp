// receiver: one per decode rank; owns which rooms are complete and the pages
// they hold in the decode KV pool.
//
// Protocol:
//   open_room{room, prompt_tokens}  from the decode driver: allocate the
//                        room's pages, send transfer_info to EVERY prefill
//                        rank; answered with room_result once every rank
//                        answered kv_ready{ok} (and the bytes check out) or
//                        the room failed, at room_timeout at the latest. A
//                        room that finds too few free pages waits for them
//                        (page wait, below) for up to room_timeout first.
//   room_deadline{room, serial}  to itself at room_timeout: fails the room if
//                        a rank has not answered yet, or a room still
//                        waiting for pages (not in receiver_actor; one from
//                        any other sender is ignored)
//   room_status_query{room}  answered with room_status (waiting,
//                        transferring, complete, failed) and the reason
//   close_room{room}     decode consumed a finished room: its pages go back
//                        to the allocator; answered with ok. A room still
//                        waiting for pages is withdrawn (its opener hears
//                        lserr::cancelled)
//
// Rules: a room is complete only when every CP rank answered kv_ready with
// success and a byte count equal to its slice of the room's pages (every
// layer and buffer; another count fails the room) and, with `verify`, every
// byte of tokens [0, prompt_tokens) in the pool matches kv_pattern (else it
// fails with "bytes differ": decode never reports complete for a room with a
// missing byte). The first failure (a kv_ready error, a request error or
// timeout, a prefill scheduler going down, room_timeout) fails the room with
// a reason naming the rank.
//
// Pages of a failed room: a rank that has not answered may still be writing
// into them (decode's room_timeout does not stop it), so they return to the
// allocator only once every rank that got the transfer_info answered it
// without lserr::writes_in_flight (a rank answers only when its writes for
// the room have ended, or with writes_in_flight when it gave up on some, e.g.
// on a stalled link at its engine's deadline). A rank that answers
// writes_in_flight (or an error other than proof that the transfer_info never
// reached a scheduler), stays silent past `answer_wait` (decode_answer_wait,
// common/deadlines.hpp; a stopped process) or goes down before answering
// ("down" is the control plane's verdict: a stopped or cut-off rank may
// resume) holds the pages for as long as the receiver runs: leaking them is
// safe, reusing them is not; refusals they cause (a full pool, a held room's
// id opened again) and a held room's status say so. A complete room's pages
// return on close_room.
// Every prefill scheduler is monitored; once one is down, its waiting rooms
// fail and new rooms fail at once.
//
// Page wait: a room whose pages are not free waits, as a decode scheduler
// holds a request until it has KV room for it (SGLang's prealloc queue).
// Rooms take pages in the order they came (a small room does not pass a
// large one that came first) as complete rooms are closed and failed rooms'
// pages come back. A room still waiting room_timeout after it came fails
// with lserr::timeout; one that needs more pages than the pool has besides
// the held ones is refused at once (or when held pages make it so). Once
// admitted, a room gets its own room_timeout for the transfer. At most
// max_page_waiters rooms wait; more are refused.
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
#include "common/deadlines.hpp"
#include "common/keyed_fifo.hpp"
#include "config/config.hpp"
#include "messages/messages.hpp"
#include "model/kv_pool.hpp"

namespace layerstream {

/// The receiver as decode drivers and nodes see it.
using receiver_actor = caf::typed_actor<caf::replies_to<open_room>::with<room_result>,
                                        caf::replies_to<room_status_query>::with<room_status>,
                                        caf::replies_to<close_room>::with<caf::ok_atom>>;

/// What the receiver itself handles: its public interface plus the timer it
/// sends itself. Only spawning code sees this type; everyone else holds a
/// receiver_actor, through which room_deadline does not compile. A dynamic
/// handle (actor_cast<caf::actor>, a remote one) still reaches the
/// behaviour: the handler ignores a room_deadline that the receiver did not
/// send itself.
using receiver_self_actor = receiver_actor::extend<caf::reacts_to<room_deadline>>;

/// The decode KV pool as the receiver uses it; neither is owned.
struct decode_pool {
  /// The pool remote writers target; must outlive the receiver.
  kv_pool* pool = nullptr;
  /// What transfer_info advertises (a fabric_target's peer(), or a test value).
  fabric_peer peer;
};

struct receiver_config {
  /// Bound on a room from open to every rank's kv_ready.
  caf::timespan room_timeout = timeouts_config{}.room;
  /// Bound on each transfer_info request (decode_answer_wait,
  /// common/deadlines.hpp): a rank silent past it holds the pages for good.
  caf::timespan answer_wait = decode_answer_wait(timeouts_config{}.room, timeouts_config{}.submit);
  /// Check a room's bytes against kv_pattern before reporting it complete.
  bool verify = true;
  /// Optional: gets a copy of the room_result of every room that was opened
  /// (complete: ready to decode, or failed). A room refused before it
  /// opened (at open_room, in the page wait, or closed while it waited)
  /// answers its opener only.
  caf::actor subscriber;
  /// TESTING ONLY (workload.corrupt_rooms): rooms whose transfer_info gets a
  /// dst_k_ptrs[0] past the end of the advertised region. Empty normally.
  std::vector<room_id> corrupt_rooms;
  /// Per prefill rank, the key of the authenticated session `prefill[rank]`
  /// is (node/auth.hpp), put into every transfer_info to that rank. Empty
  /// when the schedulers are in this process.
  std::vector<std::vector<uint8_t>> session_keys;
};

/// receiver_config from the deployment file: timeouts.room; verify on.
receiver_config make_receiver_config(const deployment_config& dep);

/// What one prefill rank has done for one room.
enum class rank_phase : uint8_t {
  pending,   // transfer_info sent, no answer yet
  ready,     // kv_ready with success
  failed,    // kv_ready with an error (none of its writes left), or the
             // request was not delivered
  lost,      // the rank went down while pending: it may still write
  may_write, // its request timed out, or it answered writes_in_flight (or an
             // error that does not prove its writes ended)
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
    /// A rank may still write (may_write or lost): the pages never return.
    bool held = false;
    uint64_t bytes = 0;
    caf::error failure;
    bool bit_exact = false;
    int64_t started_ns = 0;
    int64_t finished_ns = 0;
    /// close_room came while a failed room still had requests out or held
    /// pages; it is forgotten once they return (if ever).
    bool closed = false;
    caf::typed_response_promise<room_result> reply;
  };

  /// A room waiting for free pages (page wait, above).
  struct page_waiter {
    open_room msg;
    /// Its room_deadline's serial (from next_serial, like a room's).
    uint64_t serial = 0;
    uint64_t pages = 0;
    int64_t started_ns = 0;
    caf::typed_response_promise<room_result> reply;
  };
  /// The most rooms one receiver keeps waiting; more are refused.
  static constexpr size_t max_page_waiters = 65536;

  decode_pool pool;
  /// Optional only because the state must be default-constructible.
  std::optional<page_allocator> pages;
  /// Index = cp_rank.
  std::vector<scheduler_actor> prefill;
  /// Why each prefill rank is down (none while it is up).
  std::vector<caf::error> lost;
  receiver_config cfg;
  std::unordered_map<room_id, room_entry> rooms;
  /// Rooms waiting for pages, in arrival order.
  keyed_fifo<room_id, page_waiter> page_wait;
  /// Guards admit_page_waiters against re-entry.
  bool admitting = false;
  uint64_t next_serial = 0;
  /// Pages and rooms held for good (room_entry::held), named in the refusals
  /// they cause: a full pool or a busy room id.
  uint64_t held_pages = 0;
  uint32_t held_rooms = 0;

  /// Answers every room still waiting for its ranks or for pages with
  /// lserr::cancelled.
  ~receiver_state();
};

/// Spawn with sys.spawn(receiver_impl, ...); the handle converts to receiver_actor.
receiver_self_actor::behavior_type
receiver_impl(receiver_self_actor::stateful_pointer<receiver_state> self, decode_pool pool,
              page_allocator pages, std::vector<scheduler_actor> prefill, receiver_config cfg);

} // namespace layerstream
