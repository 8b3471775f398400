// layerstream command line: one CLI11 app, one subcommand per job.
#include <iostream>
#include <string>

#include <CLI/CLI.hpp>

#include "cli/blocks_command.hpp"

int main(int argc, char** argv) {
  CLI::App app{"layerstream: per-layer, overlapped KV-cache transfer for disaggregated LLM serving"};
  app.require_subcommand(1);

  std::string blocks_input;
  auto* blocks = app.add_subcommand(
    "blocks", "Print the (src, dst, len) blocks of one request and layer as JSON "
              "(SGLang/Mooncake transfer math)");
  blocks->add_option("--input", blocks_input, "JSON file: one input object or an array of them")
    ->required();

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    // --help prints and exits 0; every other parse error is a usage error (2).
    auto code = app.exit(e);
    return code == 0 ? 0 : 2;
  }
  if (*blocks)
    return layerstream::cli::run_blocks(blocks_input, std::cout, std::cerr);
  return 2;
}
