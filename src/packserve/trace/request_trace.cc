// request_trace.cc: trace loaders, format detection, windowing; contract in request_trace.h.
#include "packserve/trace/request_trace.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

namespace packserve::trace {
namespace {

std::string quote_text(std::string_view s) {
  constexpr size_t kMax = 60;
  std::string out = "\"";
  out += s.substr(0, kMax);
  if (s.size() > kMax) out += "...";
  out += "\"";
  return out;
}

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t' || s.front() == '\r')) {
    s.remove_prefix(1);
  }
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t' || s.back() == '\r')) {
    s.remove_suffix(1);
  }
  return s;
}

// Where a row came from, for messages: "PATH:LINE: field 'F': ...".
struct RowContext {
  const std::string* source;
  int64_t line_number;
  Status error(std::string_view field, std::string_view expected, std::string_view got) const {
    return invalid_argument(*source + ":" + std::to_string(line_number) + ": field '" +
                            std::string(field) + "': expected " + std::string(expected) + ", got " +
                            std::string(got));
  }
};

Result<int64_t> parse_int(std::string_view text, const RowContext& ctx, std::string_view field) {
  const std::string_view t = trim(text);
  int64_t v = 0;
  const auto [ptr, ec] = std::from_chars(t.data(), t.data() + t.size(), v);
  if (ec != std::errc() || ptr != t.data() + t.size() || t.empty() || v < 0) {
    return ctx.error(field, "a non-negative integer", quote_text(text));
  }
  return v;
}

Result<double> parse_seconds(std::string_view text, const RowContext& ctx, std::string_view field) {
  const std::string_view t = trim(text);
  double v = 0;
  const auto [ptr, ec] = std::from_chars(t.data(), t.data() + t.size(), v);
  if (ec != std::errc() || ptr != t.data() + t.size() || t.empty() || !std::isfinite(v) || v < 0) {
    return ctx.error(field, "a non-negative number of seconds", quote_text(text));
  }
  return v;
}

std::vector<std::string_view> split_csv(std::string_view line) {
  std::vector<std::string_view> out;
  size_t start = 0;
  while (true) {
    const size_t comma = line.find(',', start);
    if (comma == std::string_view::npos) {
      out.push_back(line.substr(start));
      return out;
    }
    out.push_back(line.substr(start, comma - start));
    start = comma + 1;
  }
}

