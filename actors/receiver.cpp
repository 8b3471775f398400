#include "actors/receiver.hpp"

#include <algorithm>

#include <caf/sec.hpp>
#include <caf/send.hpp>

#include "common/deadlines.hpp"
#include "common/log.hpp"
#include "transport/transfer_plan.hpp"

namespace layerstream {

receiver_config make_receiver_config(const deployment_config& dep) {
  receiver_config cfg;
  cfg.room_timeout = dep.timeouts.room;
  cfg.answer_wait = decode_answer_wait(dep.timeouts.room, dep.timeouts.submit);
  cfg.corrupt_rooms = dep.workload.corrupt_rooms;
  return cfg;
}

receiver_state::~receiver_state() {
  for (auto& [room, entry] : rooms) {
    if (entry.reply.pending())
      entry.reply.deliver(
          room_result{room,
                      make_error(lserr::cancelled, "receiver stopped before room " +
                                                       std::to_string(room) + " finished"),
                      entry.bytes, false, entry.started_ns, entry.finished_ns});
  }
  page_wait.for_each([](room_id room, page_waiter& w) {
    if (w.reply.pending())
      w.reply.deliver(
          room_result{room,
                      make_error(lserr::cancelled, "receiver stopped while room " +
                                                       std::to_string(room) + " waited for pages"),
                      0, false, w.started_ns, w.started_ns});
  });
}

namespace {

using self_ptr = receiver_self_actor::stateful_pointer<receiver_state>;
using room_entry = receiver_state::room_entry;

// local_actor::now() is declared but not exported by Debian's libcaf_core 0.17.6.
int64_t now_ns(self_ptr self) {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             self->clock().now().time_since_epoch())
      .count();
}

room_result result_of(room_id room, const room_entry& entry) {
  return room_result{
      room, entry.failure, entry.bytes, entry.bit_exact, entry.started_ns, entry.finished_ns};
}

/// Answers the opener and tells the subscriber.
void publish(self_ptr self, room_id room, room_entry& entry) {
  auto res = result_of(room, entry);
  if (entry.reply.pending())
    entry.reply.deliver(res);
  // anon_send: a statically typed actor may not send() to a dynamically typed one.
  if (self->state.cfg.subscriber)
    caf::anon_send(self->state.cfg.subscriber, std::move(res));
}

/// Fails a room that has not finished yet; a finished room keeps its verdict.
void fail_room(self_ptr self, room_id room, room_entry& entry, caf::error err) {
  if (entry.state == room_state::complete || entry.state == room_state::failed) {
    LS_DEBUG("receiver: room {}: further failure ignored: {}", room, describe(err));
    return;
  }
  LS_WARN("receiver: room {} failed: {}", room, describe(err));
  entry.state = room_state::failed;
  entry.failure = std::move(err);
  entry.finished_ns = now_ns(self);
  publish(self, room, entry);
}

/// Every rank said ok: check the bytes (if asked), then report the room.
void complete_room(self_ptr self, room_id room, room_entry& entry) {
  auto& st = self->state;
  if (st.cfg.verify) {
    auto bad =
        st.pool.pool->check_room(room, entry.pages, 0, entry.prompt_tokens, entry.prompt_tokens);
    if (bad > 0) {
      fail_room(
          self, room, entry,
          make_error(lserr::transfer_failed, "bytes differ: " + std::to_string(bad) +
                                                 " bad rows in room " + std::to_string(room) +
                                                 " although every prefill rank reported success"));
      return;
    }
    entry.bit_exact = true;
  }
  entry.state = room_state::complete;
  entry.finished_ns = now_ns(self);
  LS_INFO("receiver: room {} complete: {} tokens, {} bytes from {} ranks{}", room,
          entry.prompt_tokens, entry.bytes, entry.ranks.size(),
          entry.bit_exact ? ", bit-exact" : "");
  publish(self, room, entry);
}

void admit_page_waiters(self_ptr self);

/// A failed room's pages go back once no request for it is out and no rank
/// may still write into them; a closed failed room is then forgotten.
void settle(self_ptr self, room_id room) {
  auto& st = self->state;
  auto i = st.rooms.find(room);
  auto& entry = i->second;
  if (entry.state != room_state::failed || entry.outstanding > 0 || entry.held)
    return;
  if (!entry.pages.empty()) {
    st.pages->release(entry.pages);
    LS_DEBUG("receiver: room {}: {} pages released after failure", room, entry.pages.size());
    entry.pages.clear();
  }
  if (entry.closed)
    st.rooms.erase(i);
  admit_page_waiters(self);
}

/// The error a failed rank leaves on its room, naming the rank.
caf::error rank_error(uint32_t rank, const caf::error& status) {
  auto code = status.category() == caf::atom("lserr") ? static_cast<lserr>(status.code())
                                                      : lserr::transfer_failed;
  return make_error(code, "prefill rank " + std::to_string(rank) + ": " + message_of(status));
}

std::string ms_of(caf::timespan d) {
  return std::to_string(std::chrono::duration_cast<std::chrono::milliseconds>(d).count()) + " ms";
}

caf::error request_error(uint32_t rank, room_id room, caf::timespan timeout,
                         const caf::error& err) {
  auto who = "prefill rank " + std::to_string(rank);
  if (err == caf::sec::request_timeout)
    return make_error(lserr::timeout, who + " did not answer room " + std::to_string(room) +
                                          " within " + ms_of(timeout));
  if (err == caf::sec::request_receiver_down)
    return make_error(lserr::peer_lost, who + " is down: " + describe(err));
  if (err.category() == caf::atom("lserr"))
    return rank_error(rank, err);
  return make_error(lserr::transfer_failed, who + ": " + describe(err));
}

/// `rank` (now in `phase`: may_write or lost) may still write into the room's
/// pages: they are not reused while this receiver runs (leaking them is safe,
/// reusing them is not).
void hold_pages(self_ptr self, room_id room, room_entry& entry, uint32_t rank, rank_phase phase,
                const std::string& why) {
  entry.ranks[rank] = phase;
  if (!entry.held) {
    entry.held = true;
    self->state.held_pages += entry.pages.size();
    ++self->state.held_rooms;
  }
  LS_ERROR("receiver: room {}: prefill rank {} {}; its writes may still land, so the room's {} "
           "pages stay held for as long as this receiver runs",
           room, rank, why, entry.pages.size());
}

/// The bytes prefill rank `rank` must write for a room of `pages` pages: its
/// slice of the pages (owned_positions), one item_len in every layer and
/// buffer of this pool (the item_lens transfer_info carries are all that
/// one). Bounded by the pool's size, so no overflow.
uint64_t owed_bytes(const kv_pool& pool, uint64_t pages, uint32_t cp, uint32_t rank) {
  auto owned = owned_positions(pages, cp, rank);
  if (!owned)
    return 0; // cp == 0 or rank >= cp: cannot happen for a rank we asked
  return owned->size() * pool.item_len() * pool.layers() * pool.buffers();
}

/// One rank's answer (kv_ready or a request error) for one room.
void on_answer(self_ptr self, room_id room, uint64_t serial, uint32_t rank, const kv_ready* ready,
               const caf::error& request_err) {
  auto& st = self->state;
  auto i = st.rooms.find(room);
  if (i == st.rooms.end() || i->second.serial != serial)
    return; // Cannot happen (rooms outlive their requests); ignore to be safe.
  auto& entry = i->second;
  --entry.outstanding;
  auto& phase = entry.ranks[rank];
  if (phase != rank_phase::pending) {
    LS_DEBUG("receiver: room {}: late answer of prefill rank {} ignored", room, rank);
  } else if (ready == nullptr && request_err == caf::sec::request_timeout) {
    // Up, and silent long after the room's deadline (a stopped process, a
    // lost message): its writes may still come, into these pages.
    hold_pages(self, room, entry, rank, rank_phase::may_write,
               "has not answered in " + ms_of(st.cfg.answer_wait));
    fail_room(self, room, entry, request_error(rank, room, st.cfg.answer_wait, request_err));
  } else if (ready == nullptr && (request_err == caf::sec::request_receiver_down ||
                                  is(request_err, lserr::unauthorized))) {
    // Never delivered to a scheduler (it was down, or its session refused
    // the transfer_info): no write of it can come.
    phase = rank_phase::failed;
    fail_room(self, room, entry, request_error(rank, room, st.cfg.room_timeout, request_err));
  } else if (ready == nullptr) {
    // Any other error (writes_in_flight from its session, or one we cannot
    // place) does not prove that its writes ended.
    hold_pages(self, room, entry, rank, rank_phase::may_write,
               "answered with an error: " + describe(request_err));
    fail_room(self, room, entry, rank_error(rank, request_err));
  } else if (is(ready->status, lserr::writes_in_flight)) {
    // It gave up on writes it had handed over: they may still land here.
    // (Checked before the room and rank: even a stray answer's writes may land.)
    hold_pages(self, room, entry, rank, rank_phase::may_write, "gave up on writes in flight");
    entry.bytes += ready->bytes;
    fail_room(self, room, entry, rank_error(rank, ready->status));
  } else if (ready->room != room || ready->cp_rank != rank) {
    phase = rank_phase::failed;
    fail_room(self, room, entry,
              make_error(lserr::bad_input, "prefill rank " + std::to_string(rank) +
                                               " answered for room " + std::to_string(ready->room) +
                                               " as cp_rank " + std::to_string(ready->cp_rank)));
  } else if (ready->status) {
    phase = rank_phase::failed;
    entry.bytes += ready->bytes;
    fail_room(self, room, entry, rank_error(rank, ready->status));
  } else if (auto owed = owed_bytes(*st.pool.pool, entry.pages.size(),
                                    static_cast<uint32_t>(entry.ranks.size()), rank);
             ready->bytes != owed) {
    // Its writes have ended (it answered), but its count says a byte is
    // missing or extra: the room must not complete on it, with or without
    // `verify` (stale bytes of an earlier room in the same pages could pass).
    phase = rank_phase::failed;
    entry.bytes += ready->bytes;
    fail_room(self, room, entry,
              make_error(lserr::transfer_failed,
                         "prefill rank " + std::to_string(rank) + " answered success with " +
                             std::to_string(ready->bytes) + " bytes written, but its " +
                             "slice of the room's pages is " + std::to_string(owed) + " bytes"));
  } else {
    phase = rank_phase::ready;
    ++entry.ready;
    entry.bytes += ready->bytes;
    if (entry.state == room_state::waiting)
      entry.state = room_state::transferring;
    LS_DEBUG("receiver: room {}: prefill rank {} ready ({} of {})", room, rank, entry.ready,
             entry.ranks.size());
    if (entry.state == room_state::transferring && entry.ready == entry.ranks.size())
      complete_room(self, room, entry);
  }
  settle(self, room);
  // Pages held since (a rank that may still write) can leave a waiting room
  // more than the pool has besides them: refused now, not at its deadline.
  admit_page_waiters(self);
}

/// Why a held room's id and pages stay taken.
std::string held_note(const room_entry& entry) {
  return "its " + std::to_string(entry.pages.size()) +
         " pages stay held: a prefill rank may still write them";
}

/// Why an open room's id cannot be reused yet.
std::string busy_note(const room_entry& entry) {
  if (entry.held)
    return " failed and cannot be reused: " + held_note(entry);
  if (entry.state != room_state::failed || !entry.closed)
    return " is already open";
  std::string pending;
  for (uint32_t rank = 0; rank < entry.ranks.size(); ++rank)
    if (entry.ranks[rank] == rank_phase::pending)
      pending += (pending.empty() ? "" : ", ") + std::to_string(rank);
  return " failed and was closed, but its " + std::to_string(entry.pages.size()) +
         " pages and its id wait for prefill rank(s) " + pending +
         " to answer (they may still write them)";
}

/// Names the held pages in a "pool is full" refusal, so a shrinking pool is
/// not a mystery; empty while none is held.
std::string held_count(const receiver_state& st) {
  if (st.held_rooms == 0)
    return {};
  return "; " + std::to_string(st.held_pages) +
         (st.held_pages == 1 ? " page is held by " : " pages are held by ") +
         std::to_string(st.held_rooms) + (st.held_rooms == 1 ? " failed room" : " failed rooms") +
         " that a prefill rank may still write into (they return when decode restarts)";
}

/// Pages needed for `tokens` tokens, without overflow.
uint64_t pages_for(uint64_t tokens, uint32_t page_size) {
  return tokens / page_size + (tokens % page_size != 0 ? 1 : 0);
}

/// The first prefill rank that is down, as the error that refuses a room.
caf::error lost_rank(const receiver_state& st) {
  for (uint32_t r = 0; r < st.lost.size(); ++r)
    if (st.lost[r])
      return make_error(lserr::peer_lost,
                        "prefill rank " + std::to_string(r) + " lost: " + describe(st.lost[r]));
  return {};
}

/// Why a room of `need` pages can never get them: more than the pool has
/// besides the pages held for good (none while it can).
caf::error never_fits(const receiver_state& st, room_id room, uint64_t need) {
  const uint64_t usable = st.pages->total_pages() - st.held_pages;
  if (need <= usable)
    return {};
  return make_error(lserr::bad_input, "room " + std::to_string(room) + ": " + std::to_string(need) +
                                          " pages asked, the pool has " + std::to_string(usable) +
                                          " besides held pages" + held_count(st));
}

/// Sends the room's transfer_info to every rank and arms its room_timeout;
/// `reply` answers the opener once the room is done.
void start_room(self_ptr self, const open_room& msg, std::vector<uint64_t> pages,
                caf::typed_response_promise<room_result> reply, int64_t started) {
  auto& st = self->state;
  auto room = msg.room;
  auto& pool = *st.pool.pool;
  auto cp = static_cast<uint32_t>(st.prefill.size());
  transfer_info info;
  info.room = room;
  info.prompt_tokens = msg.prompt_tokens;
  info.decode = st.pool.peer;
  info.dst_pages = pages;
  info.dst_k_ptrs = pool.k_ptrs();
  info.dst_v_ptrs = pool.v_ptrs();
  info.item_lens = pool.item_lens();
  info.cp_size = cp;
  // TESTING-ONLY fault hook (workload.corrupt_rooms, used by
  // tests/process/bad_transfer_info.sh): move layer 0's K destination just
  // past the end of the advertised region, so every write of that layer is
  // out of range. The prefill ranks must refuse this room on arrival (before
  // any write) and fail only it; no byte outside the room may change. Never
  // set in production.
  if (std::find(st.cfg.corrupt_rooms.begin(), st.cfg.corrupt_rooms.end(), room) !=
          st.cfg.corrupt_rooms.end() &&
      !info.dst_k_ptrs.empty()) {
    uint64_t end = 0;
    for (const auto& region : info.decode.regions)
      end = std::max(end, region.base + region.length);
    info.dst_k_ptrs[0] = end;
    LS_WARN("receiver: room {}: TEST HOOK workload.corrupt_rooms: transfer_info corrupted "
            "(dst_k_ptrs[0] = {:#x}, past the advertised region's end)",
            room, info.dst_k_ptrs[0]);
  }

  auto& entry = st.rooms[room];
  entry.serial = st.next_serial++;
  entry.prompt_tokens = msg.prompt_tokens;
  entry.pages = std::move(pages);
  entry.ranks.assign(cp, rank_phase::pending);
  entry.outstanding = cp;
  entry.started_ns = started;
  entry.reply = std::move(reply);
  LS_DEBUG("receiver: room {} open: {} tokens in {} pages, {} prefill ranks", room,
           msg.prompt_tokens, entry.pages.size(), cp);
  auto serial = entry.serial;
  for (uint32_t rank = 0; rank < cp; ++rank) {
    auto to_rank = info;
    if (rank < st.cfg.session_keys.size())
      to_rank.session_key = st.cfg.session_keys[rank];
    self->request(st.prefill[rank], st.cfg.answer_wait, std::move(to_rank))
        .then(
            [self, room, serial, rank](const kv_ready& ready) {
              on_answer(self, room, serial, rank, &ready, caf::error{});
            },
            [self, room, serial, rank](caf::error& err) {
              on_answer(self, room, serial, rank, nullptr, err);
            });
  }
  self->delayed_send(self, st.cfg.room_timeout, room_deadline{room, serial});
}

room_result refusal(self_ptr self, room_id room, int64_t started, caf::error err) {
  LS_WARN("receiver: room {} refused: {}", room, describe(err));
  return room_result{room, std::move(err), 0, false, started, now_ns(self)};
}

caf::result<room_result> on_open(self_ptr self, const open_room& msg) {
  auto& st = self->state;
  auto room = msg.room;
  auto started = now_ns(self);
  if (auto open = st.rooms.find(room); open != st.rooms.end())
    return refusal(self, room, started,
                   make_error(lserr::duplicate_room,
                              "room " + std::to_string(room) + busy_note(open->second)));
  if (st.page_wait.contains(room))
    return refusal(self, room, started,
                   make_error(lserr::duplicate_room,
                              "room " + std::to_string(room) + " is waiting for pages"));
  if (msg.prompt_tokens == 0)
    return refusal(self, room, started,
                   make_error(lserr::bad_input, "room " + std::to_string(room) + " has no tokens"));
  if (auto lost = lost_rank(st))
    return refusal(self, room, started, std::move(lost));
  const uint64_t need = pages_for(msg.prompt_tokens, st.pool.pool->page_size());
  if (auto never = never_fits(st, room, need))
    return refusal(self, room, started, std::move(never));
  // Rooms that came first go first: a room waits whenever any room waits.
  if (st.page_wait.empty()) {
    if (auto pages = st.pages->allocate(need)) {
      auto reply = self->make_response_promise<room_result>();
      start_room(self, msg, std::move(*pages), reply, started);
      return reply;
    }
  }
  if (st.page_wait.size() >= receiver_state::max_page_waiters)
    return refusal(
        self, room, started,
        make_error(lserr::bad_input, "room " + std::to_string(room) + ": " + std::to_string(need) +
                                         " pages asked, " + std::to_string(st.pages->free_pages()) +
                                         " free, and " + std::to_string(st.page_wait.size()) +
                                         " rooms wait for pages already" + held_count(st)));
  auto serial = st.next_serial++;
  LS_DEBUG("receiver: room {} waits for {} pages ({} free, {} rooms ahead)", room, need,
           st.pages->free_pages(), st.page_wait.size());
  auto reply = self->make_response_promise<room_result>();
  // Not in the wait already: on_open refused a room id that waits.
  [[maybe_unused]] const bool queued =
      st.page_wait.push_back(room, receiver_state::page_waiter{msg, serial, need, started, reply});
  self->delayed_send(self, st.cfg.room_timeout, room_deadline{room, serial});
  return reply;
}

/// Starts waiting rooms, head first, while their pages are free; refuses a
/// head that can never fit or whose ranks are gone.
void admit_page_waiters(self_ptr self) {
  auto& st = self->state;
  if (st.admitting)
    return;
  st.admitting = true;
  while (!st.page_wait.empty()) {
    const auto room = st.page_wait.front_key();
    const auto need = st.page_wait.front().pages;
    caf::error refused = lost_rank(st);
    if (!refused)
      refused = never_fits(st, room, need);
    if (refused) {
      auto w = st.page_wait.pop_front();
      w.reply.deliver(refusal(self, w.msg.room, w.started_ns, std::move(refused)));
      continue;
    }
    auto pages = st.pages->allocate(need);
    if (!pages)
      break;
    auto w = st.page_wait.pop_front();
    LS_DEBUG("receiver: room {} got its {} pages after {} ms", w.msg.room, w.pages,
             (now_ns(self) - w.started_ns) / 1'000'000);
    start_room(self, w.msg, std::move(*pages), std::move(w.reply), w.started_ns);
  }
  st.admitting = false;
}

/// room_timeout after it came, a room still waiting for pages fails; the
/// rooms behind it may fit now.
bool page_wait_deadline(self_ptr self, const room_deadline& msg) {
  auto& st = self->state;
  const auto* waiting = st.page_wait.find(msg.room);
  if (waiting == nullptr || waiting->serial != msg.serial)
    return false;
  auto taken = st.page_wait.take(msg.room);
  auto& waiter = *taken; // found just above
  auto err = make_error(lserr::timeout, "room " + std::to_string(waiter.msg.room) + " waited " +
                                            ms_of(st.cfg.room_timeout) + " for " +
                                            std::to_string(waiter.pages) + " decode pages (" +
                                            std::to_string(st.pages->free_pages()) + " free" +
                                            held_count(st) + "); not opened");
  LS_WARN("receiver: {}", describe(err));
  waiter.reply.deliver(
      room_result{waiter.msg.room, std::move(err), 0, false, waiter.started_ns, now_ns(self)});
  admit_page_waiters(self);
  return true;
}

/// timeouts.room_ms since open: the room fails if a rank has not answered.
/// Its pages stay held: those ranks may still be writing (settle).
void on_room_deadline(self_ptr self, const room_deadline& msg) {
  auto& st = self->state;
  if (self->current_sender() != caf::actor_cast<caf::strong_actor_ptr>(self))
    return; // only its own timer may fail a room early
  if (page_wait_deadline(self, msg))
    return;
  auto i = st.rooms.find(msg.room);
  if (i == st.rooms.end() || i->second.serial != msg.serial)
    return; // closed and forgotten, or the id now names a later room
  auto& entry = i->second;
  if (entry.state != room_state::waiting && entry.state != room_state::transferring)
    return;
  std::string pending;
  for (uint32_t rank = 0; rank < entry.ranks.size(); ++rank)
    if (entry.ranks[rank] == rank_phase::pending)
      pending += (pending.empty() ? "" : ", ") + std::to_string(rank);
  auto who = pending.find(',') == std::string::npos ? "prefill rank " : "prefill ranks ";
  fail_room(self, msg.room, entry,
            make_error(lserr::timeout, who + pending + " did not answer room " +
                                           std::to_string(msg.room) + " within " +
                                           ms_of(st.cfg.room_timeout)));
  LS_DEBUG("receiver: room {}: {} pages held until {}{} answer", msg.room, entry.pages.size(), who,
           pending);
}

void on_down(self_ptr self, const caf::down_msg& dm) {
  auto& st = self->state;
  for (uint32_t rank = 0; rank < st.prefill.size(); ++rank) {
    if (st.prefill[rank].address() != dm.source)
      continue;
    auto reason = dm.reason ? describe(dm.reason) : std::string{"exited"};
    st.lost[rank] = make_error(lserr::peer_lost, reason);
    LS_WARN("receiver: prefill rank {} lost: {}", rank, reason);
    for (auto& [room, entry] : st.rooms) {
      if (entry.ranks[rank] != rank_phase::pending)
        continue;
      // "Down" is the control plane's verdict: a rank only stopped or cut
      // off may resume and still write. The pages stay held; with a rank
      // lost this receiver opens no room any more anyway.
      hold_pages(self, room, entry, rank, rank_phase::lost,
                 "went down before it answered (maybe only stopped or cut off)");
      fail_room(self, room, entry,
                make_error(lserr::peer_lost,
                           "prefill rank " + std::to_string(rank) + " lost: " + reason));
    }
  }
  admit_page_waiters(self); // refuses every waiting room: a rank is lost
}

} // namespace

