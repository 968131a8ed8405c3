// request_trace.h: request traces (arrival time, prompt, output length) loaded from the public
// workload formats in ../shared/traces (README there): Mooncake JSONL, Azure LLM inference CSV
// (2023 and 2024 timestamp forms) and BurstGPT CSV.
//
// Owns: the in-memory trace, the loaders, format detection, windowing and time scaling, and
// the deterministic materialization of prompt token ids.
//
// Prompts are compact: a request's prompt is a list of segments (key, num_tokens). Token i of
// a segment is a pure function of (key, i), so equal keys give equal tokens:
//   * Mooncake: one segment per 512-token hash block (key = the block's hash id; the last
//     block is partial). Hash ids are prefix-chained, so equal ids at equal positions mean
//     equal prefixes, and the KV manager's page hashes see the sharing.
//   * Azure, BurstGPT: one segment with a key unique to the request (no sharing is known).
// Materialize at arrival and drop at finish, so 100k-request traces fit in memory.
//
// Time: arrival_ms is relative to the first row of the file (the 2023/2024 Azure wall-clock
// timestamps, BurstGPT seconds and Mooncake milliseconds alike). A window selects rows with
// start_s <= t < start_s + duration_s (file time), then at most max_requests of them; the
// selected arrivals become (t - start_s) * time_scale.
// Invariants of a loaded trace: arrivals non-decreasing; input_tokens >= 1 and
// output_tokens >= 1 (zeros in the file are raised to 1 and counted); sum of segment tokens ==
// input_tokens.
// Thread-safety: values and pure functions.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "packserve/common/status.h"

namespace packserve::trace {

enum class TraceFormat { kMooncake, kAzure, kBurstGpt };
std::string_view trace_format_name(TraceFormat format);  // "mooncake" | "azure" | "burstgpt"
Result<TraceFormat> parse_trace_format(std::string_view name);

// Mooncake's hash block size, tokens.
inline constexpr int32_t kMooncakeBlockTokens = 512;

struct PromptSegment {
  uint64_t key = 0;        // token i of the segment = f(key, i); see materialize_prompt
  int32_t num_tokens = 0;  // >= 1
};

struct TraceRequest {
  int64_t line_number = 0;  // 1-based line of the file it came from
  double arrival_ms = 0.0;  // after windowing and time scaling
  int32_t input_tokens = 0;
  int32_t output_tokens = 0;
  std::vector<PromptSegment> segments;
};

struct Trace {
  TraceFormat format = TraceFormat::kMooncake;
  std::string source;  // file path or the name given to parse_trace_text
  std::vector<TraceRequest> requests;
  int64_t num_rows_read = 0;           // data rows parsed (stops early past the window)
  int64_t num_zero_input_raised = 0;   // rows with input tokens 0, raised to 1
  int64_t num_zero_output_raised = 0;  // rows with output tokens 0, raised to 1
};

struct TraceWindow {
  double start_s = 0.0;      // file time of the window start, s; >= 0
  double duration_s = 0.0;   // window length, s; 0 = to the end of the file
  int64_t max_requests = 0;  // at most this many requests; 0 = no limit
  double time_scale = 1.0;   // multiplies the (rebased) arrival times; > 0
  Status validate() const;
};

// Loads `path`; `format` empty = detect_trace_format. Errors: kNotFound (file), and
// kInvalidArgument "PATH:LINE: field 'F': expected ..., got ..." for malformed rows.
Result<Trace> load_trace(const std::string& path, std::optional<TraceFormat> format,
                         const TraceWindow& window);
// Same on text in memory; `name` stands in for the path in messages.
Result<Trace> parse_trace_text(std::string_view text, TraceFormat format, const std::string& name,
                               const TraceWindow& window);

// From the extension (.jsonl/.json -> mooncake) and the first line (a CSV header with
// ContextTokens -> azure, with "Request tokens" -> burstgpt). Errors name what was seen.
Result<TraceFormat> detect_trace_format(const std::string& path, std::string_view first_line);

// Seconds since 1970-01-01 UTC of "YYYY-MM-DD HH:MM:SS[.f{1,9}][Z|+HH:MM|-HH:MM]" (Azure 2023
// and 2024 forms; 'T' is accepted for the space).
Result<double> parse_wall_clock_s(std::string_view text);
// The same in integer nanoseconds (exact for the 7-digit fractions of the Azure 2023 trace).
Result<int64_t> parse_wall_clock_ns(std::string_view text);

// Appends the request's input_tokens prompt token ids, each in [0, vocab_size), to `out`.
// Deterministic across runs and platforms; equal segment keys give equal tokens.
void materialize_prompt(const TraceRequest& request, int32_t vocab_size, std::vector<int32_t>& out);

}  // namespace packserve::trace
