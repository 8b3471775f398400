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

/// worker -> transport actor (process-local): finished jobs wait in the
/// completion route; this doorbell says there are some.
struct jobs_ready {};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, jobs_ready&) {
  return f(caf::meta::type_name("jobs_ready"));
}

/// The actor's full interface: the public protocol plus its worker's doorbell.
using transport_impl = transport_actor::extend<caf::reacts_to<jobs_ready>>;

/// Where the worker's completions go. A weak pointer to the actor, so the
/// engine (owned by the actor) does not keep the actor alive. Completions
/// are queued here and the actor is rung once per burst, not once per job:
/// a layer of a 256-room batch finishes 256 jobs at about the same time, and
/// one message from a foreign thread costs a CAF worker wake-up.
struct completion_route {
  std::mutex mutex;
  caf::weak_actor_ptr target;
  std::vector<fabric::job_result> ready;
  bool rung = false; // a jobs_ready is on its way and has not drained yet

  void push(fabric::job_result r) {
    caf::strong_actor_ptr to;
    {
      std::lock_guard<std::mutex> guard{mutex};
      ready.push_back(std::move(r));
      if (rung)
        return;
      rung = true;
      to = caf::actor_cast<caf::strong_actor_ptr>(target);
    }
    if (to) {
      caf::anon_send(caf::actor_cast<transport_impl>(to), jobs_ready{});
    } else {
      // No actor (yet, or any more): the next push rings again; the
      // actor's state drains what is left when it ends.
      std::lock_guard<std::mutex> guard{mutex};
      rung = false;
    }
  }

  std::vector<fabric::job_result> take() {
    std::vector<fabric::job_result> out;
    std::lock_guard<std::mutex> guard{mutex};
    out.swap(ready);
    rung = false;
    return out;
  }
};

struct pending_submit {
  room_id room = 0;
  uint32_t layer = 0;
  caf::typed_response_promise<submit_done> promise;
};

/// A submit_batch waiting for its rooms' jobs.
struct pending_batch {
  submit_batch_done answer;
  size_t outstanding = 0;
  caf::typed_response_promise<submit_batch_done> promise;
};

/// Where a batched job's result goes: slot `index` of batch `batch` (a
/// plain submit's job is in `pending` instead).
struct job_route {
  uint64_t batch = 0;
  size_t index = 0;
};

struct transport_state;
void settle_job(transport_state& st, fabric::job_result& done);

struct transport_state {
  const char* name = "transport";
  std::unique_ptr<fabric::engine> engine;
  std::shared_ptr<completion_route> route;
  network_scope scope = network_scope::test;
  std::unordered_map<uint64_t, pending_submit> pending;
  std::unordered_map<uint64_t, pending_batch> batches;
  std::unordered_map<uint64_t, job_route> batch_jobs;
  uint64_t next_job = 1;
  uint64_t next_batch = 1;

  ~transport_state() {
    if (engine)
      engine->stop(); // every job is finished now, its result in the route
    engine.reset();
    if (route)
      for (auto& r : route->take())
        settle_job(*this, r);
    for (auto& [id, p] : pending)
      p.promise.deliver(submit_done{
          p.room, p.layer,
          make_error(lserr::cancelled, "transport actor exited with the submit in flight"), 0});
    pending.clear();
    for (auto& [id, slot] : batch_jobs)
      if (auto b = batches.find(slot.batch); b != batches.end())
        b->second.answer.rooms[slot.index].status =
            make_error(lserr::cancelled, "transport actor exited with the submit in flight");
    batch_jobs.clear();
    for (auto& [id, b] : batches)
      b.promise.deliver(std::move(b.answer));
    batches.clear();
  }
};

/// Moves the engine into the actor's state at init (spawn arguments are
/// copied around; the engine has one owner).
struct engine_handoff {
  std::unique_ptr<fabric::engine> engine;
  std::shared_ptr<completion_route> route;
  network_scope scope = network_scope::test;
};

/// One finished job: its plain submit is answered, or its batch slot filled
/// (and the batch answered once its last job is in).
void settle_job(transport_state& st, fabric::job_result& done) {
  if (auto j = st.batch_jobs.find(done.id); j != st.batch_jobs.end()) {
    auto route = j->second;
    st.batch_jobs.erase(j);
    auto b = st.batches.find(route.batch);
    if (b == st.batches.end())
      return;
    auto& slot = b->second.answer.rooms[route.index];
    slot.status = std::move(done.status);
    slot.bytes = done.bytes;
    slot.delivered_ns = done.delivered_ns;
    if (--b->second.outstanding == 0) {
      b->second.promise.deliver(std::move(b->second.answer));
      st.batches.erase(b);
    }
    return;
  }
  auto i = st.pending.find(done.id);
  if (i == st.pending.end())
    return;
  auto& p = i->second;
  p.promise.deliver(
      submit_done{p.room, p.layer, std::move(done.status), done.bytes, done.delivered_ns});
  st.pending.erase(i);
}

