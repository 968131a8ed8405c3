// main.cc: the packserve executable; subcommands live in their own files (commands.h).
#include <CLI/CLI.hpp>
#include <string>

#include "packserve/cli/commands.h"
#include "packserve/common/log.h"

int main(int argc, char** argv) {
  CLI::App app{
      "packserve: an LLM serving engine built around a packed, prefix-aware attention engine"};
  app.require_subcommand(1);
  packserve::init_logging();
  // Applied while parsing, so it is in force when the subcommand's callback runs.
  app.add_option_function<std::string>(
         "--log-level", [](const std::string& level) { packserve::set_log_level(level); },
         "log level of the lines written to stderr (default warn)")
      ->check(CLI::IsMember({"trace", "debug", "info", "warn", "error", "off"}));
  int exit_code = 0;
  packserve::cli::register_attention_commands(app, exit_code);
  packserve::cli::register_simulate_command(app, exit_code);
  packserve::cli::register_tokenize_command(app, exit_code);
  packserve::cli::register_bench_command(app, exit_code);
  packserve::cli::register_generate_command(app, exit_code);
  packserve::cli::register_make_dummy_model_command(app, exit_code);
  packserve::cli::register_serve_command(app, exit_code);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    const int rc = app.exit(e);
    return rc == 0 ? 0 : 2;
  }
  return exit_code;
}
