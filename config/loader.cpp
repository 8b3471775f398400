#include "config/loader.hpp"

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <initializer_list>
#include <limits>
#include <map>
#include <sstream>
#include <string_view>
#include <type_traits>

#include <sys/stat.h>
#include <toml++/toml.h>

#include "common/deadlines.hpp"
#include "common/error.hpp"
#include "common/limits.hpp"

namespace layerstream {

namespace {

// The one list of TOML keys: the loader, the unknown-key check and to_toml all
// walk it, so a key cannot be readable but not printable (or the reverse).
// Durations carry their unit in the key name.
template <class Config, class Visitor>
void visit_fields(Config& c, Visitor& v) {
  v.table("model");
  v.field("layers", c.model.layers);
  v.field("kv_heads", c.model.kv_heads);
  v.field("head_dim", c.model.head_dim);
  v.field("dtype_bytes", c.model.dtype_bytes);
  v.field("page_size", c.model.page_size);
  v.field("mla", c.model.mla);
  v.field("layer_compute_us", c.model.layer_compute);
  v.field("compute_wait", c.model.compute_wait);
  v.table("transfer");
  v.field("per_layer", c.transfer.per_layer);
  v.field("per_layer_min_tokens", c.transfer.per_layer_min_tokens);
  v.field("chunk_tokens", c.transfer.chunk_tokens);
  v.field("max_batch", c.transfer.max_batch);
  v.field("notify_poll_us", c.transfer.notify_poll);
  v.field("notify_spin_us", c.transfer.notify_spin);
  v.table("fabric");
  v.field("provider", c.fabric.provider);
  v.field("bind_address", c.fabric.bind_address);
  v.field("write_iov", c.fabric.write_iov);
  v.table("timeouts");
  v.field("submit_ms", c.timeouts.submit);
  v.field("room_ms", c.timeouts.room);
  v.field("heartbeat_ms", c.timeouts.heartbeat);
  v.field("connection_ms", c.timeouts.connection);
  v.table("prefill");
  v.field("host", c.prefill.host);
  v.field("port", c.prefill.port);
  v.field("cp_rank", c.prefill.cp_rank);
  v.field("pool_pages", c.prefill.pool_pages);
  v.field("device", c.prefill.device);
  v.field("kv_export", c.prefill.kv_export);
  v.table("decode");
  v.field("pool_pages", c.decode.pool_pages);
  v.field("prefill", c.decode.prefill);
  v.table("workload");
  v.field("rooms", c.workload.rooms);
  v.field("first_room", c.workload.first_room);
  v.field("min_tokens", c.workload.min_tokens);
  v.field("max_tokens", c.workload.max_tokens);
  v.field("seed", c.workload.seed);
  v.field("fragmentation", c.workload.fragmentation);
  v.field("corrupt_rooms", c.workload.corrupt_rooms);           // TESTING ONLY: fault injection
  v.field("fault_rate", c.workload.fault_rate);                 // TESTING ONLY: fault injection
  v.field("skip_notify_layers", c.workload.skip_notify_layers); // TESTING ONLY: reconcile
  v.table("cluster");
  v.field("cp_size", c.cluster.cp_size);
  v.field("token", c.cluster.token);
  v.field("network", c.cluster.network);
  v.table("tls");
  v.field("certificate", c.tls.certificate);
  v.field("key", c.tls.key);
  v.field("ca_file", c.tls.ca_file);
  v.table("log");
  v.field("level", c.log.level);
}

constexpr const char* providers[] = {"",        "tcp;ofi_rxm",   "net", "shm",
                                     "sockets", "verbs;ofi_rxm", "efa", "udp;ofi_rxd"};
constexpr const char* networks[] = {"test", "deployment"};
constexpr const char* devices[] = {"cpu", "gpu"};
constexpr const char* kv_exports[] = {"auto", "staging", "hmem"};
constexpr const char* compute_waits[] = {"spin", "sleep"};
constexpr const char* log_levels[] = {"trace", "debug", "info", "warn", "error", "off"};
constexpr uint32_t max_cp_size = 64;
// Layers of one model (the largest served today have ~130); a per-room
// transfer_info carries one pointer and one length per layer.
constexpr uint64_t max_layers = 4096;
// What to_toml(secrets::redact) writes in place of the token; never a token.
constexpr std::string_view redacted_prefix = "<redacted: ";
// Pages of one pool: 2^26 (the allocator keeps 8 bytes per free page).
constexpr uint64_t max_pool_pages = uint64_t{1} << 26;
// Rooms of one run (the driver sends all their open_room at once).
constexpr uint32_t max_workload_rooms = uint32_t{1} << 20;
constexpr size_t min_token_chars = 16;

/// Thrown inside this file only; every public function returns it as a value.
struct refused {
  config_error err;
};

[[noreturn]] void refuse(std::string file, std::string key, std::string reason, uint32_t line = 0) {
  throw refused{config_error{std::move(file), std::move(key), std::move(reason), line}};
}

uint32_t line_of(const toml::source_region& src) {
  return static_cast<uint32_t>(src.begin.line);
}

std::string quoted(std::string_view s) {
  std::string out = "\"";
  for (char ch : s) {
    switch (ch) {
    case '"':
      out += "\\\"";
      break;
    case '\\':
      out += "\\\\";
      break;
    case '\n':
      out += "\\n";
      break;
    case '\t':
      out += "\\t";
      break;
    case '\r':
      out += "\\r";
      break;
    default:
      if (static_cast<unsigned char>(ch) < 0x20 || ch == 0x7f) {
        char buf[8];
        std::snprintf(buf, sizeof(buf), "\\u%04x", static_cast<unsigned>(ch));
        out += buf;
      } else {
        out += ch;
      }
    }
  }
  out += '"';
  return out;
}

// Shortest text that reads back as the same double, always with a '.' or an
// exponent so that TOML reads it as a float.
std::string format_double(double d) {
  if (std::isnan(d))
    return "nan";
  if (std::isinf(d))
    return d < 0 ? "-inf" : "inf";
  char buf[64];
  auto res = std::to_chars(buf, buf + sizeof(buf), d);
  std::string out(buf, res.ptr);
  if (out.find_first_of(".e") == std::string::npos)
    out += ".0";
  return out;
}

/// "got string \"x\"", "got integer -3": what the user wrote, for type errors.
std::string describe_node(const toml::node& node) {
  switch (node.type()) {
  case toml::node_type::string:
    return "string " + quoted(node.as_string()->get());
  case toml::node_type::integer:
    return "integer " + std::to_string(node.as_integer()->get());
  case toml::node_type::floating_point:
    return "float " + format_double(node.as_floating_point()->get());
  case toml::node_type::boolean:
    return std::string{"boolean "} + (node.as_boolean()->get() ? "true" : "false");
  case toml::node_type::table:
    return "a table";
  case toml::node_type::array:
    return "an array";
  case toml::node_type::date:
    return "a date";
  case toml::node_type::time:
    return "a time";
  case toml::node_type::date_time:
    return "a date-time";
  default:
    return "nothing";
  }
}

size_t edit_distance(std::string_view a, std::string_view b) {
  std::vector<size_t> row(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j)
    row[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    size_t diag = row[0];
    row[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      size_t up = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diag + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diag = up;
    }
  }
  return row[b.size()];
}

/// The closest candidate within a small edit distance, or "".
template <class Range>
std::string closest(std::string_view word, const Range& candidates) {
  std::string best;
  size_t best_dist = std::max<size_t>(2, word.size() / 3) + 1;
  for (const auto& cand : candidates) {
    std::string_view c{cand};
    if (c.empty())
      continue;
    // A duration without its unit ("submit" for "submit_ms") or a provider
    // without its utility ("verbs" for "verbs;ofi_rxm") is close.
    bool suffix_left_out = c.size() > word.size() && c.substr(0, word.size()) == word &&
                           (c[word.size()] == '_' || c[word.size()] == ';');
    size_t d = suffix_left_out ? 1 : edit_distance(word, c);
    if (d < best_dist) {
      best_dist = d;
      best = std::string{c};
    }
  }
  return best;
}

/// Tables and their keys, in visit order.
struct key_collector {
  std::vector<std::pair<std::string, std::vector<std::string>>> tables;
  void table(const char* name) { tables.emplace_back(name, std::vector<std::string>{}); }
  template <class T>
  void field(const char* key, const T&) {
    tables.back().second.emplace_back(key);
  }
};

const key_collector& known_keys() {
  static const key_collector keys = [] {
    key_collector k;
    const deployment_config dummy;
    visit_fields(dummy, k);
    return k;
  }();
  return keys;
}

/// Refuses any table or key the config does not have, with a suggestion.
void check_unknown_keys(const toml::table& root, const std::string& file) {
  const auto& tables = known_keys().tables;
  std::vector<std::string> table_names;
  table_names.reserve(tables.size());
  for (const auto& t : tables)
    table_names.push_back(t.first);
  // A key placed in the wrong table: "did you mean [transfer] chunk_tokens?"
  auto elsewhere = [&](std::string_view key) -> std::string {
    for (const auto& [t, keys] : tables)
      if (std::find(keys.begin(), keys.end(), key) != keys.end())
        return "; did you mean " + t + "." + std::string{key} + "?";
    return "";
  };
  for (auto&& [name, node] : root) {
    std::string tname{name.str()};
    auto known =
        std::find_if(tables.begin(), tables.end(), [&](const auto& t) { return t.first == tname; });
    if (known == tables.end()) {
      std::string hint;
      if (!node.is_table())
        hint = elsewhere(tname);
      if (hint.empty()) {
        if (auto near = closest(tname, table_names); !near.empty())
          hint = "; did you mean [" + near + "]?";
      }
      // The list comes from visit_fields, so it cannot miss a table.
      std::string listed;
      for (const auto& t : table_names)
        listed += (listed.empty() ? "" : ", ") + t;
      refuse(file, tname,
             std::string{node.is_table() ? "unknown table" : "unknown top-level key"} + hint +
                 " (tables: " + listed + ")",
             line_of(name.source()));
    }
    const auto* tbl = node.as_table();
    if (tbl == nullptr)
      refuse(file, tname, "expected a table, got " + describe_node(node), line_of(node.source()));
    const auto& keys = known->second;
    for (auto&& [key, value] : *tbl) {
      std::string k{key.str()};
      if (std::find(keys.begin(), keys.end(), k) != keys.end())
        continue;
      std::string hint;
      if (auto near = closest(k, keys); !near.empty())
        hint = "; did you mean " + near + "?";
      else
        hint = elsewhere(k);
      refuse(file, tname + "." + k, "unknown key" + hint, line_of(key.source()));
    }
  }
}

/// Dotted key ("decode.prefill[1]") -> line, so that errors found after
/// loading (in check_general) can still point at the line.
using line_map = std::map<std::string, uint32_t>;

/// Fills the config from the TOML tree, checking each value's type and range.
class field_reader {
 public:
  field_reader(const toml::table& root, const std::string& file, line_map& lines)
      : root_(root), file_(file), lines_(lines) {}

