#include "packserve/common/log.h"

#include <spdlog/sinks/stdout_color_sinks.h>

#include <string>

namespace packserve {
bool set_log_level(std::string_view level) {
  const auto parsed = spdlog::level::from_str(std::string(level));
  if (parsed == spdlog::level::off && level != "off") return false;
  spdlog::set_level(parsed);
  return true;
}

void init_logging() {
  spdlog::set_default_logger(spdlog::stderr_color_mt("packserve"));
  spdlog::set_level(spdlog::level::warn);
}
}  // namespace packserve
