#include "common/trace.hpp"

#include <algorithm>

#include <nlohmann/json.hpp>

#include "common/json_file.hpp"

namespace layerstream {

void trace_recorder::span(std::string name, std::string category, uint32_t pid, uint64_t tid,
                          int64_t start_ns, int64_t end_ns) {
  std::lock_guard<std::mutex> guard{mtx_};
  events_.push_back({std::move(name), std::move(category), 'X', pid, tid, start_ns, end_ns});
}

void trace_recorder::instant(std::string name, std::string category, uint32_t pid, uint64_t tid,
                             int64_t at_ns) {
  std::lock_guard<std::mutex> guard{mtx_};
  events_.push_back({std::move(name), std::move(category), 'i', pid, tid, at_ns, at_ns});
}

void trace_recorder::name_process(uint32_t pid, std::string name) {
  std::lock_guard<std::mutex> guard{mtx_};
  process_names_.emplace_back(pid, std::move(name));
}

size_t trace_recorder::size() const {
  std::lock_guard<std::mutex> guard{mtx_};
  return events_.size();
}

bool trace_recorder::write(const std::string& path) const {
  std::lock_guard<std::mutex> guard{mtx_};
  int64_t origin = INT64_MAX;
  for (auto& e : events_)
    origin = std::min(origin, e.start_ns);
  auto us = [origin](int64_t ns) { return static_cast<double>(ns - origin) / 1000.0; };
  nlohmann::json list = nlohmann::json::array();
  for (auto& [pid, name] : process_names_)
    list.push_back(
        {{"name", "process_name"}, {"ph", "M"}, {"pid", pid}, {"args", {{"name", name}}}});
  for (auto& e : events_) {
    nlohmann::json j{{"name", e.name}, {"cat", e.category}, {"ph", std::string(1, e.phase)},
                     {"pid", e.pid},   {"tid", e.tid},      {"ts", us(e.start_ns)}};
    if (e.phase == 'X')
      j["dur"] = static_cast<double>(e.end_ns - e.start_ns) / 1000.0;
    else
      j["s"] = "t";
    list.push_back(std::move(j));
  }
  return write_json_file(
      path, nlohmann::json{{"traceEvents", std::move(list)}, {"displayTimeUnit", "ms"}}, -1);
}

} // namespace layerstream
