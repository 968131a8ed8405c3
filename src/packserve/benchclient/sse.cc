// sse.cc: see sse.h.
#include "packserve/benchclient/sse.h"

namespace packserve::benchclient {

std::vector<SseEvent> SseParser::feed(std::string_view bytes) {
  std::vector<SseEvent> out;
  for (char c : bytes) {
    if (pending_cr_) {
      pending_cr_ = false;
      if (c == '\n') continue;  // the '\n' of a "\r\n" split across pieces or not
    }
    if (c == '\r') {
      pending_cr_ = true;
      process_line(out);
    } else if (c == '\n') {
      process_line(out);
    } else {
      line_.push_back(c);
    }
  }
  return out;
}

void SseParser::process_line(std::vector<SseEvent>& out) {
  if (line_.empty()) {
    if (have_data_) out.push_back(std::move(current_));
    current_ = SseEvent{};
    have_data_ = false;
    return;
  }
  if (line_[0] != ':') {
    const size_t colon = line_.find(':');
    const std::string_view field = std::string_view(line_).substr(0, colon);
    std::string_view value;
    if (colon != std::string::npos) {
      value = std::string_view(line_).substr(colon + 1);
      if (!value.empty() && value[0] == ' ') value.remove_prefix(1);
    }
    if (field == "data") {
      if (have_data_) current_.data.push_back('\n');
      current_.data.append(value);
      have_data_ = true;
    } else if (field == "event") {
      current_.event = std::string(value);
    }
  }
  line_.clear();
}

}  // namespace packserve::benchclient