// 2^-1-ish mixing of 64 bits (splitmix64 finalizer): the token generator.
uint64_t mix64(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

// Keys of per-request unique prompts live in their own half of the key space.
constexpr uint64_t kUniqueKeyBit = uint64_t{1} << 63;

// One parsed row before windowing: file time in seconds and the request.
struct Row {
  int64_t time_ns = 0;  // file time; integer so wall-clock epochs keep sub-microsecond detail
  TraceRequest request;
};

// Streams rows through the window. Rows must arrive in non-decreasing file time.
class WindowSink {
 public:
  WindowSink(const TraceWindow& window, Trace& trace) : window_(window), trace_(trace) {}

  // Returns false once no later row can enter the window (the caller stops reading).
  bool add(Row row, int64_t first_time_ns) {
    const double t = static_cast<double>(row.time_ns - first_time_ns) * 1e-9;
    if (t < window_.start_s) return true;
    if (window_.duration_s > 0 && t >= window_.start_s + window_.duration_s) return false;
    row.request.arrival_ms = (t - window_.start_s) * window_.time_scale * 1000.0;
    trace_.requests.push_back(std::move(row.request));
    return window_.max_requests == 0 ||
           static_cast<int64_t>(trace_.requests.size()) < window_.max_requests;
  }

 private:
  const TraceWindow& window_;
  Trace& trace_;
};

void fill_unique_prompt(TraceRequest& r) {
  r.segments.push_back(
      PromptSegment{kUniqueKeyBit | static_cast<uint64_t>(r.line_number), r.input_tokens});
}

Status raise_zeros(TraceRequest& r, int64_t input, int64_t output, Trace& trace,
                   const RowContext& ctx) {
  constexpr int64_t kMaxTokens = int64_t{1} << 30;
  if (input > kMaxTokens) return ctx.error("input tokens", "<= 2^30", std::to_string(input));
  if (output > kMaxTokens) return ctx.error("output tokens", "<= 2^30", std::to_string(output));
  if (input == 0) ++trace.num_zero_input_raised;
  if (output == 0) ++trace.num_zero_output_raised;
  r.input_tokens = static_cast<int32_t>(std::max<int64_t>(1, input));
  r.output_tokens = static_cast<int32_t>(std::max<int64_t>(1, output));
  return ok_status();
}

Result<Row> parse_mooncake_row(std::string_view line, const RowContext& ctx, Trace& trace) {
  const nlohmann::json j = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) {
    return ctx.error("(line)", "a JSON object", quote_text(line));
  }
  auto get_int = [&](const char* key) -> Result<int64_t> {
    const auto it = j.find(key);
    if (it == j.end()) return ctx.error(key, "an integer", "nothing (missing)");
    if (!it->is_number_integer() || it->get<int64_t>() < 0) {
      return ctx.error(key, "a non-negative integer", quote_text(it->dump()));
    }
    return it->get<int64_t>();
  };
  Row row;
  const auto ts = j.find("timestamp");
  if (ts == j.end()) return ctx.error("timestamp", "a number of ms", "nothing (missing)");
  if (!ts->is_number() || ts->get<double>() < 0) {
    return ctx.error("timestamp", "a non-negative number of ms", quote_text(ts->dump()));
  }
  row.time_ns = std::llround(ts->get<double>() * 1e6);
  PS_ASSIGN_OR_RETURN(const int64_t input, get_int("input_length"));
  PS_ASSIGN_OR_RETURN(const int64_t output, get_int("output_length"));
  TraceRequest& r = row.request;
  r.line_number = ctx.line_number;
  PS_RETURN_IF_ERROR(raise_zeros(r, input, output, trace, ctx));
  const auto ids = j.find("hash_ids");
  if (ids == j.end()) return ctx.error("hash_ids", "an array of integers", "nothing (missing)");
  if (!ids->is_array())
    return ctx.error("hash_ids", "an array of integers", quote_text(ids->dump()));
  const int64_t want = (r.input_tokens + kMooncakeBlockTokens - 1) / kMooncakeBlockTokens;
  if (static_cast<int64_t>(ids->size()) != want) {
    return ctx.error("hash_ids", "ceil(input_length / 512) = " + std::to_string(want) + " entries",
                     std::to_string(ids->size()) + " entries");
  }
  r.segments.reserve(ids->size());
  int32_t remaining = r.input_tokens;
  for (size_t k = 0; k < ids->size(); ++k) {
    const nlohmann::json& id = (*ids)[k];
    if (!id.is_number_integer() || id.get<int64_t>() < 0) {
      return ctx.error("hash_ids[" + std::to_string(k) + "]", "a non-negative integer",
                       quote_text(id.dump()));
    }
    const int32_t n = std::min(remaining, kMooncakeBlockTokens);
    r.segments.push_back(PromptSegment{static_cast<uint64_t>(id.get<int64_t>()), n});
    remaining -= n;
  }
  return row;
}

struct CsvColumns {
  int time = -1, input = -1, output = -1;
  size_t count = 0;
};

