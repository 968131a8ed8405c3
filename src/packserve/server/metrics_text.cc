// metrics_text.cc: see metrics_text.h.
#include "packserve/server/metrics_text.h"

#include <charconv>
#include <cmath>

namespace packserve::server {
namespace {

void header(std::string& out, const std::string& name, const char* type, const char* help) {
  out += "# HELP " + name + " " + help + "\n# TYPE " + name + " " + type + "\n";
}

void sample(std::string& out, const std::string& name, double value,
            const std::string& labels = "") {
  out += name;
  if (!labels.empty()) out += "{" + labels + "}";
  out += " " + prometheus_number(value) + "\n";
}

void gauge(std::string& out, const std::string& name, const char* help, double value) {
  header(out, name, "gauge", help);
  sample(out, name, value);
}

void counter(std::string& out, const std::string& name, const char* help, double value) {
  header(out, name, "counter", help);
  sample(out, name, value);
}

void histogram(std::string& out, const std::string& name, const char* help,
               const engine::Histogram& h) {
  header(out, name, "histogram", help);
  if (h.counts.size() == h.upper_bounds_ms.size() + 1) {
    int64_t cumulative = 0;
    for (std::size_t i = 0; i < h.upper_bounds_ms.size(); ++i) {
      cumulative += h.counts[i];
      sample(out, name + "_bucket", static_cast<double>(cumulative),
             "le=\"" + prometheus_number(h.upper_bounds_ms[i] / 1000.0) + "\"");
    }
    cumulative += h.counts.back();
    sample(out, name + "_bucket", static_cast<double>(cumulative), "le=\"+Inf\"");
  }
  sample(out, name + "_sum", h.sum_ms / 1000.0);
  sample(out, name + "_count", static_cast<double>(h.count));
}

// Label values escape backslash, double quote and newline.
std::string escape_label(const std::string& value) {
  std::string out;
  for (char c : value) {
    if (c == '\\' || c == '"') {
      out += '\\';
      out += c;
    } else if (c == '\n') {
      out += "\\n";
    } else {
      out += c;
    }
  }
  return out;
}

}  // namespace

const char* server_state_name(ServerState state) {
  switch (state) {
    case ServerState::kLoading:
      return "loading";
    case ServerState::kReady:
      return "ready";
    case ServerState::kDraining:
      return "draining";
  }
  return "unknown";
}

std::string prometheus_number(double value) {
  if (std::isnan(value)) return "NaN";
  if (std::isinf(value)) return value > 0 ? "+Inf" : "-Inf";
  char buffer[64];
  auto result = std::to_chars(buffer, buffer + sizeof(buffer), value);
  return std::string(buffer, result.ptr);
}

std::string render_metrics_text(const MetricsSnapshot& snapshot) {
  std::string out;
  header(out, "packserve_server_state", "gauge", "1 for the server's current lifecycle state");
  for (ServerState s : {ServerState::kLoading, ServerState::kReady, ServerState::kDraining}) {
    sample(out, "packserve_server_state", s == snapshot.state ? 1.0 : 0.0,
           std::string("state=\"") + server_state_name(s) + "\"");
  }
  header(out, "packserve_http_requests_total", "counter",
         "HTTP requests answered, by route and status code");
  for (const HttpRequestCount& c : snapshot.http_requests) {
    sample(out, "packserve_http_requests_total", static_cast<double>(c.count),
           "route=\"" + escape_label(c.route) + "\",status=\"" + std::to_string(c.status) + "\"");
  }
  if (!snapshot.engine) return out;
  const engine::EngineMetrics& m = *snapshot.engine;
  header(out, "packserve_requests_finished_total", "counter",
         "generation requests that ended, by finish reason");
  const std::pair<const char*, int64_t> reasons[] = {{"stop", m.requests_finished_stop},
                                                     {"length", m.requests_finished_length},
                                                     {"cancelled", m.requests_cancelled},
                                                     {"error", m.requests_error},
                                                     {"kv_exhausted", m.requests_kv_exhausted}};
  for (const auto& [reason, count] : reasons) {
    sample(out, "packserve_requests_finished_total", static_cast<double>(count),
           std::string("reason=\"") + reason + "\"");
  }
  counter(out, "packserve_requests_rejected_total", "submissions the engine refused",
          static_cast<double>(m.requests_rejected));
  gauge(out, "packserve_num_requests_running", "requests holding KV pages (prefill or decode)",
        static_cast<double>(m.num_running));
  gauge(out, "packserve_num_requests_waiting", "requests waiting for admission",
        static_cast<double>(m.num_waiting));
  gauge(out, "packserve_kv_pages_used", "KV pages referenced by live requests",
        static_cast<double>(m.pages_in_use));
  gauge(out, "packserve_kv_pages_cached", "KV pages held only by the prefix cache",
        static_cast<double>(m.pages_cached));
  gauge(out, "packserve_kv_pages_free", "KV pages free", static_cast<double>(m.pages_free));
  gauge(out, "packserve_kv_pages_total", "KV pages in the pool",
        static_cast<double>(m.pages_total));
  gauge(out, "packserve_prefix_cache_hit_rate",
        "tokens served from the prefix cache / tokens looked up in it at admission",
        m.prefix_hit_rate());
  counter(out, "packserve_prefix_cache_queries_total",
          "tokens looked up in the prefix cache at admission",
          static_cast<double>(m.prefix_lookup_tokens));
  counter(out, "packserve_prefix_cache_hits_total", "tokens served from the prefix cache",
          static_cast<double>(m.prefix_hit_tokens));
  counter(out, "packserve_prompt_tokens_total", "prompt tokens of admitted requests",
          static_cast<double>(m.prompt_tokens_total));
  counter(out, "packserve_generation_tokens_total", "tokens generated",
          static_cast<double>(m.generation_tokens_total));
  gauge(out, "packserve_generation_tokens_per_second", "tokens generated per second, last ~10 s",
        m.generation_tokens_per_s);
  counter(out, "packserve_engine_steps_total", "engine steps run",
          static_cast<double>(m.num_steps));
  counter(out, "packserve_preemptions_total", "requests preempted for KV pages",
          static_cast<double>(m.num_preemptions));
  counter(out, "packserve_spec_decode_draft_tokens_total",
          "speculative draft tokens verified (--num-speculative-tokens)",
          static_cast<double>(m.spec_draft_tokens));
  counter(out, "packserve_spec_decode_accepted_tokens_total", "of which accepted",
          static_cast<double>(m.spec_accepted_tokens));
  counter(out, "packserve_engine_step_seconds_total",
          "engine thread host time in steps (schedule, forward, sample, outputs)", m.step_seconds);
  counter(out, "packserve_engine_forward_seconds_total", "of which the model forward",
          m.forward_seconds);
  counter(out, "packserve_engine_sample_seconds_total", "of which sampling the rows",
          m.sample_seconds);
  counter(out, "packserve_engine_masked_rows_total",
          "rows drawn under a structured output's token mask on the backend",
          static_cast<double>(m.masked_rows));
  counter(out, "packserve_engine_mask_fill_seconds_total",
          "host time filling those masks, while the device runs the step (within forward)",
          m.mask_fill_seconds);
  counter(out, "packserve_engine_graph_captures_total",
          "steps that captured a CUDA graph for a new step shape",
          static_cast<double>(m.backend.graph_captures));
  counter(out, "packserve_engine_graph_replays_total", "steps that replayed a captured CUDA graph",
          static_cast<double>(m.backend.graph_replays));
  counter(out, "packserve_engine_graph_evictions_total",
          "captured CUDA graphs dropped, least recently used, to keep at most 128",
          static_cast<double>(m.backend.graph_evictions));
  counter(out, "packserve_engine_graph_capture_seconds_total",
          "host time of the captures and instantiations", m.backend.capture_seconds);
  histogram(out, "packserve_time_to_first_token_seconds", "arrival to first output token",
            m.ttft_ms);
  histogram(out, "packserve_time_per_output_token_seconds",
            "(last token - first token) / (output tokens - 1)", m.tpot_ms);
  histogram(out, "packserve_e2e_request_latency_seconds", "arrival to last output token", m.e2e_ms);
  return out;
}

}  // namespace packserve::server
