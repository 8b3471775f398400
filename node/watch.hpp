// The actors a process cannot serve without: when one of them is down, the
// process should end with that reason instead of living on without it (a
// prefill rank whose scheduler failed would still authenticate decode nodes
// whose every room then fails; a supervisor restarts a process that exits).
#pragma once

#include <functional>
#include <string>
#include <utility>
#include <vector>

#include <caf/actor.hpp>
#include <caf/actor_system.hpp>

namespace layerstream {

/// Watches `actors` (name, handle). The first one down calls `on_down` once
/// with "<name> is down (<reason>)", then the watcher ends. Ending the
/// watcher first (send it an exit) keeps a planned shutdown quiet.
caf::actor watch_critical(caf::actor_system& sys,
                          std::vector<std::pair<std::string, caf::actor>> actors,
                          std::function<void(std::string)> on_down);

} // namespace layerstream