receiver_self_actor::behavior_type
receiver_impl(receiver_self_actor::stateful_pointer<receiver_state> self, decode_pool pool,
              page_allocator pages, std::vector<scheduler_actor> prefill, receiver_config cfg) {
  auto& init = self->state;
  init.pool = std::move(pool);
  init.pages.emplace(std::move(pages));
  init.prefill = std::move(prefill);
  init.lost.resize(init.prefill.size());
  init.cfg = std::move(cfg);
  for (auto& rank : init.prefill)
    self->monitor(rank);
  self->set_down_handler([self](caf::down_msg& dm) { on_down(self, dm); });
  if (init.pool.pool == nullptr || init.prefill.empty())
    LS_ERROR("receiver: spawned without a pool or prefill ranks: every room will be refused");
  return {
      [self](const open_room& msg) -> caf::result<room_result> {
        auto& st = self->state;
        if (st.pool.pool == nullptr || st.prefill.empty())
          return room_result{
              msg.room,
              make_error(lserr::bad_input, "receiver has no decode pool or no prefill ranks"),
              0,
              false,
              now_ns(self),
              now_ns(self)};
        return on_open(self, msg);
      },
      [self](const room_status_query& msg) -> caf::result<room_status> {
        auto& st = self->state;
        auto i = st.rooms.find(msg.room);
        if (i == st.rooms.end()) {
          if (const auto* w = st.page_wait.find(msg.room))
            return room_status{msg.room, room_state::waiting,
                               "waiting for " + std::to_string(w->pages) + " decode pages (" +
                                   std::to_string(st.page_wait.position(msg.room).value_or(0)) +
                                   " rooms ahead)"};
          return make_error(lserr::unknown_room,
                            "room " + std::to_string(msg.room) + " is not open");
        }
        auto& entry = i->second;
        auto reason = entry.failure ? describe(entry.failure) : std::string{};
        if (entry.held)
          reason += "; " + held_note(entry);
        return room_status{msg.room, entry.state, std::move(reason)};
      },
      [self](const room_deadline& msg) { on_room_deadline(self, msg); },
      [self](const close_room& msg) -> caf::result<caf::ok_atom> {
        auto& st = self->state;
        auto i = st.rooms.find(msg.room);
        if (i == st.rooms.end()) {
          // Closing a room that waits for pages withdraws it: its opener
          // hears lserr::cancelled, and nothing of it was sent.
          if (auto waiter = st.page_wait.take(msg.room)) {
            waiter->reply.deliver(room_result{
                msg.room,
                make_error(lserr::cancelled, "room " + std::to_string(msg.room) +
                                                 " was closed while it waited for pages"),
                0, false, waiter->started_ns, now_ns(self)});
            admit_page_waiters(self); // the rooms behind it may fit now
            return caf::ok_atom::value;
          }
          return make_error(lserr::unknown_room,
                            "close: room " + std::to_string(msg.room) + " is not open");
        }
        auto& entry = i->second;
        switch (entry.state) {
        case room_state::waiting:
        case room_state::transferring:
          LS_WARN("receiver: close of room {} refused: still transferring", msg.room);
          return make_error(lserr::bad_input,
                            "close: room " + std::to_string(msg.room) + " has not finished");
        case room_state::complete:
          st.pages->release(entry.pages);
          st.rooms.erase(i);
          admit_page_waiters(self);
          break;
        case room_state::failed:
          entry.closed = true;
          settle(self, msg.room); // Forgets the room now, or when its last request settles.
          break;
        }
        return caf::ok_atom::value;
      },
  };
}

} // namespace layerstream
