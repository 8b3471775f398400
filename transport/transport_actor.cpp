#include "transport/transport_actor.hpp"

#include <mutex>
#include <unordered_map>
#include <utility>

#include <caf/actor_cast.hpp>
#include <caf/send.hpp>
#include <caf/stateful_actor.hpp>
#include <caf/typed_event_based_actor.hpp>
#include <caf/weak_intrusive_ptr.hpp>

#include "common/log.hpp"

namespace layerstream {

namespace {

/// worker -> transport actor (process-local): one job finished.
struct job_done {
  uint64_t id = 0;
  caf::error status;
  uint64_t bytes = 0;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, job_done& x) {
  return f(caf::meta::type_name("job_done"), x.id, x.status, x.bytes);
}

/// The actor's full interface: the public protocol plus its worker's reports.
using transport_impl = transport_actor::extend<caf::reacts_to<job_done>>;

/// Where the worker's callback sends: set once the actor exists. A weak
/// pointer, so the engine (owned by the actor) does not keep the actor alive.
struct completion_route {
  std::mutex mutex;
  caf::weak_actor_ptr target;
};

struct pending_submit {
  room_id room = 0;
  uint32_t layer = 0;
  caf::typed_response_promise<submit_done> promise;
};

struct transport_state {
  const char* name = "transport";
  std::unique_ptr<fabric::engine> engine;
  network_scope scope = network_scope::test;
  std::unordered_map<uint64_t, pending_submit> pending;
  uint64_t next_job = 1;

  ~transport_state() {
    if (engine)
      engine->stop(); // its callbacks now only reach a dead mailbox
    engine.reset();
    for (auto& [id, p] : pending)
      p.promise.deliver(submit_done{
          p.room, p.layer,
          make_error(lserr::cancelled, "transport actor exited with the submit in flight"), 0});
    pending.clear();
  }
};

/// Moves the engine into the actor's state at init (spawn arguments are
/// copied around; the engine has one owner).
struct engine_handoff {
  std::unique_ptr<fabric::engine> engine;
  network_scope scope = network_scope::test;
};

transport_impl::behavior_type transport_fun(transport_impl::stateful_pointer<transport_state> self,
                                            std::shared_ptr<engine_handoff> handoff) {
  self->state.engine = std::move(handoff->engine);
  self->state.scope = handoff->scope;
  return {
      [=](connect_peer& msg) -> caf::result<peer_id> {
        auto& eng = *self->state.engine;
        if (!msg.peer.provider.empty() && msg.peer.provider != eng.provider())
          return make_error(lserr::bad_input, "connect_peer: peer uses provider \"" +
                                                  msg.peer.provider + "\", this transport \"" +
                                                  eng.provider() + "\"");
        // A peer's address comes from the control plane: checked like any
        // other connection before the first write goes there.
        if (auto err = check_fabric_address(msg.peer.address, self->state.scope))
          return err;
        std::vector<fabric::remote_range> regions;
        regions.reserve(msg.peer.regions.size());
        for (const auto& r : msg.peer.regions)
          regions.push_back(fabric::remote_range{r.base, r.length, r.key});
        auto idx = eng.add_peer(msg.peer.address, std::move(regions));
        if (!idx)
          return std::move(idx.error());
        return peer_id{*idx};
      },
      [=](submit& msg) -> caf::result<submit_done> {
        auto& st = self->state;
        const uint64_t id = st.next_job++;
        if (auto err = st.engine->submit(id, msg.peer, msg.blocks))
          return submit_done{msg.room, msg.layer, std::move(err), 0};
        auto rp = self->make_response_promise<submit_done>();
        st.pending.emplace(id, pending_submit{msg.room, msg.layer, rp});
        return rp;
      },
      [=](job_done& done) {
        auto& st = self->state;
        auto i = st.pending.find(done.id);
        if (i == st.pending.end())
          return;
        auto& p = i->second;
        p.promise.deliver(submit_done{p.room, p.layer, std::move(done.status), done.bytes});
        st.pending.erase(i);
      },
  };
}

} // namespace

caf::expected<transport_actor> spawn_transport(caf::actor_system& sys, transport_config cfg) {
  auto ep = fabric::endpoint::open(cfg.fabric);
  if (!ep)
    return std::move(ep.error());
  for (const auto& span : cfg.regions) {
    auto reg = (*ep)->register_memory(span.base, span.length, FI_WRITE);
    if (!reg)
      return std::move(reg.error());
  }
  auto route = std::make_shared<completion_route>();
  auto on_done = [route](fabric::job_result r) {
    caf::strong_actor_ptr target;
    {
      std::lock_guard<std::mutex> guard{route->mutex};
      target = caf::actor_cast<caf::strong_actor_ptr>(route->target);
    }
    if (target)
      caf::anon_send(caf::actor_cast<transport_impl>(target),
                     job_done{r.id, std::move(r.status), r.bytes});
  };
  auto eng = fabric::engine::start(std::move(*ep), fabric::engine::role::initiator,
                                   std::move(on_done), cfg.write_timeout, cfg.faults);
  if (!eng)
    return std::move(eng.error());
  auto handoff = std::make_shared<engine_handoff>();
  handoff->engine = std::move(*eng);
  handoff->scope = cfg.scope;
  auto hdl = sys.spawn(transport_fun, handoff);
  {
    std::lock_guard<std::mutex> guard{route->mutex};
    route->target = caf::actor_cast<caf::weak_actor_ptr>(hdl);
  }
  return caf::actor_cast<transport_actor>(hdl);
}

caf::expected<std::unique_ptr<fabric_target>> fabric_target::open(const config& cfg) {
  auto ep = fabric::endpoint::open(cfg.fabric);
  if (!ep)
    return std::move(ep.error());
  std::unique_ptr<fabric_target> self{new fabric_target};
  self->peer_.provider = (*ep)->provider();
  self->peer_.address = (*ep)->name();
  for (const auto& span : cfg.regions) {
    auto reg = (*ep)->register_memory(span.base, span.length, FI_REMOTE_WRITE);
    if (!reg)
      return std::move(reg.error());
    self->peer_.regions.push_back(remote_region{reg->base, reg->length, reg->key});
  }
  auto eng = fabric::engine::start(std::move(*ep), fabric::engine::role::target, nullptr,
                                   std::chrono::milliseconds{0});
  if (!eng)
    return std::move(eng.error());
  self->engine_ = std::move(*eng);
  return self;
}

} // namespace layerstream
