#include "actors/scheduler.hpp"

#include <caf/actor_system_config.hpp>
#include <caf/send.hpp>

#include <algorithm>
#include <chrono>

#include "common/deadlines.hpp"
#include "common/log.hpp"

namespace layerstream {

namespace {

using self_ptr = scheduler_full_actor::stateful_pointer<scheduler_state>;

uint64_t pages_for(uint64_t tokens, uint32_t page_size) {
  return tokens / page_size + (tokens % page_size != 0 ? 1 : 0); // no overflow near 2^64
}

/// What this rank expects of a transfer_info (its model and cluster).
transfer_info_shape shape_of(const scheduler_state& st) {
  const auto& pool = st.device->layout();
  return transfer_info_shape{st.cfg.model.page_size, st.cfg.cp_size,  pool.layers(), pool.mla(),
                             pool.item_len(),        pool.item_lens()};
}

/// This rank's runs for tokens [first, last) of a room: the chunk's pages,
/// cut to the rank's CP slice (positions are request page positions).
caf::expected<transfer_plan> chunk_plan(const scheduler_state& st, const prefill_room& rs,
                                        uint64_t first, uint64_t last) {
  const auto ps = st.cfg.model.page_size;
  const auto p0 = first / ps;
  const auto p1 = pages_for(last, ps);
  std::vector<uint64_t> src(rs.src_pages.begin() + p0, rs.src_pages.begin() + p1);
  std::vector<uint64_t> dst(rs.info.dst_pages.begin() + p0, rs.info.dst_pages.begin() + p1);
  return make_transfer_plan(src, dst,
                            {st.cfg.cp_size, st.cfg.cp_rank, p0, rs.info.dst_pages.size()});
}

/// One chunk's nominal forward, saturating at the room's time (a day at
/// most, config/loader.cpp).
std::chrono::steady_clock::duration forward_of(const scheduler_state& st) {
  using clock = std::chrono::steady_clock;
  return std::min<clock::duration>(
      std::chrono::duration_cast<clock::duration>(st.cfg.timeouts.room),
      forward_time(st.cfg.model.layers, st.cfg.model.layer_compute));
}

/// Prefill (src) and decode (dst) base pointers of every layer.
kv_pointers pointers_of(const scheduler_state& st, const prefill_room& rs) {
  return kv_pointers{st.src_k_ptrs, rs.info.dst_k_ptrs, st.src_v_ptrs, rs.info.dst_v_ptrs,
                     rs.info.item_lens};
}

void admit_page_waiters(self_ptr self);
void connect_room(self_ptr self, room_id room);
void arm_page_wait_deadline(self_ptr self, room_id room, const prefill_room& rs, uint64_t seq);

/// Rooms that may wait for src pages at once; more are refused (each holds
/// its transfer_info and decode's answer meanwhile).
constexpr size_t max_page_waiters = size_t{1} << 16;

/// Why a room needing `need` src pages can never have them, if it cannot:
/// the pool has fewer, the held ones aside.
caf::error never_fits(const scheduler_state& st, uint64_t need) {
  const uint64_t usable = st.device->layout().pages() - st.held_pages.size();
  if (need <= usable)
    return caf::none;
  return make_error(lserr::bad_input,
                    "prefill pool full: the room needs " + std::to_string(need) +
                        " src pages on this rank, the pool has " + std::to_string(usable) +
                        (st.held_pages.empty()
                             ? std::string{" pages"}
                             : " pages besides the " + std::to_string(st.held_pages.size()) +
                                   " held by rooms whose writes may still read them"));
}

/// Settles a room: answers decode and frees its pages.
void settle_room(self_ptr self, room_id room, caf::error status) {
  auto& st = self->state;
  auto i = st.rooms.find(room);
  if (i == st.rooms.end())
    return;
  auto& rs = i->second;
  if (status) {
    LS_WARN("rank {}: room {} failed: {}", st.cfg.cp_rank, room, describe(status));
    ++st.stats.rooms_failed;
  } else {
    LS_DEBUG("rank {}: room {} complete, {} bytes", st.cfg.cp_rank, room, rs.bytes);
    ++st.stats.rooms_complete;
  }
  const bool may_still_read = is(status, lserr::writes_in_flight);
  st.page_wait.take(room);
  rs.promise.deliver(kv_ready{room, st.cfg.cp_rank, std::move(status), rs.bytes});
  auto& od = st.overdue;
  if (may_still_read) {
    st.held_pages.insert(st.held_pages.end(), rs.owned_pages.begin(), rs.owned_pages.end());
    LS_WARN("rank {}: room {}: its {} src pages stay out of the pool for good ({} held): a write "
            "given up on may still read them",
            st.cfg.cp_rank, room, rs.owned_pages.size(), st.held_pages.size());
  } else if (od && std::find(od->rooms.begin(), od->rooms.end(), room) != od->rooms.end())
    od->pages.insert(od->pages.end(), rs.owned_pages.begin(), rs.owned_pages.end());
  else
    st.pages->release(rs.owned_pages);
  st.rooms.erase(i);
  // Pages came back, or a room ahead in the wait left, or fewer pages are
  // left for good (held): the waiting rooms' turn may have changed.
  admit_page_waiters(self);
}

void try_start_batch(self_ptr self);

/// The last moment a queued room may start another chunk: decode
/// fails the room timeouts.room after it asked, so a chunk starts only while
/// its forward (model.layers x layer_compute) and a tenth of the room's time
/// for the writes after it still fit in that time.
/// (Not a whole timeouts.submit: that is a write's deadline, not its
/// expected time, and would refuse rooms that finish with seconds to spare.)
/// A start is never cut below half the room's time, whatever the shape says.
std::chrono::steady_clock::time_point start_by(const scheduler_state& st, const prefill_room& rs) {
  using clock = std::chrono::steady_clock;
  const auto room = std::chrono::duration_cast<clock::duration>(st.cfg.timeouts.room);
  return rs.arrived + std::max(room - forward_of(st) - room / 10, room / 2);
}

std::string ms_of(std::chrono::steady_clock::duration d) {
  return std::to_string(std::chrono::duration_cast<std::chrono::milliseconds>(d).count());
}

/// Why the room must not start another chunk now, if it must not; `waited`
/// says what for.
caf::error expired(const scheduler_state& st, const prefill_room& rs,
                   std::chrono::steady_clock::time_point now,
                   const std::string& waited = "a forward") {
  if (now <= start_by(st, rs))
    return caf::none;
  return make_error(lserr::timeout, "room waited " + ms_of(now - rs.arrived) + " ms for " + waited +
                                        " (next token " + std::to_string(rs.next_token) +
                                        "); too late to start a forward of about " +
                                        ms_of(forward_of(st)) +
                                        " ms and its writes before decode's timeouts.room (" +
                                        ms_of(st.cfg.timeouts.room) + " ms) ends: not started");
}

/// A room's chunk of batch `batch_id` finished its transfer; its last byte
/// was delivery-complete at `delivered_ns` (0: nothing was sent).
void chunk_settled(self_ptr self, uint64_t batch_id, room_id room, caf::error status,
                   uint64_t bytes, int64_t delivered_ns = 0) {
  auto& st = self->state;
  auto b = st.batches.find(batch_id);
  if (b != st.batches.end()) {
    auto& bs = b->second;
    if (!status) {
      bs.last_settled_ns = steady_ns();
      bs.last_delivered_ns = std::max(bs.last_delivered_ns, delivered_ns);
    }
    if (--bs.unsettled == 0) {
      // A batch that sent nothing (no owned pages) ends when it settles.
      const auto end = bs.last_delivered_ns > 0 ? bs.last_delivered_ns : bs.last_settled_ns;
      if (st.cfg.trace && end > 0)
        st.cfg.trace->span("exposed tail, batch " + std::to_string(batch_id), "tail",
                           st.cfg.cp_rank, 1, bs.forward_end_ns, end);
      if (end > 0 && st.stats.tail_ns.size() < st.cfg.stats_batches_max) {
        st.stats.tail_ns.push_back(std::max<int64_t>(0, end - bs.forward_end_ns));
        st.stats.settled_tail_ns.push_back(
            std::max<int64_t>(0, bs.last_settled_ns - bs.forward_end_ns));
      }
      st.batches.erase(b);
    }
  }
  auto i = st.rooms.find(room);
  if (i == st.rooms.end())
    return;
  auto& rs = i->second;
  rs.busy = false;
  rs.bytes += bytes;
  st.stats.bytes += bytes;
  if (status || rs.next_token >= rs.info.prompt_tokens) {
    settle_room(self, room, std::move(status));
  } else {
    st.queue.push_back(room); // next chunk
    try_start_batch(self);
  }
}

/// Bulk path: `layers` of the chunk, sent after the forward (every layer for
/// a bulk room; for a per-layer room only the layers its context never
/// reported). The chunk settles with `base_bytes` (what the per-layer path
/// already sent) plus the bulk bytes; any failure fails it with its reason.
void send_bulk(self_ptr self, uint64_t batch_id, room_id room, peer_id peer,
               const transfer_plan& plan, const kv_pointers& ptrs,
               const std::vector<uint32_t>& layers, uint64_t base_bytes,
               int64_t base_delivered_ns) {
  auto& st = self->state;
  struct progress {
    size_t left = 0;
    uint64_t bytes = 0;
    int64_t delivered_ns = 0;
    caf::error status;
  };
  if (plan.empty() || layers.empty()) {
    chunk_settled(self, batch_id, room, caf::error{}, base_bytes, base_delivered_ns);
    return;
  }
  auto p = std::make_shared<progress>();
  p->left = layers.size();
  p->bytes = base_bytes;
  p->delivered_ns = base_delivered_ns;
  auto trace = st.cfg.trace;
  const auto rank = st.cfg.cp_rank;
  // The span of one layer, submit to completion, as the context records it.
  auto done = [self, batch_id, room, p, trace, rank](uint32_t layer, int64_t t0, caf::error status,
                                                     uint64_t bytes, int64_t delivered_ns) {
    if (trace)
      trace->span("layer " + std::to_string(layer) + (status ? " failed" : ""), "transfer", rank,
                  room, t0, steady_ns());
    if (status) {
      keep_failure(p->status, std::move(status));
    } else {
      p->bytes += bytes;
      p->delivered_ns = std::max(p->delivered_ns, delivered_ns);
    }
    if (--p->left == 0)
      chunk_settled(self, batch_id, room, p->status, p->bytes, p->delivered_ns);
  };
  // Every layer's blocks first: a room whose blocks cannot all be built
  // fails before any of its bulk writes goes out.
  std::vector<submit> msgs;
  msgs.reserve(layers.size());
  for (auto layer : layers) {
    msgs.push_back(submit{room, layer, peer, {}});
    if (auto err = append_layer_blocks(plan, ptrs, layer, msgs.back().blocks)) {
      chunk_settled(self, batch_id, room, std::move(err), base_bytes, base_delivered_ns);
      return;
    }
  }
  for (auto& msg : msgs) {
    const auto layer = msg.layer;
    auto t0 = trace ? steady_ns() : 0;
    // Outlasts the engine's own write deadline (timeouts.submit), whose
    // reason says more than a request timeout.
    self->request(st.transport, submit_request_wait(st.cfg.timeouts.submit), std::move(msg))
        .then(
            [done, layer, t0](const submit_done& res) {
              done(layer, t0, res.status, res.bytes, res.delivered_ns);
            },
            [done, layer, t0](caf::error& err) {
              // No answer from the transport: the writes may still land.
              done(layer, t0,
                   make_error(lserr::writes_in_flight, "bulk submit of layer " +
                                                           std::to_string(layer) + ": " +
                                                           describe(err)),
                   0, 0);
            });
  }
}

/// Every layer of the model, for a bulk room.
std::vector<uint32_t> all_layers(const kv_pointers& ptrs) {
  std::vector<uint32_t> out(ptrs.layers());
  for (uint32_t l = 0; l < out.size(); ++l)
    out[l] = l;
  return out;
}

/// A per-layer room's finish answer. If it failed only because some layers
/// never reported their end, those layers (and no other) go by the bulk path
/// (reconcile); any other answer settles the chunk as it is.
void on_finish_result(self_ptr self, uint64_t batch_id, room_id room,
                      std::pair<uint64_t, uint64_t> chunk, const finish_result& res) {
  auto& st = self->state;
  if (!is(res.status, lserr::missing_layer) || res.unreported_layers.empty()) {
    chunk_settled(self, batch_id, room, res.status, res.bytes, res.delivered_ns);
    return;
  }
  auto i = st.rooms.find(room);
  if (i == st.rooms.end()) {
    chunk_settled(self, batch_id, room, make_error(lserr::cancelled, "room gone"), 0);
    return;
  }
  std::string listed;
  for (auto layer : res.unreported_layers)
    listed += (listed.empty() ? "" : ", ") + std::to_string(layer);
  LS_WARN("rank {}: room {}: {} layers never reported, sent by the bulk path: [{}]", st.cfg.cp_rank,
          room, res.unreported_layers.size(), listed);
  auto& rs = i->second;
  auto plan = chunk_plan(st, rs, chunk.first, chunk.second);
  if (!plan) {
    chunk_settled(self, batch_id, room, plan.error(), res.bytes);
    return;
  }
  send_bulk(self, batch_id, room, rs.peer, *plan, pointers_of(st, rs), res.unreported_layers,
            res.bytes, res.delivered_ns);
}

/// The forward did not write batch `batch`'s KV (it failed, or ran past its
/// deadline): every room of it fails with `reason`. A per-layer room is
/// finished first, so it settles only after the writes its context posted
/// have ended (their outcome is moot), or with writes_in_flight; no room
/// goes by the bulk path.
void fail_batch(self_ptr self, uint64_t batch, const caf::error& reason,
                const std::vector<room_id>& rooms) {
  auto& st = self->state;
  for (auto room : rooms) {
    auto i = st.rooms.find(room);
    if (i == st.rooms.end() || !i->second.per_layer) {
      chunk_settled(self, batch, room, reason, 0);
      continue;
    }
    // The forward's reason, unless writes of the room may still land.
    auto settle = [self, batch, room, reason](uint64_t bytes, caf::error other) {
      auto status = reason;
      keep_failure(status, std::move(other));
      chunk_settled(self, batch, room, std::move(status), bytes);
    };
    self->request(st.manager, scheduler_finish_wait(st.cfg.timeouts.room), finish{room})
        .then([settle](const finish_result& res) { settle(res.bytes, res.status); },
              [settle](caf::error& err) {
                settle(0, make_error(lserr::writes_in_flight, "finish: " + describe(err)));
              });
  }
}

/// Batch `batch`'s forward has run timeouts.room: unless it ended, its rooms
/// fail and the rank stops taking requests until it ends (scheduler.hpp).
void on_forward_deadline(self_ptr self, uint64_t batch) {
  auto& st = self->state;
  if (st.running_batch != batch || st.overdue)
    return; // It ended in time.
  const auto ran = std::chrono::duration_cast<std::chrono::milliseconds>(
      std::chrono::steady_clock::now() - st.running_since);
  auto b = st.batches.find(batch);
  auto rooms = b != st.batches.end() ? b->second.rooms : std::vector<room_id>{};
  auto reason = make_error(
      lserr::timeout, "rank " + std::to_string(st.cfg.cp_rank) + ": the forward of batch " +
                          std::to_string(batch) + " has not ended " + std::to_string(ran.count()) +
                          " ms after it started (its deadline is timeouts.room; the device may "
                          "be stuck): no forward starts on this rank until it ends");
  LS_ERROR("{}; its {} rooms fail, and so does every request until then", describe(reason),
           rooms.size());
  st.overdue = scheduler_state::overdue_forward{batch, rooms, {}, reason};
  fail_batch(self, batch, reason, rooms);
  admit_page_waiters(self); // refuses the waiting rooms
  try_start_batch(self);    // refuses what is queued
}

/// The device can run no forward again: every room this rank holds fails
/// now, and the scheduler quits with the reason, so that the process exits
/// 1 (node/watch.hpp) and its supervisor restarts it. Rooms whose writes
/// may be out fail with writes_in_flight (per-layer rooms of any batch,
/// whose contexts are told to finish; bulk rooms of earlier batches, still
/// sending); the others (bulk rooms of the failed batch, which sends
/// after its forward; queued rooms; rooms waiting for pages) sent nothing
/// and fail with the reason.
void lose_device(self_ptr self, uint64_t failed_batch, const caf::error& reason) {
  auto& st = self->state;
  LS_ERROR("rank {}: {}; failing its {} rooms and stopping the scheduler", st.cfg.cp_rank,
           describe(reason), st.rooms.size());
  st.device_lost = reason;     // no waiting room takes the pages freed below
  std::vector<room_id> unsent; // bulk rooms of the failed batch
  if (auto b = st.batches.find(failed_batch); b != st.batches.end())
    unsent = b->second.rooms;
  std::vector<room_id> rooms;
  for (const auto& [room, rs] : st.rooms)
    rooms.push_back(room);
  for (auto room : rooms) {
    auto i = st.rooms.find(room);
    if (i == st.rooms.end())
      continue; // settled above, as a waiting room
    const auto& rs = i->second;
    const bool sent_nothing =
        !rs.per_layer && std::find(unsent.begin(), unsent.end(), room) != unsent.end();
    if (!rs.busy || sent_nothing) {
      settle_room(self, room, reason);
      continue;
    }
    if (rs.per_layer)
      caf::anon_send(st.manager, finish{room});
    settle_room(self, room,
                make_error(lserr::writes_in_flight,
                           "the rank stops, its writes may still land: " + describe(reason)));
  }
  self->quit(reason);
}

void on_batch_done(self_ptr self, const batch_done& msg) {
  auto& st = self->state;
  st.forward_busy = false;
  st.running_batch = 0;
  if (st.stats.forward_ns.size() < st.cfg.stats_batches_max)
    st.stats.forward_ns.push_back(msg.end_ns - msg.start_ns);
  const auto room_left = scheduler_stats::notify_samples_max - st.stats.notify_ns.size();
  st.stats.notify_ns.insert(st.stats.notify_ns.end(), msg.notify_ns.begin(),
                            msg.notify_ns.begin() + static_cast<std::ptrdiff_t>(
                                                        std::min(room_left, msg.notify_ns.size())));
  if (is(msg.status, lserr::device_lost))
    return lose_device(self, msg.batch, msg.status);
  if (st.overdue && st.overdue->batch == msg.batch) {
    // Its rooms failed at the deadline (those still settling release their
    // pages themselves); the device is done with the pages of the others.
    LS_WARN("rank {}: the overdue forward of batch {} ended after {} ms; {} pages back in the "
            "pool, forwards start again",
            st.cfg.cp_rank, msg.batch, (msg.end_ns - msg.start_ns) / 1'000'000,
            st.overdue->pages.size());
    st.pages->release(st.overdue->pages);
    st.overdue.reset();
    admit_page_waiters(self);
    try_start_batch(self);
    return;
  }
  auto b = st.batches.find(msg.batch);
  if (b == st.batches.end()) {
    // No path forgets a batch before its forward ends today; if one did,
    // the rooms queued behind this forward must still get theirs.
    try_start_batch(self);
    return;
  }
  b->second.forward_end_ns = msg.end_ns;
  auto rooms = b->second.rooms;
  auto chunks = b->second.chunks;
  if (msg.status) {
    LS_WARN("rank {}: batch {}: the forward failed, its {} rooms fail: {}", st.cfg.cp_rank,
            msg.batch, rooms.size(), describe(msg.status));
    fail_batch(self, msg.batch, make_error(lserr::event_failed, "forward: " + describe(msg.status)),
               rooms);
    try_start_batch(self);
    return;
  }
  for (size_t k = 0; k < rooms.size(); ++k) {
    auto room = rooms[k];
    auto i = st.rooms.find(room);
    if (i == st.rooms.end()) {
      chunk_settled(self, msg.batch, room, make_error(lserr::cancelled, "room gone"), 0);
      continue;
    }
    auto& rs = i->second;
    if (rs.per_layer) {
      self->request(st.manager, scheduler_finish_wait(st.cfg.timeouts.room), finish{room})
          .then([self, batch = msg.batch, room, chunk = chunks[k]](
                    const finish_result& res) { on_finish_result(self, batch, room, chunk, res); },
                [self, batch = msg.batch, room](caf::error& err) {
                  // No answer: the room's writes may still be in flight.
                  chunk_settled(self, batch, room,
                                make_error(lserr::writes_in_flight, "finish: " + describe(err)), 0);
                });
    } else {
      auto [first, last] = chunks[k];
      auto plan = chunk_plan(st, rs, first, last);
      auto ptrs = pointers_of(st, rs);
      if (!plan)
        chunk_settled(self, msg.batch, room, plan.error(), 0);
      else
        send_bulk(self, msg.batch, room, rs.peer, *plan, ptrs, all_layers(ptrs), 0, 0);
    }
  }
  try_start_batch(self);
}

/// The manager refused some rooms of batch `batch_id` (setup_result): each
/// leaves the batch and its forward, and fails with the manager's reason
/// (its context was never made, so nothing of it was sent). Returns whether
/// any room is left to run the forward for.
bool drop_refused_rooms(self_ptr self, uint64_t batch_id, forward_batch& fb,
                        const setup_result& answer) {
  auto& st = self->state;
  auto b = st.batches.find(batch_id);
  if (b == st.batches.end())
    return true; // cannot happen before its setup is answered: run the forward as before
  auto& bs = b->second;
  std::vector<room_refusal> dropped;
  for (const auto& r : answer.refused) {
    auto pos = std::find(bs.rooms.begin(), bs.rooms.end(), r.room);
    if (pos == bs.rooms.end())
      continue; // not a room of this batch: nothing to drop
    bs.chunks.erase(bs.chunks.begin() + (pos - bs.rooms.begin()));
    bs.rooms.erase(pos);
    --bs.unsettled;
    fb.items.erase(std::remove_if(fb.items.begin(), fb.items.end(),
                                  [&](const forward_item& item) { return item.room == r.room; }),
                   fb.items.end());
    dropped.push_back(r);
  }
  const bool rooms_left = !bs.rooms.empty();
  if (!rooms_left)
    st.batches.erase(b);
  for (auto& r : dropped) {
    if (auto i = st.rooms.find(r.room); i != st.rooms.end())
      i->second.busy = false;
    settle_room(self, r.room, std::move(r.reason));
  }
  return rooms_left;
}

void try_start_batch(self_ptr self) {
  auto& st = self->state;
  if (st.overdue) {
    // The forward thread is still in the overdue batch: nothing queued can start.
    while (!st.queue.empty()) {
      auto room = st.queue.front();
      st.queue.pop_front();
      auto i = st.rooms.find(room);
      if (i != st.rooms.end() && !i->second.busy)
        settle_room(self, room, st.overdue->reason);
    }
    return;
  }
  if (st.forward_busy || st.queue.empty())
    return;
  if (st.hold_rooms > 0) {
    if (st.queue.size() < st.hold_rooms)
      return;
    st.hold_rooms = 0; // one-shot: this batch takes the held requests
  }
  const auto ps = st.cfg.model.page_size;
  auto batch_id = st.next_batch++;
  batch_state bs;
  forward_batch fb;
  fb.id = batch_id;
  setup msg;
  while (!st.queue.empty() && bs.rooms.size() < st.cfg.transfer.max_batch) {
    auto room = st.queue.front();
    st.queue.pop_front();
    auto i = st.rooms.find(room);
    if (i == st.rooms.end() || i->second.busy)
      continue;
    auto& rs = i->second;
    if (auto late = expired(st, rs, std::chrono::steady_clock::now())) {
      settle_room(self, room, std::move(late));
      continue;
    }
    const auto total = rs.info.prompt_tokens;
    const auto chunk = st.cfg.transfer.chunk_tokens == 0 ? total : st.cfg.transfer.chunk_tokens;
    const auto first = rs.next_token;
    const auto last = std::min(total, first + chunk);
    rs.next_token = last;
    rs.busy = true;
    bs.rooms.push_back(room);
    bs.chunks.emplace_back(first, last);
    // The forward writes only this rank's tokens of the chunk.
    const auto own_first = std::max(first, rs.owned.begin * ps);
    const auto own_last = std::min(last, rs.owned.end * ps);
    if (own_first < own_last)
      fb.items.push_back(forward_item{room, rs.src_pages, own_first, own_last, total});
    if (rs.per_layer) {
      auto plan = chunk_plan(st, rs, first, last);
      if (!plan) {
        // Cannot happen for a checked transfer_info; fail the room, not the batch.
        bs.rooms.pop_back();
        bs.chunks.pop_back();
        if (!fb.items.empty() && fb.items.back().room == room)
          fb.items.pop_back();
        settle_room(self, room, plan.error());
        continue;
      }
      msg.batch.push_back(request_transfer{room, rs.peer, std::move(*plan), pointers_of(st, rs)});
    }
  }
  if (bs.rooms.empty())
    return;
  bs.unsettled = static_cast<uint32_t>(bs.rooms.size());
  st.batches.emplace(batch_id, std::move(bs));
  st.forward_busy = true;
  // The forward starts only once the manager holds the contexts, so no
  // layer_end can arrive before its contexts exist.
  self->request(st.manager, st.cfg.timeouts.room, std::move(msg))
      .then(
          [self, batch_id, fb = std::move(fb)](setup_result& answer) mutable {
            auto& s = self->state;
            if (!answer.refused.empty() && !drop_refused_rooms(self, batch_id, fb, answer)) {
              s.forward_busy = false; // every room was refused: no forward
              try_start_batch(self);
              return;
            }
            s.running_batch = batch_id;
            s.running_since = std::chrono::steady_clock::now();
            s.forward->run(std::move(fb));
            self->delayed_send(self, s.cfg.timeouts.room, forward_deadline_atom::value, batch_id);
          },
          [self, batch_id](caf::error& err) {
            auto& s = self->state;
            s.forward_busy = false;
            auto b = s.batches.find(batch_id);
            if (b == s.batches.end()) {
              try_start_batch(self); // the forward is free: queued rooms go on
              return;
            }
            auto rooms = b->second.rooms;
            s.batches.erase(b);
            // Unanswered, the manager may have set the per-layer rooms'
            // contexts up after all: finish them (no forward runs, so they
            // send nothing more and wind down), and decode must keep their
            // pages meanwhile. A bulk room has no context, and nothing of its
            // chunk was sent: it fails with a plain timeout. (A finish to a
            // room the late answer would have refused reaches the context of
            // the earlier request with that id, which has settled already:
            // it only ends that context sooner.) Any other error is the
            // manager gone, and its linked contexts with it, before the
            // forward: nothing was sent.
            const bool unanswered = err == caf::sec::request_timeout;
            for (auto room : rooms) {
              auto r = s.rooms.find(room);
              const bool per_layer = r != s.rooms.end() && r->second.per_layer;
              auto code = lserr::peer_lost;
              if (unanswered)
                code = per_layer ? lserr::writes_in_flight : lserr::timeout;
              if (unanswered && per_layer)
                caf::anon_send(s.manager, finish{room});
              settle_room(self, room, make_error(code, "setup: " + describe(err)));
            }
            try_start_batch(self);
          });
}

void on_transfer_info(self_ptr self, transfer_info& info,
                      caf::typed_response_promise<kv_ready> rp) {
  auto& st = self->state;
  auto room = info.room;
  auto refuse = [&](caf::error err) {
    LS_WARN("rank {}: room {} refused: {}", st.cfg.cp_rank, room, describe(err));
    ++st.stats.rooms_failed;
    rp.deliver(kv_ready{room, st.cfg.cp_rank, std::move(err), 0});
  };
  if (st.overdue)
    return refuse(st.overdue->reason); // no forward can start: take nothing
  if (!st.forward)
    return refuse(make_error(lserr::bad_input, "this rank has no forward (" + st.device->name() +
                                                   " device): " + describe(st.forward_error)));
  if (st.rooms.count(room) > 0)
    return refuse(make_error(lserr::duplicate_room,
                             "room " + std::to_string(room) + " is already on this rank"));
  if (auto err = check_transfer_info(info, shape_of(st)))
    return refuse(std::move(err));
  const auto total_pages = info.dst_pages.size();
  auto owned = owned_positions(total_pages, st.cfg.cp_size, st.cfg.cp_rank);
  if (!owned)
    return refuse(owned.error());
  if (auto never = never_fits(st, owned->size()))
    return refuse(std::move(never));
  if (st.page_wait.size() >= max_page_waiters)
    return refuse(
        make_error(lserr::bad_input, "prefill pool full: " + std::to_string(st.page_wait.size()) +
                                         " rooms already wait for pages on this rank"));
  prefill_room rs;
  rs.src_pages.assign(total_pages, 0);
  rs.owned = *owned;
  rs.per_layer =
      st.cfg.transfer.per_layer && info.prompt_tokens >= st.cfg.transfer.per_layer_min_tokens;
  rs.arrived = std::chrono::steady_clock::now();
  rs.promise = rp;
  rs.info = std::move(info);
  st.rooms.emplace(room, std::move(rs));
  const auto seq = ++st.next_wait_seq;
  // Not in the wait already: a room id this rank holds was refused above.
  [[maybe_unused]] const bool queued = st.page_wait.push_back(room, seq);
  admit_page_waiters(self);
  auto i = st.rooms.find(room);
  if (i == st.rooms.end() || !st.page_wait.contains(room))
    return; // it took its pages
  ++st.stats.rooms_waited_for_pages;
  LS_INFO("rank {}: room {} waits for {} src pages ({} free, {} rooms wait)", st.cfg.cp_rank, room,
          owned->size(), st.pages->free_pages(), st.page_wait.size());
  arm_page_wait_deadline(self, room, i->second, seq);
}

/// Wakes the scheduler at the room's start-by time, tagged with this wait's
/// sequence number: a timer of an earlier room with the same id is ignored.
void arm_page_wait_deadline(self_ptr self, room_id room, const prefill_room& rs, uint64_t seq) {
  const auto wait = start_by(self->state, rs) - std::chrono::steady_clock::now();
  self->delayed_send(self, std::max(wait, std::chrono::steady_clock::duration{0}),
                     page_wait_deadline_atom::value, room, seq);
}

/// Gives the waiting rooms, in arrival order, the pages they need while the
/// pool has them; each then connects to its decode peer and queues. Stops at
/// the first that does not fit. While a forward is overdue (or once the
/// device is lost) the rank refuses every request: so the waiting rooms fail
/// with its reason.
void admit_page_waiters(self_ptr self) {
  auto& st = self->state;
  if (st.admitting)
    return; // a room settled inside the loop below: the loop goes on
  st.admitting = true;
  while (!st.page_wait.empty()) {
    // Every room in the wait is a waiting room of st.rooms: settle_room takes
    // a room out of the wait, and an admitted one is popped below.
    const auto room = st.page_wait.front_key();
    auto& rs = st.rooms.at(room);
    auto refused = st.device_lost ? st.device_lost
                   : st.overdue   ? st.overdue->reason
                                  : never_fits(st, rs.owned.size());
    if (!refused)
      refused = expired(st, rs, std::chrono::steady_clock::now(), "prefill pages");
    if (refused) {
      settle_room(self, room, std::move(refused));
      continue;
    }
    auto pages = st.pages->allocate(rs.owned.size());
    if (!pages)
      break;
    st.page_wait.pop_front();
    for (uint64_t k = 0; k < pages->size(); ++k)
      rs.src_pages[rs.owned.begin + k] = (*pages)[k];
    rs.owned_pages = std::move(*pages);
    connect_room(self, room);
  }
  st.admitting = false;
}

/// A room with its pages: reach its decode peer, then queue it for a batch.
void connect_room(self_ptr self, room_id room) {
  auto& st = self->state;
  auto peer = st.rooms.at(room).info.decode;
  self->request(st.transport, st.cfg.timeouts.room, connect_peer{std::move(peer)})
      .then(
          [self, room](peer_id id) {
            auto i = self->state.rooms.find(room);
            if (i == self->state.rooms.end())
              return;
            i->second.peer = id;
            self->state.queue.push_back(room);
            try_start_batch(self);
          },
          [self, room](caf::error& err) {
            settle_room(self, room,
                        make_error(lserr::peer_lost, "connect to decode: " + describe(err)));
          });
}

/// Room `room` waited for pages until the last moment it could start.
void on_page_wait_deadline(self_ptr self, room_id room, uint64_t seq) {
  auto& st = self->state;
  auto i = st.rooms.find(room);
  const auto* waiting = st.page_wait.find(room);
  if (i == st.rooms.end() || waiting == nullptr || *waiting != seq)
    return; // it took its pages, or settled (and its id may be another room's now)
  auto why = expired(st, i->second, std::chrono::steady_clock::now(), "prefill pages");
  if (!why) // the timer came early: wait for the rest
    return arm_page_wait_deadline(self, room, i->second, seq);
  LS_WARN("rank {}: room {}: {} src pages never came free ({} free)", st.cfg.cp_rank, room,
          i->second.owned.size(), st.pages->free_pages());
  settle_room(self, room, std::move(why));
}

} // namespace

scheduler_full_actor::behavior_type
scheduler_impl(scheduler_full_actor::stateful_pointer<scheduler_state> self, scheduler_config cfg,
               prefill_device* device, transport_actor transport, const manager_actor& manager) {
  auto& init = self->state;
  init.cfg = cfg;
  init.device = device;
  init.src_k_ptrs = device->src_k_ptrs();
  init.src_v_ptrs = device->src_v_ptrs();
  init.pages = std::make_unique<page_allocator>(device->layout().pages(), cfg.cp_rank + 1, 0.0);
  init.transport = std::move(transport);
  init.manager = manager;
  // The forward thread reports back through a weak handle: it must not keep
  // the scheduler alive.
  caf::weak_actor_ptr weak_self{caf::actor_cast<caf::strong_actor_ptr>(self).get()};
  notifier_options notify_opts;
  notify_opts.poll = cfg.transfer.notify_poll;
  notify_opts.layers = cfg.model.layers;
  notify_opts.last_layer_spin = cfg.transfer.notify_spin;
  layer_notifier notify{manager, device->events(), notify_opts, device->notify_stream()};
  // batch_done goes through the notifier too: the manager must see every
  // layer_end of the batch before the finish that batch_done triggers.
  auto forward = device->make_forward(
      cfg.model.layer_compute, notify,
      [weak_self, notify](uint64_t batch, forward_timing timing) mutable {
        batch_done done{batch, steady_ns(timing.start), steady_ns(timing.end),
                        std::move(timing.notify_ns), std::move(timing.status)};
        notify.then([weak_self, done] {
          if (auto strong = weak_self.lock())
            caf::anon_send(caf::actor_cast<scheduler_full_actor>(strong), done);
        });
      });
  if (!forward) {
    LS_ERROR("rank {}: the {} device could not start its forward: {}", cfg.cp_rank, device->name(),
             describe(forward.error()));
    init.forward_error = forward.error();
  } else {
    init.forward = std::move(*forward);
    if (cfg.trace)
      init.forward->set_trace(cfg.trace, cfg.cp_rank);
    if (!cfg.skip_notify_layers.empty()) {
      LS_WARN("rank {}: TEST HOOK workload.skip_notify_layers: the forward never notifies {} "
              "layers; the bulk path must send them",
              cfg.cp_rank, cfg.skip_notify_layers.size());
      init.forward->set_skip_notify(cfg.skip_notify_layers);
    }
  }
  return {
      [self](transfer_info& info) -> caf::result<kv_ready> {
        auto rp = self->make_response_promise<kv_ready>();
        on_transfer_info(self, info, rp);
        return rp;
      },
      [self](const batch_done& msg) { on_batch_done(self, msg); },
      [self](forward_deadline_atom, uint64_t batch) { on_forward_deadline(self, batch); },
      [self](page_wait_deadline_atom, room_id room, uint64_t seq) {
        on_page_wait_deadline(self, room, seq);
      },
      [self](const hold_forward& msg) {
        auto& st = self->state;
        if (msg.rooms > 0) {
          st.hold_rooms = msg.rooms;
          st.hold_id = msg.id;
          // Every wait has a deadline: the hold lifts itself.
          self->delayed_send(self, msg.max_wait, hold_forward{0, msg.id, {}});
        } else if (msg.id == st.hold_id) {
          st.hold_rooms = 0;
        }
        try_start_batch(self);
      },
      [self](const stats_query&) {
        auto& st = self->state;
        auto out = st.stats;
        out.rooms_open = st.rooms.size();
        out.pages_free = st.pages->free_pages();
        out.pages_total = st.device->layout().pages();
        return out;
      },
  };
}

} // namespace layerstream