Result<CsvColumns> csv_columns(std::string_view header, TraceFormat format, const RowContext& ctx) {
  const std::vector<std::string_view> names = split_csv(header);
  CsvColumns c;
  c.count = names.size();
  const bool azure = format == TraceFormat::kAzure;
  const std::string_view time_name = azure ? "TIMESTAMP" : "Timestamp";
  const std::string_view input_name = azure ? "ContextTokens" : "Request tokens";
  const std::string_view output_name = azure ? "GeneratedTokens" : "Response tokens";
  for (size_t i = 0; i < names.size(); ++i) {
    const std::string_view n = trim(names[i]);
    if (n == time_name) c.time = static_cast<int>(i);
    if (n == input_name) c.input = static_cast<int>(i);
    if (n == output_name) c.output = static_cast<int>(i);
  }
  if (c.time < 0 || c.input < 0 || c.output < 0) {
    return ctx.error("(header)",
                     "columns " + std::string(time_name) + ", " + std::string(input_name) + ", " +
                         std::string(output_name),
                     quote_text(header));
  }
  return c;
}

Result<Row> parse_csv_row(std::string_view line, const CsvColumns& cols, TraceFormat format,
                          const RowContext& ctx, Trace& trace) {
  const std::vector<std::string_view> f = split_csv(line);
  if (f.size() != cols.count) {
    return ctx.error("(line)", std::to_string(cols.count) + " comma-separated fields",
                     std::to_string(f.size()) + " in " + quote_text(line));
  }
  Row row;
  if (format == TraceFormat::kAzure) {
    Result<int64_t> t = parse_wall_clock_ns(trim(f[cols.time]));
    if (!t.ok()) return ctx.error("TIMESTAMP", t.status().message(), quote_text(f[cols.time]));
    row.time_ns = *t;
  } else {
    PS_ASSIGN_OR_RETURN(const double seconds, parse_seconds(f[cols.time], ctx, "Timestamp"));
    row.time_ns = std::llround(seconds * 1e9);
  }
  const bool azure = format == TraceFormat::kAzure;
  PS_ASSIGN_OR_RETURN(const int64_t input,
                      parse_int(f[cols.input], ctx, azure ? "ContextTokens" : "Request tokens"));
  PS_ASSIGN_OR_RETURN(
      const int64_t output,
      parse_int(f[cols.output], ctx, azure ? "GeneratedTokens" : "Response tokens"));
  row.request.line_number = ctx.line_number;
  PS_RETURN_IF_ERROR(raise_zeros(row.request, input, output, trace, ctx));
  fill_unique_prompt(row.request);
  return row;
}

// Parses lines from `next_line` (returns false at the end) into `trace`.
template <typename NextLine>
Status parse_lines(NextLine&& next_line, TraceFormat format, const TraceWindow& window,
                   Trace& trace) {
  PS_RETURN_IF_ERROR(window.validate());
  WindowSink sink(window, trace);
  std::string_view line;
  int64_t line_number = 0;
  RowContext ctx{&trace.source, 0};
  std::optional<CsvColumns> cols;
  std::optional<int64_t> first_time_ns;
  int64_t prev_time_ns = 0;
  while (next_line(line)) {
    ++line_number;
    ctx.line_number = line_number;
    if (trim(line).empty()) continue;
    if (format != TraceFormat::kMooncake && !cols) {
      PS_ASSIGN_OR_RETURN(cols, csv_columns(line, format, ctx));
      continue;
    }
    Result<Row> row = format == TraceFormat::kMooncake
                          ? parse_mooncake_row(line, ctx, trace)
                          : parse_csv_row(line, *cols, format, ctx, trace);
    if (!row.ok()) return row.status();
    ++trace.num_rows_read;
    if (!first_time_ns) first_time_ns = row->time_ns;
    if (row->time_ns < prev_time_ns) {
      return ctx.error(
          "timestamp", "rows sorted by time (>= previous row's time)",
          "a time " + std::to_string(double(prev_time_ns - row->time_ns) * 1e-9) + " s earlier");
    }
    prev_time_ns = row->time_ns;
    if (!sink.add(std::move(*row), *first_time_ns)) break;
  }
  if (format != TraceFormat::kMooncake && !cols) {
    return invalid_argument(trace.source + ": empty file, expected a CSV header");
  }
  return ok_status();
}

}  // namespace