  void table(const char* name) {
    name_ = name;
    table_ = root_.get_as<toml::table>(name);
  }

  template <class T>
  void field(const char* key, T& out) {
    if (table_ == nullptr)
      return;
    const toml::node* node = table_->get(key);
    if (node == nullptr)
      return;
    std::string dotted = name_ + "." + key;
    lines_[dotted] = line_of(node->source());
    if (const auto* arr = node->as_array())
      for (size_t i = 0; i < arr->size(); ++i)
        lines_[dotted + "[" + std::to_string(i) + "]"] = line_of(arr->get(i)->source());
    read(*node, dotted, out);
  }

 private:
  [[noreturn]] void type_error(const toml::node& node, const std::string& key,
                               const char* expected) const {
    refuse(file_, key, std::string{"expected "} + expected + ", got " + describe_node(node),
           line_of(node.source()));
  }

  template <class T>
  std::enable_if_t<std::is_integral_v<T> && std::is_unsigned_v<T> && !std::is_same_v<T, bool>>
  read(const toml::node& node, const std::string& key, T& out) const {
    const auto* v = node.as_integer();
    if (v == nullptr)
      type_error(node, key, "a non-negative integer");
    int64_t x = v->get();
    if (x < 0)
      type_error(node, key, "a non-negative integer");
    if (static_cast<uint64_t>(x) > std::numeric_limits<T>::max())
      refuse(file_, key,
             "out of range: " + std::to_string(x) + " (at most " +
                 std::to_string(std::numeric_limits<T>::max()) + ")",
             line_of(node.source()));
    out = static_cast<T>(x);
  }

