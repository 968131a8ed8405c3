// sse.cc: see sse.h.
#include "packserve/server/sse.h"

namespace packserve::server {
namespace {

// Splits `text` into lines on \r\n, \n or \r.
std::vector<std::string_view> split_lines(std::string_view text) {
  std::vector<std::string_view> lines;
  std::size_t start = 0;
  for (std::size_t i = 0; i <= text.size(); ++i) {
    if (i == text.size() || text[i] == '\n' || text[i] == '\r') {
      lines.push_back(text.substr(start, i - start));
      if (i + 1 < text.size() && text[i] == '\r' && text[i + 1] == '\n') ++i;
      start = i + 1;
    }
  }
  return lines;
}

}  // namespace

std::string sse_data(std::string_view payload) {
  std::string out;
  out.reserve(payload.size() + 8);
  for (std::string_view line : split_lines(payload)) {
    out += "data: ";
    out += line;
    out += '\n';
  }
  out += '\n';
  return out;
}

std::string sse_comment(std::string_view text) {
  std::string out;
  for (std::string_view line : split_lines(text)) {
    out += ": ";
    out += line;
    out += '\n';
  }
  out += '\n';
  return out;
}

std::vector<std::string> SseParser::push(std::string_view bytes) {
  pending_.append(bytes);
  std::vector<std::string> events;
  // Normalise line breaks of complete lines, then cut events at blank lines.
  for (;;) {
    std::size_t end = std::string::npos;
    std::size_t skip = 0;
    for (std::size_t i = 0; i + 1 < pending_.size(); ++i) {
      if (pending_[i] == '\n' && pending_[i + 1] == '\n') {
        end = i, skip = 2;
        break;
      }
      if (i + 3 < pending_.size() && pending_.compare(i, 4, "\r\n\r\n") == 0) {
        end = i, skip = 4;
        break;
      }
    }
    if (end == std::string::npos) break;
    const std::string block = pending_.substr(0, end);
    pending_.erase(0, end + skip);
    std::string data;
    bool has_data = false;
    for (std::string_view line : split_lines(block)) {
      if (line.empty() || line[0] == ':') continue;
      std::string_view field = line;
      std::string_view value;
      if (auto colon = line.find(':'); colon != std::string_view::npos) {
        field = line.substr(0, colon);
        value = line.substr(colon + 1);
        if (!value.empty() && value[0] == ' ') value.remove_prefix(1);
      }
      if (field != "data") continue;
      if (has_data) data += '\n';
      data.append(value);
      has_data = true;
    }
    if (has_data) events.push_back(std::move(data));
  }
  return events;
}

}  // namespace packserve::server
