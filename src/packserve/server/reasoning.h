// reasoning.h: splits a reasoning model's output into its reasoning and its answer (vLLM's
// `--reasoning-parser qwen3`; docs/server.md "Reasoning"). Qwen3 writes
// `<think>\n...\n</think>\n\n<answer>`: the text between the tags is the reasoning, the text
// after `</think>` the content (which tool-call parsing then reads), each without the newlines
// that open it (as Qwen3's template strips them from earlier turns). An output that does not
// start with `<think>` (whitespace before it allowed) is all content, as with thinking off; a
// `<think>` not closed by the end is all reasoning (cut off by max_tokens). The tags
// themselves are in neither.
// Streaming: feed() returns what is certain; only a possible partial tag is held back.
// Invariant: for any split of a text into pieces, the joined pieces of feed()... + finish()
// equal split_reasoning(text).
// Thread-safety: one ReasoningSplitter per choice, used by one thread.
#pragma once

#include <string>
#include <string_view>

namespace packserve::server {

struct ReasoningPiece {
  std::string reasoning;
  std::string content;
};

class ReasoningSplitter {
 public:
  ReasoningPiece feed(std::string_view text);
  ReasoningPiece finish();

 private:
  void drain(ReasoningPiece& out, bool at_end);
  // Appends `text` to `to`, dropping the newlines that open a part.
  void append(std::string& to, std::string_view text);

  enum class State { kStart, kThinking, kAnswer };
  State state_ = State::kStart;
  std::string held_;
  bool skip_newlines_ = false;  // the part just began after a tag
};

// The whole text at once.
ReasoningPiece split_reasoning(std::string_view text);

}  // namespace packserve::server
