#include "cli/blocks_command.hpp"

#include <sys/stat.h>

#include <cerrno>
#include <cstring>
#include <exception>
#include <fstream>
#include <optional>
#include <ostream>
#include <set>

#include <nlohmann/json.hpp>

#include "transport/transfer_plan.hpp"

namespace layerstream::cli {

namespace {

using nlohmann::json;

/// A bad field: the message starts with the field name.
struct input_error {
  std::string what;
};

const std::set<std::string> known_keys = {"src_pages",  "dst_pages",  "src_k_ptrs",  "dst_k_ptrs",
                                          "src_v_ptrs", "dst_v_ptrs", "item_lens",   "layer",
                                          "cp_size",    "cp_rank",    "chunk_start", "total_pages"};

/// A bad value for a message: a number or a short string as it is, anything
/// else by its type (printing a deeply nested array would recurse as deep as
/// it is nested, and a long one would flood the line).
std::string shown(const json& v) {
  if (v.is_number() || v.is_boolean() || v.is_null())
    return v.dump();
  if (v.is_string() && v.get_ref<const std::string&>().size() <= 40)
    return v.dump();
  return std::string{"a"} + (v.is_array() || v.is_object() ? "n " : " ") + v.type_name();
}

uint64_t get_u64(const json& obj, const char* key, std::optional<uint64_t> fallback = {}) {
  auto i = obj.find(key);
  if (i == obj.end()) {
    if (fallback)
      return *fallback;
    throw input_error{std::string{key} + ": missing"};
  }
  if (!i->is_number_unsigned())
    throw input_error{std::string{key} + ": expected an unsigned 64-bit integer, got " + shown(*i)};
  return i->get<uint64_t>();
}

std::vector<uint64_t> get_u64_list(const json& obj, const char* key) {
  auto i = obj.find(key);
  if (i == obj.end())
    throw input_error{std::string{key} + ": missing"};
  if (!i->is_array())
    throw input_error{std::string{key} + ": expected an array of unsigned 64-bit integers"};
  std::vector<uint64_t> out;
  out.reserve(i->size());
  for (size_t k = 0; k < i->size(); ++k) {
    const auto& v = (*i)[k];
    if (!v.is_number_unsigned())
      throw input_error{std::string{key} + "[" + std::to_string(k) +
                        "]: expected an unsigned 64-bit integer, got " + shown(v)};
    out.push_back(v.get<uint64_t>());
  }
  return out;
}

/// The field-first message of a refused input; overflow keeps its code as a prefix.
std::string reason(const caf::error& e) {
  return is(e, lserr::overflow) ? describe(e) : message_of(e);
}

/// The known keys, for the message refusing another one.
std::string known_key_list() {
  std::string out;
  for (const auto& key : known_keys)
    out += (out.empty() ? "" : ", ") + key;
  return out;
}

json blocks_of(const json& in) {
  if (!in.is_object())
    throw input_error{"expected a JSON object"};
  // A misspelled optional key (chunk_start, total_pages) would otherwise
  // leave its default in place and give other blocks without an error.
  for (auto& [key, value] : in.items())
    if (known_keys.count(key) == 0)
      throw input_error{shown(json(key)) + ": unknown key (the keys are " + known_key_list() + ")"};
  auto src_pages = get_u64_list(in, "src_pages");
  auto dst_pages = get_u64_list(in, "dst_pages");
  kv_pointers ptrs{get_u64_list(in, "src_k_ptrs"), get_u64_list(in, "dst_k_ptrs"),
                   get_u64_list(in, "src_v_ptrs"), get_u64_list(in, "dst_v_ptrs"),
                   get_u64_list(in, "item_lens")};
  auto layer = get_u64(in, "layer");
  cp_slice slice;
  slice.cp_size = get_u64(in, "cp_size");
  slice.cp_rank = get_u64(in, "cp_rank");
  slice.chunk_start = get_u64(in, "chunk_start", 0);
  // Without total_pages the request ends with this chunk. With more than one
  // CP rank the split depends on the whole request, so a later chunk needs it.
  if (!in.contains("total_pages") && slice.chunk_start > 0 && slice.cp_size > 1)
    throw input_error{"total_pages: missing; with chunk_start " +
                      std::to_string(slice.chunk_start) + " and cp_size " +
                      std::to_string(slice.cp_size) +
                      " the CP split needs the request's page count"};
  uint64_t until_chunk_end = 0;
  if (__builtin_add_overflow(slice.chunk_start, src_pages.size(), &until_chunk_end))
    throw input_error{"chunk_start: " + std::to_string(slice.chunk_start) + " plus " +
                      std::to_string(src_pages.size()) + " pages passes 2^64"};
  slice.total_pages = get_u64(in, "total_pages", until_chunk_end);
  if (slice.total_pages == 0 && !src_pages.empty())
    throw input_error{"total_pages: 0, but the page lists hold " +
                      std::to_string(src_pages.size()) + " pages"};
  if (auto e = validate(ptrs))
    throw input_error{reason(e)};
  auto plan = make_transfer_plan(src_pages, dst_pages, slice);
  if (!plan)
    throw input_error{reason(plan.error())};
  std::vector<block> blocks;
  if (auto e = append_layer_blocks(*plan, ptrs, layer, blocks))
    throw input_error{reason(e)};
  json arr = json::array();
  for (auto& b : blocks)
    arr.push_back(json::array({b.src, b.dst, b.len}));
  return json{{"blocks", std::move(arr)}};
}

} // namespace

int run_blocks(const std::string& input_path, std::ostream& out, std::ostream& err) {
  // A directory opens as a stream and throws on the first read. A pipe
  // (`--input <(...)`, /dev/stdin) is taken.
  struct stat st {};
  if (::stat(input_path.c_str(), &st) != 0) {
    err << "layerstream blocks: " << input_path << ": " << std::strerror(errno) << "\n";
    return 2;
  }
  if (!S_ISREG(st.st_mode) && !S_ISFIFO(st.st_mode)) {
    err << "layerstream blocks: " << input_path << ": not a regular file or a pipe\n";
    return 2;
  }
  std::ifstream file{input_path};
  if (!file) {
    err << "layerstream blocks: " << input_path << ": cannot open file\n";
    return 2;
  }
  json in;
  try {
    in = json::parse(file);
  } catch (const json::exception& e) {
    err << "layerstream blocks: " << input_path << ": not valid JSON: " << e.what() << "\n";
    return 2;
  } catch (const std::exception& e) {
    err << "layerstream blocks: " << input_path << ": cannot read: " << e.what() << "\n";
    return 2;
  }
  try {
    if (!in.is_array()) {
      out << blocks_of(in).dump() << "\n";
      return 0;
    }
    json results = json::array();
    for (size_t i = 0; i < in.size(); ++i) {
      auto where = "[" + std::to_string(i) + "]: ";
      try {
        results.push_back(blocks_of(in[i]));
      } catch (const input_error& e) {
        throw input_error{where + e.what};
      }
    }
    out << results.dump() << "\n";
    return 0;
  } catch (const input_error& e) {
    err << "layerstream blocks: " << input_path << ": " << e.what << "\n";
    return 2;
  }
}

} // namespace layerstream::cli
