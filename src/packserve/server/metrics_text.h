// metrics_text.h: renders GET /metrics in the Prometheus text exposition format (0.0.4):
// `# HELP`, `# TYPE`, then samples. Names and meanings are fixed in docs/server.md.
// Histograms come from engine::Histogram (per-bucket counts in ms, +Inf last) and are
// exported cumulatively in seconds (Prometheus' base unit): the bucket `le` of an upper bound
// of b ms is b / 1000.
// A histogram whose counts do not have one entry per bound plus +Inf is exported without
// buckets (only _sum and _count), never read out of bounds.
// Thread-safety: pure functions over values.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "packserve/engine/engine.h"

namespace packserve::server {

// Requests answered by the HTTP layer, by route and status.
struct HttpRequestCount {
  std::string route;  // "/v1/completions", "/v1/chat/completions", ..., "other"
  int status = 200;
  int64_t count = 0;
};

// The server's lifecycle, exported as packserve_server_state{state="..."} 1.
enum class ServerState { kLoading, kReady, kDraining };
const char* server_state_name(ServerState state);

struct MetricsSnapshot {
  ServerState state = ServerState::kLoading;
  std::optional<engine::EngineMetrics> engine;  // absent while loading
  std::vector<HttpRequestCount> http_requests;
};

std::string render_metrics_text(const MetricsSnapshot& snapshot);

// Prometheus number formatting: shortest round-trip decimal, "+Inf", "-Inf", "NaN".
std::string prometheus_number(double value);

}  // namespace packserve::server