transport_impl::behavior_type transport_fun(transport_impl::stateful_pointer<transport_state> self,
                                            const std::shared_ptr<engine_handoff>& handoff) {
  self->state.engine = std::move(handoff->engine);
  self->state.route = std::move(handoff->route);
  self->state.scope = handoff->scope;
  return {
      [=](connect_peer& msg) -> caf::result<peer_id> {
        auto& eng = *self->state.engine;
        // Both sides must speak the same provider and name regions the same
        // way: a virtual address read as an offset (or back) would land the
        // bytes elsewhere, and shm checks no range.
        if (msg.peer.provider != eng.provider())
          return make_error(lserr::bad_input, "connect_peer: peer uses provider \"" +
                                                  msg.peer.provider + "\", this transport \"" +
                                                  eng.provider() + "\"");
        if (msg.peer.virt_addr != eng.virt_addr())
          return make_error(lserr::bad_input,
                            std::string{"connect_peer: peer's regions are addressed by "} +
                                (msg.peer.virt_addr ? "virtual address" : "offset") +
                                ", this transport's writes by " +
                                (eng.virt_addr() ? "virtual address" : "offset") + " (provider \"" +
                                eng.provider() + "\")");
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
      [=](submit_batch& msg) -> caf::result<submit_batch_done> {
        auto& st = self->state;
        const uint64_t batch = st.next_batch++;
        pending_batch pb;
        pb.answer.layer = msg.layer;
        pb.answer.rooms.reserve(msg.rooms.size());
        // A list the counts do not cut cleanly fails every room: no room's
        // blocks can be told apart from a neighbour's.
        if (auto bad = check_block_counts(msg)) {
          for (const auto& part : msg.rooms)
            pb.answer.rooms.push_back(submit_done{part.room, msg.layer, bad, 0});
          return std::move(pb.answer);
        }
        for_each_room(msg, [&](size_t k, room_id room, block_span blocks) {
          pb.answer.rooms.push_back(submit_done{room, msg.layer, {}, 0});
          const uint64_t id = st.next_job++;
          if (auto err = st.engine->submit(id, msg.peer, blocks)) {
            pb.answer.rooms.back().status = std::move(err);
            return;
          }
          st.batch_jobs.emplace(id, job_route{batch, k});
          ++pb.outstanding;
        });
        if (pb.outstanding == 0)
          return std::move(pb.answer);
        pb.promise = self->make_response_promise<submit_batch_done>();
        auto rp = pb.promise;
        st.batches.emplace(batch, std::move(pb));
        return rp;
      },
      [=](jobs_ready) {
        for (auto& r : self->state.route->take())
          settle_job(self->state, r);
      },
  };
}

} // namespace

caf::expected<transport_actor> spawn_transport(caf::actor_system& sys, transport_config cfg) {
  // Device memory is registered directly (FI_HMEM, iface CUDA): the endpoint
  // must be opened for it, and a provider without it is refused at open().
  for (const auto& span : cfg.regions)
    cfg.fabric.hmem = cfg.fabric.hmem || span.cuda;
  auto ep = fabric::endpoint::open(cfg.fabric);
  if (!ep)
    return std::move(ep.error());
  for (const auto& span : cfg.regions) {
    auto reg = (*ep)->register_memory(
        span.base, span.length, FI_WRITE,
        span.cuda ? fabric::memory_iface::cuda : fabric::memory_iface::host, span.cuda_device);
    if (!reg)
      return std::move(reg.error());
  }
  auto route = std::make_shared<completion_route>();
  auto on_done = [route](fabric::job_result r) { route->push(std::move(r)); };
  auto eng = fabric::engine::start(std::move(*ep), fabric::engine::role::initiator,
                                   std::move(on_done), cfg.write_timeout, cfg.faults);
  if (!eng)
    return std::move(eng.error());
  auto handoff = std::make_shared<engine_handoff>();
  handoff->engine = std::move(*eng);
  handoff->route = route;
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
  self->peer_.virt_addr = (*ep)->virt_addr();
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
