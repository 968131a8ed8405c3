// commands.h: each subcommand registers itself on the CLI11 app from its own file, so a
// command's flags, help text and behaviour live together. Exit codes: 0 success, 1 a check
// failed (e.g. a verify mismatch), 2 bad input (message on stderr).
#pragma once

#include <CLI/CLI.hpp>

namespace packserve::cli {

// `packserve attention verify|plan ...` (attention_cmd.cc)
void register_attention_commands(CLI::App& app, int& exit_code);
// `packserve simulate ...` (simulate_cmd.cc)
void register_simulate_command(CLI::App& app, int& exit_code);
// `packserve tokenize ...` (tokenize_cmd.cc)
void register_tokenize_command(CLI::App& app, int& exit_code);
// `packserve bench ...` (bench_cmd.cc)
void register_bench_command(CLI::App& app, int& exit_code);
// `packserve generate ...` (generate_cmd.cc)
void register_generate_command(CLI::App& app, int& exit_code);
// `packserve make-dummy-model ...` (make_dummy_model_cmd.cc)
void register_make_dummy_model_command(CLI::App& app, int& exit_code);
// `packserve serve ...` (serve_cmd.cc)
void register_serve_command(CLI::App& app, int& exit_code);

}  // namespace packserve::cli