std::string_view trace_format_name(TraceFormat format) {
  switch (format) {
    case TraceFormat::kMooncake:
      return "mooncake";
    case TraceFormat::kAzure:
      return "azure";
    case TraceFormat::kBurstGpt:
      return "burstgpt";
  }
  return "unknown";
}

Result<TraceFormat> parse_trace_format(std::string_view name) {
  if (name == "mooncake") return TraceFormat::kMooncake;
  if (name == "azure") return TraceFormat::kAzure;
  if (name == "burstgpt") return TraceFormat::kBurstGpt;
  return invalid_argument("format: expected one of mooncake|azure|burstgpt, got " +
                          quote_text(name));
}

Status TraceWindow::validate() const {
  if (!(start_s >= 0) || !std::isfinite(start_s)) {
    return invalid_argument("window.start_s: expected a finite number >= 0, got " +
                            std::to_string(start_s));
  }
  if (!(duration_s >= 0) || !std::isfinite(duration_s)) {
    return invalid_argument(
        "window.duration_s: expected a finite number >= 0 (0 = to the end), "
        "got " +
        std::to_string(duration_s));
  }
  if (max_requests < 0) {
    return invalid_argument("window.max_requests: expected >= 0 (0 = no limit), got " +
                            std::to_string(max_requests));
  }
  if (!(time_scale > 0) || !std::isfinite(time_scale)) {
    return invalid_argument("window.time_scale: expected a finite number > 0, got " +
                            std::to_string(time_scale));
  }
  return ok_status();
}

Result<int64_t> parse_wall_clock_ns(std::string_view text) {
  // YYYY-MM-DD HH:MM:SS, fixed positions.
  auto digits = [&](size_t pos, size_t n, int64_t& out) {
    if (pos + n > text.size()) return false;
    out = 0;
    for (size_t i = pos; i < pos + n; ++i) {
      if (text[i] < '0' || text[i] > '9') return false;
      out = out * 10 + (text[i] - '0');
    }
    return true;
  };
  const std::string expected = "YYYY-MM-DD HH:MM:SS[.fraction][+HH:MM]";
  int64_t y = 0, mo = 0, d = 0, h = 0, mi = 0, s = 0;
  if (text.size() < 19 || !digits(0, 4, y) || text[4] != '-' || !digits(5, 2, mo) ||
      text[7] != '-' || !digits(8, 2, d) || (text[10] != ' ' && text[10] != 'T') ||
      !digits(11, 2, h) || text[13] != ':' || !digits(14, 2, mi) || text[16] != ':' ||
      !digits(17, 2, s) || mo < 1 || mo > 12 || d < 1 || d > 31 || h > 23 || mi > 59 || s > 60) {
    return invalid_argument(expected);
  }
  size_t pos = 19;
  int64_t fraction_ns = 0;
  if (pos < text.size() && text[pos] == '.') {
    ++pos;
    int64_t scale = 100000000;
    const size_t begin = pos;
    while (pos < text.size() && text[pos] >= '0' && text[pos] <= '9') {
      fraction_ns += (text[pos] - '0') * scale;
      scale /= 10;
      ++pos;
    }
    if (pos == begin || pos - begin > 9) return invalid_argument(expected);
  }
  int64_t offset_s = 0;
  if (pos < text.size()) {
    const char sign = text[pos];
    int64_t oh = 0, om = 0;
    if (sign == 'Z' && pos + 1 == text.size()) {
      pos += 1;
    } else if ((sign == '+' || sign == '-') && pos + 6 == text.size() && digits(pos + 1, 2, oh) &&
               text[pos + 3] == ':' && digits(pos + 4, 2, om)) {
      offset_s = (sign == '+' ? 1 : -1) * (oh * 3600 + om * 60);
      pos += 6;
    } else {
      return invalid_argument(expected);
    }
  }
  // Days from civil (Howard Hinnant's algorithm), proleptic Gregorian.
  const int64_t yy = y - (mo <= 2 ? 1 : 0);
  const int64_t era = (yy >= 0 ? yy : yy - 399) / 400;
  const int64_t yoe = yy - era * 400;
  const int64_t doy = (153 * (mo + (mo > 2 ? -3 : 9)) + 2) / 5 + d - 1;
  const int64_t doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
  const int64_t days = era * 146097 + doe - 719468;
  const int64_t whole = days * 86400 + h * 3600 + mi * 60 + s - offset_s;
  return whole * 1000000000 + fraction_ns;
}