  void read(const toml::node& node, const std::string& key, bool& out) const {
    const auto* v = node.as_boolean();
    if (v == nullptr)
      type_error(node, key, "true or false");
    out = v->get();
  }

  void read(const toml::node& node, const std::string& key, double& out) const {
    // `fragmentation = 0` is natural to write, so integers are accepted too.
    if (const auto* f = node.as_floating_point())
      out = f->get();
    else if (const auto* i = node.as_integer())
      out = static_cast<double>(i->get());
    else
      type_error(node, key, "a number");
  }

  void read(const toml::node& node, const std::string& key, std::string& out) const {
    const auto* v = node.as_string();
    if (v == nullptr)
      type_error(node, key, "a string");
    out = v->get();
  }

  void read(const toml::node& node, const std::string& key, std::vector<std::string>& out) const {
    const auto* arr = node.as_array();
    if (arr == nullptr)
      type_error(node, key, "an array of strings");
    std::vector<std::string> result;
    for (size_t i = 0; i < arr->size(); ++i) {
      const toml::node& elem = *arr->get(i);
      const auto* s = elem.as_string();
      if (s == nullptr)
        type_error(elem, key + "[" + std::to_string(i) + "]", "a string");
      result.push_back(s->get());
    }
    out = std::move(result);
  }

  void read(const toml::node& node, const std::string& key, std::vector<uint64_t>& out) const {
    const auto* arr = node.as_array();
    if (arr == nullptr)
      type_error(node, key, "an array of non-negative integers");
    std::vector<uint64_t> result(arr->size());
    for (size_t i = 0; i < arr->size(); ++i)
      read(*arr->get(i), key + "[" + std::to_string(i) + "]", result[i]);
    out = std::move(result);
  }

  // Durations: an integer count of the unit in the key name; validate()
  // refuses zero and negatives, so CLI overrides get the same check.
  template <class Rep, class Period>
  void read(const toml::node& node, const std::string& key,
            std::chrono::duration<Rep, Period>& out) const {
    const auto* v = node.as_integer();
    if (v == nullptr)
      type_error(node, key, "an integer");
    out = std::chrono::duration<Rep, Period>{v->get()};
  }

  const toml::table& root_;
  const std::string& file_;
  line_map& lines_;
  std::string name_;
  const toml::table* table_ = nullptr;
};

/// Emits `key = value` lines per table, in visit order.
class toml_writer {
 public:
  explicit toml_writer(secrets mode) : mode_(mode) {}

  void table(const char* name) {
    if (!out_.str().empty())
      out_ << '\n';
    out_ << '[' << name << "]\n";
    table_ = name;
  }

  template <class T>
  void field(const char* key, const T& value) {
    out_ << key << " = " << format(value) << '\n';
  }

  void field(const char* key, const std::string& value) {
    if (mode_ == secrets::redact && table_ == "cluster" && std::string_view{key} == "token")
      out_ << key << " = " << quoted(redacted(value)) << '\n';
    else
      out_ << key << " = " << format(value) << '\n';
  }

