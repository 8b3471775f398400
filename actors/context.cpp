#include "actors/context.hpp"

#include <caf/send.hpp>

#include "common/log.hpp"

namespace layerstream {

namespace {

using self_ptr = context_actor::stateful_pointer<context_state>;

/// Records the first failure; later ones only log.
void fail(self_ptr self, caf::error err) {
  auto& st = self->state;
  if (!st.failure) {
    LS_WARN("room {}: failed: {}", st.req.room, describe(err));
    st.failure = std::move(err);
  } else {
    LS_DEBUG("room {}: further failure ignored: {}", st.req.room, describe(err));
  }
}

/// The verdict once nothing is outstanding: success only if every layer
/// with owned pages was sent. If the only problem is layers that never got a
/// layer_end, the answer is missing_layer and lists exactly those layers, so
/// that the scheduler can send them by the bulk path; after any other
/// failure the list stays empty (fail closed).
finish_result make_result(self_ptr self) {
  auto& st = self->state;
  finish_result res{st.req.room, st.failure, st.layers_sent, st.bytes};
  if (res.status || st.req.plan.empty())
    return res; // Failed, or no owned pages: a layer never reported has nothing to send.
  std::string listed;
  for (uint32_t i = 0; i < st.layers.size(); ++i) {
    if (st.layers[i] == layer_phase::idle) {
      res.unreported_layers.push_back(i);
      listed += (listed.empty() ? "" : ", ") + std::to_string(i);
    } else if (st.layers[i] != layer_phase::sent) {
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

/// Answers every waiting finish once nothing is outstanding.
void try_answer(self_ptr self) {
  auto& st = self->state;
  if (st.finish_waiters.empty() || st.outstanding > 0)
    return;
  if (!st.result)
    st.result = make_result(self);
  for (auto& rp : st.finish_waiters)
    rp.deliver(*st.result);
  st.finish_waiters.clear();
}

void on_submit_done(self_ptr self, uint32_t layer, caf::error status, uint64_t bytes) {
  auto& st = self->state;
  if (st.layers[layer] != layer_phase::submitted)
    return; // Already settled by the finish deadline.
  if (st.cfg.trace)
    st.cfg.trace->span("layer " + std::to_string(layer) + (status ? " failed" : ""), "transfer",
                       st.cfg.rank, st.req.room, st.submitted_ns[layer], steady_ns());
  --st.outstanding;
  if (status) {
    st.layers[layer] = layer_phase::failed;
    fail(self, std::move(status));
  } else {
    st.layers[layer] = layer_phase::sent;
    ++st.layers_sent;
    st.bytes += bytes;
  }
  try_answer(self);
}

void on_event_ready(self_ptr self, const event_ready& msg) {
  auto& st = self->state;
  if (msg.layer >= st.layers.size() || st.layers[msg.layer] != layer_phase::waiting_event)
    return; // Duplicate or late (after the finish deadline): nothing to do.
  auto layer = msg.layer;
  --st.outstanding;
  if (st.cfg.trace) {
    st.cfg.trace->instant("event_ready " + std::to_string(layer), "event", st.cfg.rank, st.req.room,
                          steady_ns());
    st.submitted_ns[layer] = steady_ns();
  }
  if (msg.status) {
    st.layers[layer] = layer_phase::failed;
    fail(self, msg.status);
  } else if (st.failure) {
    st.layers[layer] = layer_phase::cancelled;
  } else {
    submit req{st.req.room, layer, st.req.peer, {}};
    if (auto err = append_layer_blocks(st.req.plan, st.req.ptrs, layer, req.blocks)) {
      st.layers[layer] = layer_phase::failed;
      fail(self, std::move(err));
    } else {
      st.layers[layer] = layer_phase::submitted;
      ++st.outstanding;
      self->request(st.transport, st.cfg.submit_timeout, std::move(req))
          .then(
              [self, layer](const submit_done& done) {
                on_submit_done(self, layer, done.status, done.bytes);
              },
              [self, layer](caf::error& request_err) {
                on_submit_done(self, layer,
                               make_error(lserr::transfer_failed, "submit of layer " +
                                                                      std::to_string(layer) + ": " +
                                                                      describe(request_err)),
                               0);
              });
    }
  }
  try_answer(self);
}

} // namespace

context_actor::behavior_type context_impl(context_actor::stateful_pointer<context_state> self,
                                          request_transfer req, submit_sink transport,
                                          context_config cfg) {
  auto& init = self->state;
  init.layers.assign(req.ptrs.layers(), layer_phase::idle);
  init.req = std::move(req);
  init.transport = std::move(transport);
  init.cfg = cfg;
  if (cfg.trace)
    init.submitted_ns.assign(init.layers.size(), 0);
  if (auto err = validate(init.req.ptrs))
    fail(self, std::move(err));
  return {
      [self](const layer_end& msg) {
        auto& st = self->state;
        if (msg.layer >= st.layers.size()) {
          fail(self,
               make_error(lserr::bad_layer, "layer_end for layer " + std::to_string(msg.layer) +
                                                " of " + std::to_string(st.layers.size())));
          return;
        }
        auto& phase = st.layers[msg.layer];
        if (phase != layer_phase::idle)
          return; // Idempotent: a layer is handled once.
        if (st.req.plan.empty()) {
          phase = layer_phase::empty;
          return;
        }
        if (st.failure) {
          phase = layer_phase::cancelled;
          return;
        }
        if (!msg.event) {
          phase = layer_phase::failed;
          fail(self,
               make_error(lserr::event_failed,
                          "layer_end for layer " + std::to_string(msg.layer) + " has no event"));
          return;
        }
        phase = layer_phase::waiting_event;
        ++st.outstanding;
        // The callback may run on any thread; it only sends a message.
        auto me = caf::actor_cast<context_actor>(self);
        auto layer = msg.layer;
        msg.event->on_complete([me, layer](const caf::error& status) {
          caf::anon_send(me, event_ready{layer, status});
        });
      },
      [self](const event_ready& msg) { on_event_ready(self, msg); },
      [self](const finish&) -> caf::result<finish_result> {
        auto& st = self->state;
        if (st.result)
          return *st.result;
        auto rp = self->make_response_promise<finish_result>();
        st.finish_waiters.push_back(rp);
        if (st.outstanding > 0 && !st.deadline_armed) {
          st.deadline_armed = true;
          self->delayed_send(self, st.cfg.finish_timeout, finish_deadline{});
        }
        try_answer(self);
        return rp;
      },
      [self](const finish_deadline&) {
        auto& st = self->state;
        if (st.outstanding == 0)
          return;
        std::string stuck;
        for (size_t i = 0; i < st.layers.size(); ++i) {
          auto& phase = st.layers[i];
          if (phase == layer_phase::waiting_event || phase == layer_phase::submitted) {
            stuck += (stuck.empty() ? "" : ", ") + std::to_string(i) +
                     (phase == layer_phase::waiting_event ? " (event)" : " (submit)");
            phase = layer_phase::failed;
          }
        }
        st.outstanding = 0;
        fail(self, make_error(lserr::timeout,
                              "layers still outstanding at the finish deadline: " + stuck));
        try_answer(self);
      },
  };
}

} // namespace layerstream
