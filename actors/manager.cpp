#include "actors/manager.hpp"

#include <algorithm>
#include <iterator>
#include <utility>

#include <caf/exit_reason.hpp>

#include "common/log.hpp"

namespace layerstream {

namespace {

using self_ptr = manager_actor::stateful_pointer<manager_state>;

/// Removes `room` from its context; the context leaves the fan-out list
/// (swap with the last) and stops once none of its rooms is left.
void deactivate(self_ptr self, room_id room) {
  auto& st = self->state;
  auto i = st.context_of.find(room);
  if (i == st.context_of.end())
    return;
  auto ctx = i->second;
  st.context_of.erase(i);
  auto pos = std::find_if(st.active.begin(), st.active.end(),
                          [&](const manager_state::active_context& a) { return a.ctx == ctx; });
  if (pos == st.active.end() || --pos->rooms_left > 0)
    return;
  if (std::next(pos) != st.active.end())
    *pos = std::move(st.active.back());
  st.active.pop_back();
  self->unlink_from(ctx);
  self->send_exit(ctx, caf::exit_reason::user_shutdown);
}

void remember(self_ptr self, const finish_result& res) {
  auto& st = self->state;
  const auto seq = st.next_finished_seq++;
  if (st.finished.try_emplace(res.room, manager_state::remembered{res, seq}).second)
    st.finished_order.emplace_back(res.room, seq);
  while (st.finished_order.size() > st.cfg.finished_memory) {
    auto [room, oldest] = st.finished_order.front();
    st.finished_order.pop_front();
    if (auto i = st.finished.find(room); i != st.finished.end() && i->second.seq == oldest)
      st.finished.erase(i);
  }
}

void settle(self_ptr self, const finish_result& res) {
  auto& st = self->state;
  deactivate(self, res.room);
  remember(self, res);
  auto i = st.finishing.find(res.room);
  if (i == st.finishing.end())
    return;
  for (auto& rp : i->second)
    rp.deliver(res);
  st.finishing.erase(i);
}

} // namespace

manager_actor::behavior_type manager_impl(manager_actor::stateful_pointer<manager_state> self,
                                          submit_sink transport, manager_config cfg) {
  self->state.transport = std::move(transport);
  self->state.cfg = std::move(cfg);
  return {
      [self](setup& msg) -> setup_result {
        auto& st = self->state;
        // Each room is checked alone: one that cannot be set up fails by
        // itself, and the forward runs for the others.
        std::unordered_map<room_id, size_t> in_batch;
        for (const auto& req : msg.batch)
          ++in_batch[req.room];
        setup_result answer;
        // An answer names rooms, not positions: a room is refused once, and
        // every copy of an id given twice is refused.
        auto refuse = [&](room_id room, caf::error why) {
          auto same = [room](const room_refusal& r) { return r.room == room; };
          if (std::none_of(answer.refused.begin(), answer.refused.end(), same))
            answer.refused.push_back({room, std::move(why)});
        };
        std::vector<request_transfer> taken;
        taken.reserve(msg.batch.size());
        for (auto& req : msg.batch) {
          const auto name = "setup: room " + std::to_string(req.room);
          if (in_batch[req.room] > 1)
            refuse(req.room, make_error(lserr::duplicate_room,
                                        name + " appears " + std::to_string(in_batch[req.room]) +
                                            " times in one batch"));
          else if (st.context_of.count(req.room) > 0)
            refuse(req.room, make_error(lserr::duplicate_room,
                                        name + " is still active here: the context of an earlier "
                                               "request with this id has not finished"));
          else if (auto err = validate(req.ptrs))
            refuse(req.room, make_error(lserr::bad_input, name + ": " + describe(err)));
          else
            taken.push_back(std::move(req));
        }
        for (const auto& r : answer.refused)
          LS_WARN("manager: {}", describe(r.reason));
        if (taken.empty())
          return answer;
        std::vector<room_id> rooms;
        rooms.reserve(taken.size());
        for (const auto& req : taken) {
          st.finished.erase(req.room); // A room id reused by a new request starts afresh.
          rooms.push_back(req.room);
        }
        auto ctx =
            self->spawn<caf::linked>(context_impl, std::move(taken), st.transport, st.cfg.context);
        for (auto room : rooms)
          st.context_of.emplace(room, ctx);
        st.active.push_back({ctx, rooms.size()});
        LS_DEBUG("manager: setup of {} rooms ({} refused), {} rooms in {} contexts active",
                 rooms.size(), answer.refused.size(), st.context_of.size(), st.active.size());
        return answer;
      },
      [self](const layer_end& msg) {
        handler_clock busy{self->state.cfg.context.handler_cpu}; // shared with its contexts
        for (auto& entry : self->state.active)
          self->send(entry.ctx, msg);
      },
      [self](const finish& msg) -> caf::result<finish_result> {
        auto& st = self->state;
        if (auto i = st.finished.find(msg.room); i != st.finished.end())
          return i->second.result;
        auto rp = self->make_response_promise<finish_result>();
        if (auto i = st.finishing.find(msg.room); i != st.finishing.end()) {
          i->second.push_back(rp); // A finish is already on its way to the context.
          return rp;
        }
        auto i = st.context_of.find(msg.room);
        if (i == st.context_of.end()) {
          rp.deliver(finish_result{
              msg.room,
              make_error(lserr::unknown_room,
                         "finish: room " + std::to_string(msg.room) + " was never set up"),
              0, 0});
          return rp;
        }
        st.finishing[msg.room].push_back(rp);
        auto room = msg.room;
        self->request(i->second, st.cfg.finish_request_timeout, msg)
            .then([self](const finish_result& res) { settle(self, res); },
                  [self, room](caf::error& err) {
                    settle(self, finish_result{
                                     room,
                                     // Its writes may still be in flight.
                                     make_error(lserr::writes_in_flight,
                                                "finish: context did not answer: " + describe(err)),
                                     0, 0});
                  });
        return rp;
      },
  };
}

} // namespace layerstream
