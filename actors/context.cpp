#include "actors/context.hpp"

#include <algorithm>
#include <iterator>

#include <caf/send.hpp>

#include "common/log.hpp"

namespace layerstream {

namespace {

using self_ptr = context_actor::stateful_pointer<context_state>;

/// Records the room's first failure (or a writes_in_flight one, which decode
/// must see); later ones only log.
void fail(room_pipeline& rp, caf::error err) {
  auto text = describe(err);
  if (keep_failure(rp.failure, std::move(err)))
    LS_WARN("room {}: failed: {}", rp.req.room, describe(rp.failure));
  else
    LS_DEBUG("room {}: further failure ignored: {}", rp.req.room, text);
}

/// The verdict once nothing is outstanding: success only if every layer
/// with owned pages was sent. If the only problem is layers that never got a
/// layer_end, the answer is missing_layer and lists exactly those layers, so
/// that the scheduler can send them by the bulk path; after any other
/// failure the list stays empty (fail closed).
finish_result make_result(const room_pipeline& rp) {
  finish_result res{rp.req.room, rp.failure, rp.layers_sent, rp.bytes};
  res.delivered_ns = rp.delivered_ns;
  if (res.status || rp.req.plan.empty())
    return res; // Failed, or no owned pages: a layer never reported has nothing to send.
  std::string listed;
  for (uint32_t i = 0; i < rp.layers.size(); ++i) {
    if (rp.layers[i] == layer_phase::idle) {
      res.unreported_layers.push_back(i);
      listed += (listed.empty() ? "" : ", ") + std::to_string(i);
    } else if (rp.layers[i] != layer_phase::sent) {
      // Cannot happen with nothing outstanding and no failure; fail closed, no rescue.
      res.unreported_layers.clear();
      res.status = make_error(lserr::missing_layer,
                              "layer " + std::to_string(i) + " neither sent nor reported");
      return res;
    }
  }
  if (!res.unreported_layers.empty())
    res.status =
        make_error(lserr::missing_layer, std::to_string(res.unreported_layers.size()) +
                                             " layers never reported their end: [" + listed + "]");
  return res;
}

/// Answers every waiting finish of the room once nothing is outstanding.
void try_answer(room_pipeline& rp) {
  if (rp.finish_waiters.empty() || rp.outstanding > 0)
    return;
  if (!rp.result)
    rp.result = make_result(rp);
  for (auto& waiter : rp.finish_waiters)
    waiter.deliver(*rp.result);
  rp.finish_waiters.clear();
}

void on_submit_done(self_ptr self, size_t idx, uint32_t layer, caf::error status, uint64_t bytes,
                    int64_t delivered_ns = 0) {
  auto& st = self->state;
  auto& rp = st.rooms[idx];
  if (layer >= rp.layers.size() || rp.layers[layer] != layer_phase::submitted)
    return; // Already settled by the finish deadline.
  if (st.cfg.trace)
    st.cfg.trace->span("layer " + std::to_string(layer) + (status ? " failed" : ""), "transfer",
                       st.cfg.rank, rp.req.room, rp.submitted_ns[layer], steady_ns());
  --rp.outstanding;
  if (status) {
    rp.layers[layer] = layer_phase::failed;
    fail(rp, std::move(status));
  } else {
    rp.layers[layer] = layer_phase::sent;
    ++rp.layers_sent;
    rp.bytes += bytes;
    rp.delivered_ns = std::max(rp.delivered_ns, delivered_ns);
  }
  try_answer(rp);
}

/// One decode peer's share of a layer: the rooms and their blocks.
struct peer_group {
  std::vector<size_t> rooms; // indices into context_state::rooms
  submit_batch msg;          // its peer and layer say where and what
};

/// Sends one group: a plain submit for a single room, else one submit_batch.
void send_group(self_ptr self, uint32_t layer, peer_group& g) {
  auto& st = self->state;
  // No answer from the transport: the writes may still be queued or posted.
  auto transfer_error = [layer](const caf::error& request_err) {
    return make_error(lserr::writes_in_flight,
                      "submit of layer " + std::to_string(layer) + ": " + describe(request_err));
  };
  if (g.rooms.size() == 1) {
    auto idx = g.rooms.front();
    submit one{g.msg.rooms.front().room, layer, g.msg.peer, std::move(g.msg.blocks)};
    self->request(st.transport, st.cfg.submit_timeout, std::move(one))
        .then(
            [self, idx, layer](const submit_done& done) {
              handler_clock busy{self->state.cfg.handler_cpu};
              on_submit_done(self, idx, layer, done.status, done.bytes, done.delivered_ns);
            },
            [self, idx, layer, transfer_error](caf::error& err) {
              on_submit_done(self, idx, layer, transfer_error(err), 0);
            });
    return;
  }
  // Both handlers need the room indices: shared, not copied.
  auto rooms = std::make_shared<const std::vector<size_t>>(std::move(g.rooms));
  self->request(st.transport, st.cfg.submit_timeout, std::move(g.msg))
      .then(
          [self, rooms, layer](const submit_batch_done& done) {
            handler_clock busy{self->state.cfg.handler_cpu};
            // Answers come in request order; a short answer leaves no room
            // outstanding forever: the missing ones fail.
            for (size_t k = 0; k < rooms->size(); ++k) {
              const auto idx = (*rooms)[k];
              const auto room = self->state.rooms[idx].req.room;
              if (k < done.rooms.size() && done.rooms[k].room == room)
                on_submit_done(self, idx, layer, done.rooms[k].status, done.rooms[k].bytes,
                               done.rooms[k].delivered_ns);
              else
                // Its job's fate is unknown: its writes may still land.
                on_submit_done(self, idx, layer,
                               make_error(lserr::writes_in_flight,
                                          "submit of layer " + std::to_string(layer) +
                                              ": the transport's answer has no entry for room " +
                                              std::to_string(room)),
                               0);
            }
          },
          [self, rooms, layer, transfer_error](caf::error& err) {
            for (auto idx : *rooms)
              on_submit_done(self, idx, layer, transfer_error(err), 0);
          });
}

void on_event_ready(self_ptr self, const event_ready& msg) {
  auto& st = self->state;
  const auto layer = msg.layer;
  std::vector<peer_group> groups; // almost always one: a batch goes to one decode
  for (size_t idx = 0; idx < st.rooms.size(); ++idx) {
    auto& rp = st.rooms[idx];
    if (layer >= rp.layers.size() || rp.layers[layer] != layer_phase::waiting_event)
      continue; // Duplicate or late (after the finish deadline): nothing to do.
    --rp.outstanding;
    if (st.cfg.trace) {
      st.cfg.trace->instant("event_ready " + std::to_string(layer), "event", st.cfg.rank,
                            rp.req.room, steady_ns());
      rp.submitted_ns[layer] = steady_ns();
    }
    if (msg.status) {
      rp.layers[layer] = layer_phase::failed;
      fail(rp, msg.status);
    } else if (rp.failure) {
      rp.layers[layer] = layer_phase::cancelled;
    } else {
      auto g = std::find_if(groups.begin(), groups.end(),
                            [&](const peer_group& x) { return x.msg.peer == rp.req.peer; });
      if (g == groups.end()) {
        groups.push_back(peer_group{{}, submit_batch{layer, rp.req.peer, {}, {}}});
        g = std::prev(groups.end());
        g->rooms.reserve(st.rooms.size() - idx);
        g->msg.rooms.reserve(st.rooms.size() - idx);
        g->msg.blocks.reserve(st.blocks_per_layer_hint);
      }
      // Straight into the batch's flat list: no allocation per room.
      const size_t before = g->msg.blocks.size();
      if (auto err = append_layer_blocks(rp.req.plan, *rp.ptrs, layer, g->msg.blocks)) {
        rp.layers[layer] = layer_phase::failed; // nothing was appended
        fail(rp, std::move(err));
      } else {
        rp.layers[layer] = layer_phase::submitted;
        ++rp.outstanding;
        g->rooms.push_back(idx);
        g->msg.rooms.push_back(room_blocks{rp.req.room, g->msg.blocks.size() - before});
      }
    }
    try_answer(rp);
  }
  for (auto& g : groups)
    if (!g.rooms.empty())
      send_group(self, layer, g);
}

void on_layer_end(self_ptr self, const layer_end& msg) {
  auto& st = self->state;
  if (st.batch_over)
    return; // A later batch's layer: it has contexts of its own.
  bool wait = false;
  for (auto& rp : st.rooms) {
    if (msg.layer >= rp.layers.size()) {
      fail(rp, make_error(lserr::bad_layer, "layer_end for layer " + std::to_string(msg.layer) +
                                                " of " + std::to_string(rp.layers.size())));
      continue;
    }
    auto& phase = rp.layers[msg.layer];
    if (phase != layer_phase::idle)
      continue; // Idempotent: a layer is handled once.
    if (rp.req.plan.empty()) {
      phase = layer_phase::empty;
    } else if (rp.failure) {
      phase = layer_phase::cancelled;
    } else if (!msg.event) {
      phase = layer_phase::failed;
      fail(rp, make_error(lserr::event_failed,
                          "layer_end for layer " + std::to_string(msg.layer) + " has no event"));
    } else {
      phase = layer_phase::waiting_event;
      ++rp.outstanding;
      wait = true;
    }
  }
  if (!wait)
    return;
  // One wait for the whole batch. The callback may run on any thread; it
  // only sends a message.
  auto me = caf::actor_cast<context_actor>(self);
  auto layer = msg.layer;
  msg.event->on_complete([me, layer](const caf::error& status) {
    caf::anon_send(me, event_ready{layer, status});
  });
}

caf::result<finish_result> on_finish(self_ptr self, const finish& msg) {
  auto& st = self->state;
  st.batch_over = true;
  auto i = st.index_of.find(msg.room);
  if (i == st.index_of.end())
    return finish_result{
        msg.room,
        make_error(lserr::unknown_room,
                   "finish: room " + std::to_string(msg.room) + " is not in this context's batch"),
        0, 0};
  auto& rp = st.rooms[i->second];
  if (rp.result)
    return *rp.result;
  auto promise = self->make_response_promise<finish_result>();
  rp.finish_waiters.push_back(promise);
  if (rp.outstanding > 0 && !rp.deadline_armed) {
    rp.deadline_armed = true;
    self->delayed_send(self, st.cfg.finish_timeout, finish_deadline{msg.room});
  }
  try_answer(rp);
  return promise;
}

void on_finish_deadline(self_ptr self, const finish_deadline& msg) {
  auto& st = self->state;
  auto i = st.index_of.find(msg.room);
  if (i == st.index_of.end())
    return;
  auto& rp = st.rooms[i->second];
  if (rp.outstanding == 0)
    return;
  std::string stuck;
  bool submitted = false;
  for (size_t l = 0; l < rp.layers.size(); ++l) {
    auto& phase = rp.layers[l];
    if (phase == layer_phase::waiting_event || phase == layer_phase::submitted) {
      submitted = submitted || phase == layer_phase::submitted;
      stuck += (stuck.empty() ? "" : ", ") + std::to_string(l) +
               (phase == layer_phase::waiting_event ? " (event)" : " (submit)");
      phase = layer_phase::failed;
    }
  }
  rp.outstanding = 0;
  // A submitted layer's writes are still with the transport: they may land.
  fail(rp, make_error(submitted ? lserr::writes_in_flight : lserr::timeout,
                      "layers still outstanding at the finish deadline: " + stuck));
  try_answer(rp);
}

/// The batch's copy of `ptrs`, made on first sight; `ptrs` is emptied (its
/// lists now live in the batch's copy). Linear: a batch has a handful of
/// distinct sets (one per decode peer), and this runs once per room.
const kv_pointers* shared_pointer_set(std::vector<std::unique_ptr<const kv_pointers>>& sets,
                                      kv_pointers& ptrs) {
  auto same = std::find_if(sets.begin(), sets.end(), [&](const auto& p) { return *p == ptrs; });
  if (same != sets.end()) {
    ptrs = kv_pointers{};
    return same->get();
  }
  sets.push_back(std::make_unique<const kv_pointers>(std::move(ptrs)));
  ptrs = kv_pointers{};
  return sets.back().get();
}

} // namespace

context_actor::behavior_type context_impl(context_actor::stateful_pointer<context_state> self,
                                          std::vector<request_transfer> batch,
                                          submit_sink transport, const context_config& cfg) {
  auto& init = self->state;
  init.transport = std::move(transport);
  init.cfg = cfg;
  init.rooms.reserve(batch.size());
  uint64_t max_layers = 0;
  for (auto& req : batch)
    max_layers = std::max(max_layers, req.ptrs.layers());
  init.phases.assign(max_layers * batch.size(), layer_phase::idle);
  for (auto& req : batch) {
    room_pipeline rp;
    rp.layers = phase_column{init.phases.data() + init.rooms.size(), batch.size(),
                             static_cast<size_t>(req.ptrs.layers())};
    rp.req = std::move(req);
    if (cfg.trace)
      rp.submitted_ns.assign(rp.layers.size(), 0);
    if (auto err = validate(rp.req.ptrs))
      fail(rp, std::move(err));
    rp.ptrs = shared_pointer_set(init.pointer_sets, rp.req.ptrs);
    init.blocks_per_layer_hint += rp.req.plan.runs.size() * (rp.ptrs->mla() ? 1 : 2);
    init.index_of.emplace(rp.req.room, init.rooms.size());
    init.rooms.push_back(std::move(rp));
  }
  return {
      [self](const layer_end& msg) {
        handler_clock busy{self->state.cfg.handler_cpu};
        on_layer_end(self, msg);
      },
      [self](const event_ready& msg) {
        handler_clock busy{self->state.cfg.handler_cpu};
        on_event_ready(self, msg);
      },
      [self](const finish& msg) { return on_finish(self, msg); },
      [self](const finish_deadline& msg) { on_finish_deadline(self, msg); },
  };
}

} // namespace layerstream
