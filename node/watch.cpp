#include "node/watch.hpp"

#include <caf/event_based_actor.hpp>

#include "common/error.hpp"
#include "common/log.hpp"

namespace layerstream {

namespace {

caf::behavior watcher(caf::event_based_actor* self,
                      const std::vector<std::pair<std::string, caf::actor>>& actors,
                      const std::function<void(std::string)>& on_down) {
  for (const auto& entry : actors)
    self->monitor(entry.second);
  self->set_down_handler([self, actors, on_down](caf::down_msg& dm) {
    std::string name = "an actor";
    for (const auto& entry : actors)
      if (entry.second.address() == dm.source)
        name = entry.first;
    auto why = name + " is down (" + (dm.reason ? describe(dm.reason) : "exited") + ")";
    LS_ERROR("{}", why);
    on_down(std::move(why));
    self->quit();
  });
  // It takes no message: it only watches.
  return {[](caf::ok_atom) {}};
}

} // namespace

caf::actor watch_critical(caf::actor_system& sys,
                          std::vector<std::pair<std::string, caf::actor>> actors,
                          std::function<void(std::string)> on_down) {
  return sys.spawn(watcher, std::move(actors), std::move(on_down));
}

} // namespace layerstream