  std::string str() const { return out_.str(); }

 private:
  template <class T>
  static std::enable_if_t<std::is_integral_v<T> && !std::is_same_v<T, bool>, std::string>
  format(T v) {
    return std::to_string(v);
  }
  static std::string format(bool v) { return v ? "true" : "false"; }
  static std::string format(double v) { return format_double(v); }
  static std::string format(const std::string& v) { return quoted(v); }
  static std::string format(const std::vector<std::string>& v) {
    std::string out = "[";
    for (size_t i = 0; i < v.size(); ++i)
      out += (i == 0 ? "" : ", ") + quoted(v[i]);
    return out + "]";
  }
  static std::string format(const std::vector<uint64_t>& v) {
    std::string out = "[";
    for (size_t i = 0; i < v.size(); ++i)
      out += (i == 0 ? "" : ", ") + std::to_string(v[i]);
    return out + "]";
  }
  template <class Rep, class Period>
  static std::string format(std::chrono::duration<Rep, Period> d) {
    return std::to_string(d.count());
  }

  secrets mode_;
  std::string table_;
  std::ostringstream out_;
};

/// ceil(a / b) for b > 0, without overflow.
uint64_t ceil_div(uint64_t a, uint64_t b) {
  return a / b + (a % b != 0 ? 1 : 0);
}

/// The port of "host:port" (1..65535), or 0.
uint16_t parse_port(std::string_view s) {
  if (s.empty() || s.size() > 5)
    return 0;
  uint32_t port = 0;
  for (char ch : s) {
    if (ch < '0' || ch > '9')
      return 0;
    port = port * 10 + static_cast<uint32_t>(ch - '0');
  }
  return port >= 1 && port <= 65535 ? static_cast<uint16_t>(port) : 0;
}

template <class Range>
std::string one_of(const Range& names) {
  std::string out;
  for (std::string_view n : names)
    out += (out.empty() ? "" : ", ") + quoted(n);
  return out;
}

template <class Range>
bool contains(const Range& names, std::string_view s) {
  return std::any_of(std::begin(names), std::end(names),
                     [&](std::string_view n) { return n == s; });
}

/// Longest duration any key may hold. Far above any sane timeout, and far
/// enough below 2^63 ns that the sums the nodes form (2 * room_ms + submit_ms,
/// a deadline from now) cannot overflow into a negative timeout.
constexpr std::chrono::hours max_duration{24};

/// A duration key: > 0 and at most max_duration, in the key's own unit.
template <class Rep, class Period>
void check_duration(const std::string& file, const char* key,
                    std::chrono::duration<Rep, Period> d) {
  if (d.count() <= 0)
    refuse(file, key, "must be positive, got " + std::to_string(d.count()));
  const auto most = std::chrono::duration_cast<std::chrono::duration<Rep, Period>>(max_duration);
  if (d > most)
    refuse(file, key,
           "must be at most " + std::to_string(most.count()) + " (1 day), got " +
               std::to_string(d.count()));
}

/// [tls]: all three paths or none.
void check_tls_keys(const tls_config& tls, const std::string& file) {
  if (!tls.enabled())
    return;
  using named = std::pair<const char*, const std::string*>;
  for (auto [key, value] : std::initializer_list<named>{{"tls.certificate", &tls.certificate},
                                                        {"tls.key", &tls.key},
                                                        {"tls.ca_file", &tls.ca_file}})
    if (value->empty())
      refuse(file, key,
             "missing: TLS needs all three of tls.certificate, tls.key and tls.ca_file "
             "(or none of them for plain caf-io)");
}

/// prefill and decode open the [tls] files: each must be a readable file.
void check_tls_files(const tls_config& tls, const std::string& file) {
  if (!tls.enabled())
    return;
  using named = std::pair<const char*, const std::string*>;
  for (auto [key, path] : std::initializer_list<named>{{"tls.certificate", &tls.certificate},
                                                       {"tls.key", &tls.key},
                                                       {"tls.ca_file", &tls.ca_file}}) {
    // Only a regular file: a FIFO or a device (/dev/stdin) could block the read.
    struct stat st {};
    if (::stat(path->c_str(), &st) != 0)
      refuse(file, key, "cannot read \"" + *path + "\": " + std::strerror(errno));
    if (!S_ISREG(st.st_mode))
      refuse(file, key, "cannot read \"" + *path + "\": not a regular file");
    errno = 0;
    std::ifstream in{*path, std::ios::binary};
    char byte = 0;
    if (!in || !in.get(byte))
      refuse(file, key,
             "cannot read \"" + *path + "\": " +
                 (errno != 0 ? std::string{std::strerror(errno)} : std::string{"empty file"}));
  }
}

/// TOML integers are signed 64-bit: an unsigned value a command-line flag
/// set past 2^63 - 1 could not be written back (to_toml) or read again.
class toml_integer_check {
 public:
  explicit toml_integer_check(const std::string& file) : file_(file) {}
  void table(const char* name) { table_ = name; }
  template <class T>
  void field(const char* key, const T& value) {
    if constexpr (std::is_same_v<T, uint64_t>)
      if (value > uint64_t{std::numeric_limits<int64_t>::max()})
        refuse(file_, table_ + "." + key,
               "must be at most 2^63 - 1 (a TOML integer), got " + std::to_string(value));
  }

