// sse.h: server-sent events framing (https://html.spec.whatwg.org/#server-sent-events) for
// streamed completions: each event is `data: <one line of JSON>\n\n`; the stream ends with
// `data: [DONE]\n\n` (OpenAI's convention). SseParser is the inverse, used by tests.
// Invariant: sse_data(p) parsed back by SseParser yields exactly p, whatever p holds
// (a payload with line breaks becomes several data: lines, joined back with "\n").
// Thread-safety: free functions are pure; one SseParser per stream.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace packserve::server {

inline constexpr std::string_view kSseDone = "data: [DONE]\n\n";

// One event carrying `payload`. "\r\n" and "\r" line breaks count as "\n".
std::string sse_data(std::string_view payload);
// A comment line (ignored by clients): keeps idle connections alive and lets the server
// notice a client that went away.
std::string sse_comment(std::string_view text);

// Incremental parser: feed bytes as they arrive, take complete events' data.
class SseParser {
 public:
  // Appends `bytes`; returns the data of every event completed by them (comments and fields
  // other than data are skipped; events without data lines yield nothing).
  std::vector<std::string> push(std::string_view bytes);
  // Bytes of an unfinished event (a stream that ends with leftovers is malformed).
  std::size_t num_pending_bytes() const { return pending_.size(); }

 private:
  std::string pending_;
};

}  // namespace packserve::server
