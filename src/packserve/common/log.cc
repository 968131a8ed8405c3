#include "packserve/common/log.h"

#include <string>

namespace packserve {
bool set_log_level(std::string_view level) {
  const auto parsed = spdlog::level::from_str(std::string(level));
  if (parsed == spdlog::level::off && level != "off") return false;
  spdlog::set_level(parsed);
  return true;
}
}  // namespace packserve