 private:
  const std::string& file_;
  std::string table_;
};

void check_general(const deployment_config& c, const std::string& file) {
  toml_integer_check integers{file};
  visit_fields(c, integers);
  check_tls_keys(c.tls, file);
  const auto& m = c.model;
  using named = std::pair<const char*, uint64_t>;
  for (auto [key, value] : std::initializer_list<named>{{"model.layers", m.layers},
                                                        {"model.kv_heads", m.kv_heads},
                                                        {"model.head_dim", m.head_dim},
                                                        {"model.page_size", m.page_size}})
    if (value == 0)
      refuse(file, key, "must be at least 1, got 0");
  if (m.layers > max_layers)
    refuse(file, "model.layers",
           "must be at most " + std::to_string(max_layers) + ", got " + std::to_string(m.layers));
  if (m.dtype_bytes != 1 && m.dtype_bytes != 2 && m.dtype_bytes != 4)
    refuse(file, "model.dtype_bytes",
           "must be 1, 2 or 4 (bytes per element), got " + std::to_string(m.dtype_bytes));
  if (m.mla && m.kv_heads != 1)
    refuse(file, "model.kv_heads",
           "must be 1 with model.mla = true (one fused KV buffer), got " +
               std::to_string(m.kv_heads));
  uint64_t item_len = 0;
  if (__builtin_mul_overflow(uint64_t{m.page_size} * m.kv_heads,
                             uint64_t{m.head_dim} * m.dtype_bytes, &item_len))
    refuse(file, "model",
           "page_size * kv_heads * head_dim * dtype_bytes (bytes of one page) passes 2^64");
  check_duration(file, "model.layer_compute_us", m.layer_compute);
  if (!contains(compute_waits, m.compute_wait))
    refuse(file, "model.compute_wait",
           "unknown value " + quoted(m.compute_wait) + "; one of " + one_of(compute_waits));

  const auto& t = c.transfer;
  if (t.chunk_tokens % m.page_size != 0)
    refuse(file, "transfer.chunk_tokens",
           "must be a multiple of model.page_size (" + std::to_string(m.page_size) + "), got " +
               std::to_string(t.chunk_tokens));
  if (t.max_batch == 0)
    refuse(file, "transfer.max_batch", "must be at least 1, got 0");
  if (t.notify_poll.count() < 0)
    refuse(file, "transfer.notify_poll_us",
           "must not be negative (0 = no drain thread), got " +
               std::to_string(t.notify_poll.count()));
  // Longer than a layer's compute would hold every layer_end back by a layer.
  if (t.notify_poll > std::chrono::microseconds(10'000))
    refuse(file, "transfer.notify_poll_us",
           "must be at most 10000 (10 ms), got " + std::to_string(t.notify_poll.count()));
  if (t.notify_spin.count() < 0)
    refuse(file, "transfer.notify_spin_us",
           "must not be negative (0 = never spin), got " + std::to_string(t.notify_spin.count()));
  // It keeps a core busy while it lasts; past a quarter of a slow layer it
  // buys little.
  if (t.notify_spin > std::chrono::microseconds(100'000))
    refuse(file, "transfer.notify_spin_us",
           "must be at most 100000 (100 ms), got " + std::to_string(t.notify_spin.count()));

  if (!contains(providers, c.fabric.provider)) {
    std::string hint;
    if (auto near = closest(c.fabric.provider, providers); !near.empty())
      hint = "did you mean " + quoted(near) + "? ";
    refuse(file, "fabric.provider",
           "unknown provider " + quoted(c.fabric.provider) + "; " + hint + "one of " +
               one_of(providers) + " (\"\" = the fastest the fabric offers)");
  }

  // No provider offers more than a few dozen iov pairs per write.
  if (c.fabric.write_iov > 64)
    refuse(file, "fabric.write_iov",
           "must be at most 64 (0 = the provider's limit, 1 = a write per block), got " +
               std::to_string(c.fabric.write_iov));

  check_duration(file, "timeouts.submit_ms", c.timeouts.submit);
  check_duration(file, "timeouts.room_ms", c.timeouts.room);
  check_duration(file, "timeouts.heartbeat_ms", c.timeouts.heartbeat);
  check_duration(file, "timeouts.connection_ms", c.timeouts.connection);
  // A forward longer than room_ms fails every room at its deadline, and a
  // rank told to stop ends its forward only between compute slices.
  const auto forward = m.layer_compute * m.layers; // both bounded: no overflow
  if (forward > c.timeouts.room)
    refuse(
        file, "model.layer_compute_us",
        "times model.layers (" + std::to_string(m.layers) + ") is a forward of " +
            std::to_string(std::chrono::duration_cast<std::chrono::milliseconds>(forward).count()) +
            " ms, longer than timeouts.room_ms (" + std::to_string(c.timeouts.room.count()) +
            "): every room would fail at its deadline");
  // A room's context gives up on its layers room_ms after its first finish,
  // and its last layer's submit is answered up to submit_request_wait(submit)
  // after it was posted (engine deadline plus margin, common/deadlines.hpp).
  // A room deadline inside that wait fails a write still within its own
  // deadline as writes_in_flight, and its pages stay held on both sides.
  const auto submit_wait =
      std::chrono::duration_cast<std::chrono::milliseconds>(submit_request_wait(c.timeouts.submit));
  if (submit_wait >= c.timeouts.room)
    refuse(file, "timeouts.submit_ms",
           std::to_string(c.timeouts.submit.count()) + " ms with its answer's margin is " +
               std::to_string(submit_wait.count()) + " ms, not shorter than timeouts.room_ms (" +
               std::to_string(c.timeouts.room.count()) +
               "): a layer's write still inside its own deadline would fail at the room's");
  // caf-io drops a peer it has not heard from for connection_ms: with fewer
  // than two heartbeats in that window, one late heartbeat drops a live peer.
  if (c.timeouts.heartbeat * 2 > c.timeouts.connection)
    refuse(file, "timeouts.heartbeat_ms",
           "must be at most half of timeouts.connection_ms (" +
               std::to_string(c.timeouts.connection.count()) + "), got " +
               std::to_string(c.timeouts.heartbeat.count()) +
               ": a quiet but live peer would be dropped between heartbeats");

  const auto& cl = c.cluster;
  if (cl.cp_size == 0 || cl.cp_size > max_cp_size)
    refuse(file, "cluster.cp_size",
           "must be in 1.." + std::to_string(max_cp_size) + ", got " + std::to_string(cl.cp_size));
  if (!contains(networks, cl.network))
    refuse(file, "cluster.network",
           "unknown value " + quoted(cl.network) + "; one of " + one_of(networks) +
               " (\"test\": loopback or test hosts only; \"deployment\": a real cluster)");
  if (!contains(devices, c.prefill.device))
    refuse(file, "prefill.device",
           "unknown device " + quoted(c.prefill.device) + "; one of " + one_of(devices));
  if (!contains(kv_exports, c.prefill.kv_export))
    refuse(file, "prefill.kv_export",
           "unknown value " + quoted(c.prefill.kv_export) + "; one of " + one_of(kv_exports));
  if (c.prefill.cp_rank >= cl.cp_size)
    refuse(file, "prefill.cp_rank",
           "must be below cluster.cp_size (" + std::to_string(cl.cp_size) + "), got " +
               std::to_string(c.prefill.cp_rank));

  // Bytes of a whole pool (pages * item_len * buffers * layers) must be addressable.
  uint64_t per_page = 0;
  if (__builtin_mul_overflow(item_len, uint64_t{m.layers} * (m.mla ? 1 : 2), &per_page))
    refuse(file, "model", "bytes of one page over all layers pass 2^64");
  for (auto [key, pages] :
       std::initializer_list<named>{{"prefill.pool_pages", c.prefill.pool_pages},
                                    {"decode.pool_pages", c.decode.pool_pages}}) {
    uint64_t bytes = 0;
    if (pages == 0)
      refuse(file, key, "must be at least 1, got 0");
    // The page allocator lists every free page (8 bytes each): past this a
    // pool's bookkeeping alone would take GiBs before anything is checked.
    if (pages > max_pool_pages)
      refuse(file, key,
             "must be at most " + std::to_string(max_pool_pages) + " (2^26) pages, got " +
                 std::to_string(pages));
    if (__builtin_mul_overflow(pages, per_page, &bytes))
      refuse(file, key,
             std::to_string(pages) + " pages of " + std::to_string(per_page) +
                 " bytes (all layers) pass 2^64");
  }

  for (size_t i = 0; i < c.decode.prefill.size(); ++i)
    if (auto parts = split_endpoint(c.decode.prefill[i]);
        auto* why = std::get_if<std::string>(&parts))
      refuse(file, "decode.prefill[" + std::to_string(i) + "]",
             "expected \"host:port\", got " + quoted(c.decode.prefill[i]) + ": " + *why);
  // One entry per CP rank: a repeated endpoint would connect to one rank twice
  // and leave another rank's slice of every room unwritten. Compared as
  // host (case-blind) and port number, so "h:07001" repeats "H:7001".
  std::map<std::pair<std::string, uint16_t>, size_t> seen_endpoints;
  for (size_t i = 0; i < c.decode.prefill.size(); ++i) {
    auto parts = std::get<endpoint_parts>(split_endpoint(c.decode.prefill[i]));
    std::transform(parts.host.begin(), parts.host.end(), parts.host.begin(),
                   [](unsigned char ch) { return static_cast<char>(std::tolower(ch)); });
    auto [at, fresh] = seen_endpoints.emplace(std::make_pair(parts.host, parts.port), i);
    if (!fresh)
      refuse(file, "decode.prefill[" + std::to_string(i) + "]",
             "duplicate of decode.prefill[" + std::to_string(at->second) + "] (" +
                 quoted(c.decode.prefill[at->second]) + " and " + quoted(c.decode.prefill[i]) +
                 "): each prefill rank is listed once");
  }

  const auto& w = c.workload;
  if (w.rooms == 0)
    refuse(file, "workload.rooms", "must be at least 1, got 0");
  // The driver opens every room of a run at once.
  if (w.rooms > max_workload_rooms)
    refuse(file, "workload.rooms",
           "must be at most " + std::to_string(max_workload_rooms) + " (2^20), got " +
               std::to_string(w.rooms));
  if (w.first_room == 0)
    refuse(file, "workload.first_room", "must be at least 1, got 0");
  if (w.min_tokens == 0)
    refuse(file, "workload.min_tokens", "must be at least 1, got 0");
  if (w.min_tokens > w.max_tokens)
    refuse(file, "workload.min_tokens",
           "must not exceed workload.max_tokens (" + std::to_string(w.max_tokens) + "), got " +
               std::to_string(w.min_tokens));
  if (!(w.fragmentation >= 0.0 && w.fragmentation <= 1.0))
    refuse(file, "workload.fragmentation",
           "must be in [0, 1], got " + format_double(w.fragmentation));
  if (!(w.fault_rate >= 0.0 && w.fault_rate <= 1.0))
    refuse(file, "workload.fault_rate", "must be in [0, 1], got " + format_double(w.fault_rate));
  for (size_t i = 0; i < w.skip_notify_layers.size(); ++i)
    if (w.skip_notify_layers[i] >= m.layers)
      refuse(file, "workload.skip_notify_layers[" + std::to_string(i) + "]",
             "must be below model.layers (" + std::to_string(m.layers) + "), got " +
                 std::to_string(w.skip_notify_layers[i]));

  if (!contains(log_levels, c.log.level))
    refuse(file, "log.level",
           "unknown level " + quoted(c.log.level) + "; one of " + one_of(log_levels));
}

/// A pool the role maps must not pass the 1 TiB the KV pool maps at most
/// (model/kv_pool.cpp); the loader has checked that its bytes fit in 2^64.
void check_pool_bytes(const deployment_config& c, const char* key, uint64_t pages,
                      const std::string& file) {
  const uint64_t per_page = c.model.item_len() * c.model.layers * (c.model.mla ? 1 : 2);
  const uint64_t bytes = pages * per_page;
  if (bytes > max_pool_bytes)
    refuse(file, key,
           std::to_string(pages) + " pages of " + std::to_string(per_page) +
               " bytes (all layers) are " + std::to_string(bytes >> 30) +
               " GiB, past the 1 TiB a pool may map");
}

/// The prefill pool must hold max_batch requests' owned CP slices at once.
void check_prefill_pool(const deployment_config& c, const std::string& file) {
  check_pool_bytes(c, "prefill.pool_pages", c.prefill.pool_pages, file);
  uint64_t pages = ceil_div(c.workload.max_tokens, c.model.page_size);
  uint64_t slice = ceil_div(pages, c.cluster.cp_size); // the first ranks get one extra page
  uint64_t need = 0;
  const bool past_2_64 = __builtin_mul_overflow(slice, uint64_t{c.transfer.max_batch}, &need);
  if (past_2_64 || c.prefill.pool_pages < need)
    refuse(file, "prefill.pool_pages",
           std::to_string(c.prefill.pool_pages) +
               " pages cannot hold transfer.max_batch = " + std::to_string(c.transfer.max_batch) +
               " requests of workload.max_tokens = " + std::to_string(c.workload.max_tokens) +
               " tokens (" + std::to_string(slice) + " pages each on this rank): need at least " +
               (past_2_64 ? std::string{"more than 2^64"} : std::to_string(need)));
}

/// The decode pool must hold at least one whole largest request.
void check_decode_pool(const deployment_config& c, const std::string& file) {
  check_pool_bytes(c, "decode.pool_pages", c.decode.pool_pages, file);
  uint64_t pages = ceil_div(c.workload.max_tokens, c.model.page_size);
  if (c.decode.pool_pages < pages)
    refuse(file, "decode.pool_pages",
           std::to_string(c.decode.pool_pages) + " pages cannot hold one request of " +
               "workload.max_tokens = " + std::to_string(c.workload.max_tokens) +
               " tokens: need at least " + std::to_string(pages));
}

/// prefill and decode talk over the control plane: they need the cluster token.
void check_token(const deployment_config& c, const std::string& file) {
  if (std::string_view{c.cluster.token}.substr(0, redacted_prefix.size()) == redacted_prefix)
    refuse(file, "cluster.token",
           "holds the placeholder a redacted config dump prints, not a secret: set the "
           "cluster's shared token");
  if (c.cluster.token.size() < min_token_chars)
    refuse(file, "cluster.token",
           c.cluster.token.empty()
               ? "required for prefill and decode: the cluster's shared secret (at least " +
                     std::to_string(min_token_chars) + " characters, the same on every node)"
               : "too short: " + std::to_string(c.cluster.token.size()) +
                     " characters, need at least " + std::to_string(min_token_chars));
}

void check_role(const deployment_config& c, config_role role, const std::string& file) {
  switch (role) {
  case config_role::demo:
    check_prefill_pool(c, file);
    check_decode_pool(c, file);
    break;
  case config_role::prefill:
    if (c.prefill.port == 0)
      refuse(file, "prefill.port",
             "required for a prefill rank: the control-plane port decode nodes connect to "
             "(1..65535)");
    if (c.prefill.host.empty())
      refuse(file, "prefill.host", "required for a prefill rank: the address to publish on");
    check_token(c, file);
    check_tls_files(c.tls, file);
    check_prefill_pool(c, file);
    break;
  case config_role::decode:
    if (c.decode.prefill.empty())
      refuse(file, "decode.prefill",
             "required for a decode node: the prefill ranks' \"host:port\", in cp_rank order");
    if (c.decode.prefill.size() != c.cluster.cp_size)
      refuse(file, "decode.prefill",
             "lists " + std::to_string(c.decode.prefill.size()) +
                 " prefill ranks but cluster.cp_size is " + std::to_string(c.cluster.cp_size) +
                 " (one \"host:port\" per CP rank)");
    check_token(c, file);
    check_tls_files(c.tls, file);
    check_decode_pool(c, file);
    break;
  }
}

} // namespace

std::string config_error::to_string() const {
  std::string out = file.empty() ? "<config>" : file;
  if (line != 0)
    out += ":" + std::to_string(line);
  if (!key.empty())
    out += ": " + key;
  return out + ": " + reason;
}

const char* to_string(config_role role) {
  switch (role) {
  case config_role::demo:
    return "demo";
  case config_role::prefill:
    return "prefill";
  case config_role::decode:
    return "decode";
  }
  return "unknown";
}

config_result load_config_string(std::string_view toml_text, const std::string& name) {
  try {
    // ASCII only: toml++ 3.3 reaches TOML_UNREACHABLE (undefined behaviour)
    // on some non-ASCII whitespace (found by tests/fuzz/config_fuzz), and no
    // key or value of ours needs more than ASCII.
    uint32_t line = 1;
    for (char ch : toml_text) {
      if (ch == '\n')
        ++line;
      if (static_cast<unsigned char>(ch) >= 0x80)
        refuse(name, "", "non-ASCII byte: config files must be plain ASCII", line);
    }
    toml::table root;
    try {
      root = toml::parse(toml_text, name);
    } catch (const toml::parse_error& e) {
      refuse(name, "", "TOML syntax: " + std::string{e.description()}, line_of(e.source()));
    }
    check_unknown_keys(root, name);
    deployment_config cfg;
    line_map lines;
    field_reader reader{root, name, lines};
    visit_fields(cfg, reader);
    try {
      check_general(cfg, name);
    } catch (refused& r) {
      if (auto it = lines.find(r.err.key); it != lines.end())
        r.err.line = it->second;
      throw;
    }
    return cfg;
  } catch (const refused& r) {
    return r.err;
  }
}

config_result load_config_file(const std::string& path) {
  // A directory opens and reads as 0 bytes, which would load as the defaults;
  // a FIFO or device could block. Only a regular file is a config.
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0)
    return config_error{path, "", std::string{"cannot open: "} + std::strerror(errno)};
  if (!S_ISREG(st.st_mode))
    return config_error{
        path, "", S_ISDIR(st.st_mode) ? "not a regular file (a directory)" : "not a regular file"};
  std::ifstream in{path, std::ios::binary};
  if (!in)
    return config_error{path, "", std::string{"cannot open: "} + std::strerror(errno)};
  std::ostringstream text;
  text << in.rdbuf();
  if (in.bad())
    return config_error{path, "", std::string{"cannot read: "} + std::strerror(errno)};
  return load_config_string(text.str(), path);
}

std::optional<config_error> validate(const deployment_config& cfg, const std::string& file) {
  try {
    check_general(cfg, file);
    return std::nullopt;
  } catch (const refused& r) {
    return r.err;
  }
}

std::optional<config_error> validate_for(const deployment_config& cfg, config_role role,
                                         const std::string& file) {
  try {
    check_general(cfg, file);
    check_role(cfg, role, file);
    return std::nullopt;
  } catch (const refused& r) {
    return r.err;
  }
}

std::string redacted(const std::string& secret) {
  if (secret.empty())
    return "";
  return std::string{redacted_prefix} + std::to_string(secret.size()) + " chars>";
}

std::string to_toml(const deployment_config& cfg, secrets mode) {
  toml_writer w{mode};
  visit_fields(cfg, w);
  return w.str();
}

bool same_config(const deployment_config& a, const deployment_config& b) {
  // to_toml prints every field exactly (shortest round-trip doubles), so equal
  // texts mean equal fields; one field list to maintain instead of two.
  return to_toml(a, secrets::reveal) == to_toml(b, secrets::reveal);
}

std::variant<endpoint_parts, std::string> split_endpoint(std::string_view endpoint) {
  auto colon = endpoint.rfind(':');
  if (colon == std::string_view::npos)
    return std::string{"missing \":port\""};
  auto host = endpoint.substr(0, colon);
  if (host.empty())
    return std::string{"missing host before \":\""};
  if (host.front() == '[') {
    if (host.back() != ']' || host.size() < 3)
      return std::string{"IPv6 host must be written \"[addr]:port\""};
    host = host.substr(1, host.size() - 2);
  } else if (host.find(':') != std::string_view::npos) {
    return std::string{"IPv6 host must be written \"[addr]:port\""};
  }
  const uint16_t port = parse_port(endpoint.substr(colon + 1));
  if (port == 0)
    return "port " + quoted(endpoint.substr(colon + 1)) + " is not a number in 1..65535";
  return endpoint_parts{std::string{host}, port};
}

caf::error to_error(const config_error& err) {
  return make_error(lserr::bad_input, err.to_string());
}

} // namespace layerstream
