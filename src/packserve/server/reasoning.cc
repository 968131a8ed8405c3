// reasoning.cc: see reasoning.h.
#include "packserve/server/reasoning.h"

#include <algorithm>

#include "packserve/server/tool_calls.h"

namespace packserve::server {
namespace {

constexpr std::string_view kOpen = "<think>";
constexpr std::string_view kClose = "</think>";

bool is_space(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }

}  // namespace

void ReasoningSplitter::append(std::string& to, std::string_view text) {
  if (skip_newlines_) {
    const std::size_t n = std::min(text.find_first_not_of('\n'), text.size());
    text.remove_prefix(n);
    if (!text.empty()) skip_newlines_ = false;
  }
  to.append(text);
}

void ReasoningSplitter::drain(ReasoningPiece& out, bool at_end) {
  if (state_ == State::kStart) {
    const auto first = std::find_if_not(held_.begin(), held_.end(), is_space);
    const std::string_view rest(held_.data() + (first - held_.begin()),
                                static_cast<std::size_t>(held_.end() - first));
    if (rest.starts_with(kOpen)) {
      held_.erase(0, static_cast<std::size_t>(first - held_.begin()) + kOpen.size());
      state_ = State::kThinking;
      skip_newlines_ = true;
    } else if (at_end || !(rest.empty() || kOpen.starts_with(rest))) {
      state_ = State::kAnswer;  // not a reasoning output: all content
    } else {
      return;  // whitespace, or a prefix of <think>, so far
    }
  }
  if (state_ == State::kThinking) {
    const std::size_t close = held_.find(kClose);
    if (close == std::string::npos) {
      const std::size_t keep = at_end ? 0 : partial_tag_length(held_, kClose);
      append(out.reasoning, std::string_view(held_).substr(0, held_.size() - keep));
      held_.erase(0, held_.size() - keep);
      return;
    }
    append(out.reasoning, std::string_view(held_).substr(0, close));
    held_.erase(0, close + kClose.size());
    state_ = State::kAnswer;
    skip_newlines_ = true;
  }
  append(out.content, held_);
  held_.clear();
}

ReasoningPiece ReasoningSplitter::feed(std::string_view text) {
  ReasoningPiece out;
  if (state_ == State::kAnswer) {
    append(out.content, text);
    return out;
  }
  held_.append(text);
  drain(out, /*at_end=*/false);
  return out;
}

ReasoningPiece ReasoningSplitter::finish() {
  ReasoningPiece out;
  drain(out, /*at_end=*/true);
  return out;
}

ReasoningPiece split_reasoning(std::string_view text) {
  ReasoningSplitter splitter;
  ReasoningPiece whole = splitter.feed(text);
  ReasoningPiece last = splitter.finish();
  whole.reasoning += last.reasoning;
  whole.content += last.content;
  return whole;
}

}  // namespace packserve::server
