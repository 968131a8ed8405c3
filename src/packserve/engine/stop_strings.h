// stop_strings.h: incremental stop-string matching on streamed text (issue 4 "stop strings").
//
// Text arrives in chunks of complete UTF-8 characters (StreamDecoder output). push() returns
// the text that can be shown now: everything except the longest tail that is still a proper
// prefix of some stop string (held back: later text may complete the stop string). When a
// stop string occurs, the text before the occurrence that completes first (smallest end
// offset, then smallest start: what character-by-character streaming sees first, so the
// result does not depend on the chunking) is returned, the matched text and everything after
// it are dropped, and stopped() turns true (OpenAI semantics: the stop
// string is not part of the output; include_match keeps it, vLLM's
// include_stop_str_in_output). flush() returns the held tail at the end of a stream.
// Invariant: the concatenation of every returned chunk is a prefix of the streamed text, and,
// without a match, equals it after flush(). Stop strings are valid, non-empty UTF-8 and the
// streamed text is valid UTF-8, so every cut falls on a character boundary.
// Thread-safety: one matcher per stream.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace packserve::engine {

class StopStringMatcher {
 public:
  explicit StopStringMatcher(std::vector<std::string> stop_strings, bool include_match = false)
      : stops_(std::move(stop_strings)), include_match_(include_match) {}

  // Adds `text`; returns what may be emitted now. After a match returns "" for any input.
  // match = false (the first min_tokens tokens' text): `text` is emitted as it is, and no
  // stop string is looked for in it (one may still end in later text only if it starts there).
  std::string push(std::string_view text, bool match = true);
  // Returns the held-back tail (empty after a match).
  std::string flush();
  bool stopped() const { return stopped_; }
  size_t num_held_bytes() const { return held_.size(); }

 private:
  std::vector<std::string> stops_;
  bool include_match_ = false;
  std::string held_;
  bool stopped_ = false;
};

}  // namespace packserve::engine
