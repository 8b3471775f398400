// The TOML loader of deployment_config (config/config.hpp).
//
// Strict on purpose: a deployment file that names an unknown table or key, or
// gives a value of the wrong type or range, is refused with one line naming
// the file, the key and the reason, instead of silently running with a default.
//
// Two layers of checks:
//  - load_config_*: syntax, keys, types, and every role-independent invariant
//    (geometry, ranges, enumerations; see validate()).
//  - validate_for(role): what one process kind needs on top (a prefill rank's
//    port, a decode node's prefill list, pools big enough for the workload).
// The CLI loads, applies its flag overrides, then calls validate_for(), so the
// overridden values get the same checks as the file's.
//
// All functions are pure and thread-safe; nothing here logs.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <variant>

#include <caf/error.hpp>

#include "config/config.hpp"

namespace layerstream {

/// Why a config was refused. `key` is the dotted TOML key ("model.layers",
/// "decode.prefill[1]"), empty for whole-file problems (syntax, unreadable).
struct config_error {
  std::string file;
  std::string key;
  std::string reason;
  /// 1-based line in `file` where known, 0 otherwise.
  uint32_t line = 0;

  /// One line: `file[:line]: key: reason` (parts that are empty are left out).
  std::string to_string() const;
};

/// Either the config or why it was refused.
using config_result = std::variant<deployment_config, config_error>;

/// Which process the config is for; each has its own required fields.
enum class config_role {
  /// Prefill and decode in one process (`layerstream demo`).
  demo,
  /// One prefill rank (publishes its authentication gate on prefill.host:prefill.port).
  prefill,
  /// One decode node (connects to every decode.prefill endpoint).
  decode,
};

const char* to_string(config_role role);

/// Reads and loads one TOML file; `path` is the file name used in errors.
config_result load_config_file(const std::string& path);

/// Loads TOML text; `name` stands for the file in errors.
config_result load_config_string(std::string_view toml, const std::string& name);

/// The TOML text of the built-in demo default: config/demo.toml, embedded at
/// build time (one source; a test checks they are equal).
const char* embedded_demo_config();

/// The role-independent checks that load_config_* applies (geometry, ranges,
/// enumerations, durations > 0). `file` is only used in the error.
std::optional<config_error> validate(const deployment_config& cfg, const std::string& file = "");

/// validate() plus what `role` requires; call it after CLI overrides.
std::optional<config_error> validate_for(const deployment_config& cfg, config_role role,
                                         const std::string& file = "");

/// Whether to_toml prints the cluster token or only its length.
enum class secrets {
  /// `token = "<redacted: 24 chars>"`: for anything printed or logged.
  redact,
  /// The token itself: for writing a config file that loads back equal.
  reveal,
};

/// The token as printed: "<redacted: N chars>", or "" when it is empty.
std::string redacted(const std::string& secret);

/// The config as TOML with every key (for logs and reports: the token is
/// redacted unless `mode` is reveal); loading a revealed text gives back an
/// equal config.
std::string to_toml(const deployment_config& cfg, secrets mode = secrets::redact);

/// Field-by-field equality (deployment_config has no operator==).
bool same_config(const deployment_config& a, const deployment_config& b);

/// A control-plane endpoint split into the host CAF and the net guard take
/// (an IPv6 address without its brackets) and the port.
struct endpoint_parts {
  std::string host;
  uint16_t port = 0;
};

/// "host:port" or "[v6addr]:port" (decode.prefill's syntax) split, or why it
/// is not one. validate() refuses a config whose endpoints do not split.
std::variant<endpoint_parts, std::string> split_endpoint(std::string_view endpoint);

/// The config_error as a layerstream error (lserr::bad_input, message = to_string()).
caf::error to_error(const config_error& err);

} // namespace layerstream
