// log.h: one line per event, component tag then key=value pairs (STYLE.md §6), over spdlog.
//   PS_LOG_INFO("sched", "req={} admitted prompt_tokens={}", id, n);
// Levels: error (lost or refused), warn (served, degraded), info (lifecycle), debug (per
// step), trace (per work item). Thread-safety: spdlog's default logger is thread-safe.
#pragma once

#include <spdlog/spdlog.h>

#include <string_view>

namespace packserve {
// Sets the level from "trace|debug|info|warn|error|off"; returns false for an unknown name.
bool set_log_level(std::string_view level);
// Makes the default logger write to stderr (stdout carries the commands' JSON output) at
// level `warn`. Call once at program start, before any thread logs.
void init_logging();
}  // namespace packserve

#define PS_LOG_AT(level, tag, fmt_str, ...) \
  ::spdlog::log(level, "[" tag "] " fmt_str __VA_OPT__(, ) __VA_ARGS__)
#define PS_LOG_ERROR(tag, ...) PS_LOG_AT(::spdlog::level::err, tag, __VA_ARGS__)
#define PS_LOG_WARN(tag, ...) PS_LOG_AT(::spdlog::level::warn, tag, __VA_ARGS__)
#define PS_LOG_INFO(tag, ...) PS_LOG_AT(::spdlog::level::info, tag, __VA_ARGS__)
#define PS_LOG_DEBUG(tag, ...) PS_LOG_AT(::spdlog::level::debug, tag, __VA_ARGS__)
#define PS_LOG_TRACE(tag, ...) PS_LOG_AT(::spdlog::level::trace, tag, __VA_ARGS__)
