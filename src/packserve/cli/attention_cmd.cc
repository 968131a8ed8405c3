// attention_cmd.cc: `packserve attention ...` (placeholder until the attention CLI lands).
#include "packserve/cli/commands.h"

namespace packserve::cli {
void register_attention_commands(CLI::App& app, int& exit_code) {
  auto* attention = app.add_subcommand("attention", "attention engine: plan, verify");
  attention->require_subcommand(1);
  (void)exit_code;
}
}  // namespace packserve::cli