Result<double> parse_wall_clock_s(std::string_view text) {
  PS_ASSIGN_OR_RETURN(const int64_t ns, parse_wall_clock_ns(text));
  return static_cast<double>(ns) * 1e-9;
}

Result<TraceFormat> detect_trace_format(const std::string& path, std::string_view first_line) {
  const auto ends_with = [&](std::string_view suffix) {
    return path.size() >= suffix.size() &&
           std::string_view(path).substr(path.size() - suffix.size()) == suffix;
  };
  const std::string_view line = trim(first_line);
  if (ends_with(".jsonl") || ends_with(".json") || (!line.empty() && line.front() == '{')) {
    if (!line.empty() && line.front() == '{') return TraceFormat::kMooncake;
    return invalid_argument(path + ": looks like JSONL by its extension but line 1 is " +
                            quote_text(line) + ", expected a JSON object (Mooncake)");
  }
  if (line.find("ContextTokens") != std::string_view::npos) return TraceFormat::kAzure;
  if (line.find("Request tokens") != std::string_view::npos) return TraceFormat::kBurstGpt;
  return invalid_argument(path + ": cannot detect the trace format from line 1 " +
                          quote_text(line) +
                          ": expected a Mooncake JSON object, an Azure header "
                          "(TIMESTAMP,ContextTokens,GeneratedTokens) or a BurstGPT header "
                          "(Timestamp,...,Request tokens,Response tokens,...); pass --format");
}

Result<Trace> parse_trace_text(std::string_view text, TraceFormat format, const std::string& name,
                               const TraceWindow& window) {
  Trace trace;
  trace.format = format;
  trace.source = name;
  size_t pos = 0;
  auto next_line = [&](std::string_view& line) {
    if (pos >= text.size()) return false;
    size_t end = text.find('\n', pos);
    if (end == std::string_view::npos) end = text.size();
    line = text.substr(pos, end - pos);
    pos = end + 1;
    return true;
  };
  PS_RETURN_IF_ERROR(parse_lines(next_line, format, window, trace));
  return trace;
}

Result<Trace> load_trace(const std::string& path, std::optional<TraceFormat> format,
                         const TraceWindow& window) {
  std::ifstream in(path);
  if (!in) return not_found(path + ": cannot open the trace file");
  std::string first;
  std::getline(in, first);
  if (!format) {
    PS_ASSIGN_OR_RETURN(format, detect_trace_format(path, first));
  }
  in.clear();
  in.seekg(0);
  Trace trace;
  trace.format = *format;
  trace.source = path;
  std::string buffer;
  auto next_line = [&](std::string_view& line) {
    if (!std::getline(in, buffer)) return false;
    line = buffer;
    return true;
  };
  PS_RETURN_IF_ERROR(parse_lines(next_line, *format, window, trace));
  return trace;
}

void materialize_prompt(const TraceRequest& request, int32_t vocab_size,
                        std::vector<int32_t>& out) {
  const auto vocab = static_cast<uint64_t>(vocab_size > 0 ? vocab_size : 1);
  out.reserve(out.size() + static_cast<size_t>(request.input_tokens));
  for (const PromptSegment& seg : request.segments) {
    const uint64_t base = mix64(seg.key ^ 0x5bd1e9955bd1e995ull);
    for (int32_t i = 0; i < seg.num_tokens; ++i) {
      out.push_back(static_cast<int32_t>(mix64(base + static_cast<uint64_t>(i)) % vocab));
    }
  }
}

}  // namespace packserve::trace
