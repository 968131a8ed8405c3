// stop_strings.cc: see stop_strings.h.
#include "packserve/engine/stop_strings.h"

#include <algorithm>

namespace packserve::engine {

std::string StopStringMatcher::push(std::string_view text, bool match) {
  if (stopped_) return {};
  held_.append(text);
  if (stops_.empty() || !match) {
    std::string out;
    out.swap(held_);
    return out;
  }
  // The occurrence that completes first (smallest end; then smallest start), which is what
  // character-by-character streaming would see first, so the result does not depend on how
  // the text is chunked into tokens. It cannot start in text emitted before: that tail would
  // have been a proper prefix of the stop string and so held back.
  size_t earliest = std::string::npos;
  size_t earliest_end = std::string::npos;
  for (const std::string& stop : stops_) {
    const size_t pos = held_.find(stop);
    if (pos == std::string::npos) continue;
    const size_t end = pos + stop.size();
    if (end < earliest_end || (end == earliest_end && pos < earliest)) {
      earliest = pos;
      earliest_end = end;
    }
  }
  if (earliest != std::string::npos) {
    stopped_ = true;
    std::string out = held_.substr(0, include_match_ ? earliest_end : earliest);
    held_.clear();
    return out;
  }
  // Longest tail of held_ that is a proper prefix of some stop string.
  size_t keep = 0;
  for (const std::string& stop : stops_) {
    const size_t max_len = std::min(held_.size(), stop.size() - 1);
    for (size_t len = max_len; len > keep; --len) {
      if (std::string_view(held_).substr(held_.size() - len) ==
          std::string_view(stop).substr(0, len)) {
        keep = len;
        break;
      }
    }
  }
  std::string out = held_.substr(0, held_.size() - keep);
  held_.erase(0, held_.size() - keep);
  return out;
}

std::string StopStringMatcher::flush() {
  std::string out;
  if (!stopped_) out.swap(held_);
  held_.clear();
  return out;
}

}  // namespace packserve::engine
