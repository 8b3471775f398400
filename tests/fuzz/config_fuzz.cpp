// libFuzzer target: the TOML config loader on arbitrary text. Never a crash;
// a config it accepts must survive validate_for (every role) and the
// to_toml round trip unchanged (token revealed).
#include <cstddef>
#include <cstdint>
#include <string_view>
#include <variant>

#include "config/loader.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace layerstream;
  auto res =
      load_config_string(std::string_view{reinterpret_cast<const char*>(data), size}, "fuzz");
  auto* cfg = std::get_if<deployment_config>(&res);
  if (cfg == nullptr)
    return 0;
  for (auto role : {config_role::demo, config_role::prefill, config_role::decode})
    (void)validate_for(*cfg, role, "fuzz");
  auto again = load_config_string(to_toml(*cfg, secrets::reveal), "round trip");
  auto* back = std::get_if<deployment_config>(&again);
  if (back == nullptr || !same_config(*cfg, *back))
    __builtin_trap(); // an accepted config must print as a file that loads back equal
  return 0;
}
