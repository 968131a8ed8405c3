// sse.h: an incremental parser of server-sent events (the WHATWG "text/event-stream" format)
// as OpenAI-compatible servers stream completions: `data: {json}\n\n` ... `data: [DONE]\n\n`.
// Bytes arrive in arbitrary pieces (a TCP read may end mid-line or between '\r' and '\n');
// feed() buffers the incomplete tail and returns only the events completed by this piece.
// Rules: lines end in "\n", "\r\n" or "\r"; an empty line dispatches the event; "data:" lines
// append to the event's data (joined with "\n"; one space after the colon is dropped);
// "event:" sets the type; lines starting with ':' are comments; other fields are ignored;
// an event with no data line is not dispatched.
// Thread-safety: one parser per stream; not shared.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace packserve::benchclient {

struct SseEvent {
  std::string event;  // the "event:" field; empty = "message"
  std::string data;
};

class SseParser {
 public:
  std::vector<SseEvent> feed(std::string_view bytes);
  // Bytes buffered but not yet part of a dispatched event (a truncated stream when non-empty at
  // the end).
  bool has_partial_event() const { return !line_.empty() || have_data_ || pending_cr_; }

 private:
  void process_line(std::vector<SseEvent>& out);
  std::string line_;
  bool pending_cr_ = false;  // the previous piece ended with '\r': a following '\n' is part of it
  SseEvent current_;
  bool have_data_ = false;
};

}  // namespace packserve::benchclient
