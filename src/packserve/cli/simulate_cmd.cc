// simulate_cmd.cc: `packserve simulate ...` (placeholder until the simulator lands).
#include "packserve/cli/commands.h"

namespace packserve::cli {
void register_simulate_command(CLI::App& app, int& exit_code) {
  (void)app;
  (void)exit_code;
}
}  // namespace packserve::cli
