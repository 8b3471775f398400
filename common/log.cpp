#include "common/log.hpp"

namespace layerstream::log {

bool set_level(const std::string& name) {
  auto level = spdlog::level::from_str(name);
  // from_str maps unknown names to "off"; only accept "off" when asked for.
  if (level == spdlog::level::off && name != "off")
    return false;
  spdlog::set_level(level);
  return true;
}

} // namespace layerstream::log
