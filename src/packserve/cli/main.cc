// main.cc: the packserve executable; subcommands live in their own files (commands.h).
#include <CLI/CLI.hpp>

#include <cstdio>
#include <string>

#include "packserve/cli/commands.h"
#include "packserve/common/log.h"

int main(int argc, char** argv) {
  CLI::App app{"packserve: an LLM serving engine built around a packed, prefix-aware attention engine"};
  app.require_subcommand(1);
  std::string log_level = "warn";
  app.add_option("--log-level", log_level, "trace|debug|info|warn|error|off")
      ->capture_default_str();
  int exit_code = 0;
  packserve::cli::register_attention_commands(app, exit_code);
  packserve::cli::register_simulate_command(app, exit_code);
  packserve::cli::register_tokenize_command(app, exit_code);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    const int rc = app.exit(e);
    return rc == 0 ? 0 : 2;
  }
  (void)log_level;
  return exit_code;
}
