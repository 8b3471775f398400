// Writing a JSON report or trace to a file, with the checks every writer needs.
#pragma once

#include <fstream>
#include <string>

#include <nlohmann/json.hpp>

namespace layerstream {

/// Writes `j` and a newline to `path` (`indent` as nlohmann's dump; -1: one
/// line). Text that is not UTF-8 (a peer's error message) is replaced, not
/// thrown on; the file is closed before the check, since a write error may
/// show only when the buffer is flushed. False if anything failed.
inline bool write_json_file(const std::string& path, const nlohmann::json& j, int indent = 2) {
  std::ofstream out{path};
  out << j.dump(indent, ' ', false, nlohmann::json::error_handler_t::replace) << "\n";
  out.close();
  return static_cast<bool>(out);
}

} // namespace layerstream
