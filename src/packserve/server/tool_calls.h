// tool_calls.h: reads the tool calls out of a chat completion's generated text, for the
// OpenAI-compatible server's "tools" (message.tool_calls, streamed delta.tool_calls). Three
// output conventions, named by ToolCallFormat after the models that write them:
//   kHermes      Qwen2.5/Qwen3 and Hermes models: optional content, then any number of blocks
//                `<tool_call>\n{"name": "f", "arguments": {...}}\n</tool_call>`.
//   kLlama3Json  Llama 3.1/3.2/3.3 JSON tool calling: the whole output is
//                `{"name": "f", "parameters": {...}}`, several joined by `;`, optionally after
//                `<|python_tag|>` (and whitespace around both).
//   kMistral     Mistral v0.3 / Nemo: optional content, then the control token `[TOOL_CALLS]`
//                (the request decodes special tokens for it to be seen) and a JSON list of
//                `{"name": "f", "arguments": {...}}` (or one such object). With `calls_only`
//                (tool_choice "required", whose constraint cannot hold a control token) the
//                whole output is that list. Each element that is a call is one as soon as it
//                closes; from the first element that is not (or a cut one), or after the
//                list's `]`, the text is content as written, except whitespace after the `]`.
//                When the first element is not a call, the whole text from the tag is.
// tool_choice "required" output is constrained to these syntaxes (tool_request.h) and read the
// same way.
//
// Contract: nothing the model wrote is lost. Every byte ends up in a returned call or in the
// returned content, except whitespace between and after hermes blocks and the brackets and
// commas around mistral calls; text shaped like a call that is not a valid one (not JSON, no
// "name", arguments not an object) is content, as written. A call's `arguments` is the compact JSON
// text of an object, keys in the order the model wrote them. JSON nested deeper than
// kMaxToolCallJsonDepth is never a call (it would be content), so parsing and dumping stay within
// bounded recursion. Streaming: ToolCallParser holds back only what the next piece may still change
// (a partial tag; hermes text after the first block until the next block or the end; llama3 output
// that starts with `{` until the end; mistral output after its tag until the current list element
// closes, or the end when it is one object, not a list). Invariant, for any split of
// `text` into pieces: the concatenated content and the calls of feed(piece)... + finish() equal
// parse_tool_calls(format, text). Cuts fall only at (ASCII) tag boundaries, so when each fed
// piece is whole UTF-8 characters (as engine text deltas are), so is each content piece.
// Thread-safety: one ToolCallParser per choice, used by one thread; free functions are pure.
#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace packserve::server {

// Deepest array/object nesting of a call's JSON (the call object counts as 1).
inline constexpr int kMaxToolCallJsonDepth = 64;

enum class ToolCallFormat { kHermes, kLlama3Json, kMistral };

struct ToolCall {
  std::string name;       // non-empty
  std::string arguments;  // a JSON object's text, compact: `{"city":"Paris"}`; `{}` if none
  bool operator==(const ToolCall&) const = default;
};

// What one feed()/finish() call yields: text that is certainly content, and the calls completed.
struct ToolCallDelta {
  std::string content;
  std::vector<ToolCall> calls;
};

// Incremental parser of one choice's output text, streamed in arbitrary pieces (even one byte
// at a time, split anywhere, including inside a tag or a UTF-8 character).
class ToolCallParser {
 public:
  explicit ToolCallParser(ToolCallFormat format, bool calls_only = false);

  // Appends `text`; returns the content that became certain and the calls that completed.
  // Precondition: finish() was not called yet.
  ToolCallDelta feed(std::string_view text);
  // End of output: flushes what was held back (a block not closed is a call if its body is a
  // valid one, else content). Precondition: called once, after the last feed.
  ToolCallDelta finish();
  // Calls returned so far by feed() and finish().
  int num_calls() const { return num_calls_; }

 private:
  // kHermes:     kBeforeBlocks -> kInBlock <-> kBetweenBlocks.
  // kLlama3Json: kUndecided -> kJson (held until finish) | kContent (streamed).
  // kMistral:    kBeforeBlocks -> kList (after the tag; calls_only: from the start) -> kJson
  //              (one object, or an element that is not a call: held until finish).
  enum class State { kBeforeBlocks, kInBlock, kBetweenBlocks, kUndecided, kJson, kContent, kList };
  // Where a kList scan is: before the `[`, before an element, inside one, after one, after `]`.
  enum class ListPhase { kOpen, kElement, kInElement, kAfterElement, kClosed };

  void feed_hermes(ToolCallDelta& out);
  void finish_hermes(ToolCallDelta& out);
  void feed_llama3(std::string_view text, ToolCallDelta& out);
  void finish_llama3(ToolCallDelta& out);
  void feed_mistral(ToolCallDelta& out);
  // kList: scans held_ from list_.pos, emitting each element that closes as a call.
  void scan_mistral_list(ToolCallDelta& out);
  void finish_mistral(ToolCallDelta& out);
  // Hermes text outside blocks: content before the first block; between or after blocks,
  // content unless it is whitespace only.
  void emit_text(std::string_view text, ToolCallDelta& out) const;
  // Before any tag: held_ is content except a suffix that may still begin `tag`.
  void emit_all_but_partial(std::string_view tag, ToolCallDelta& out);
  // Offset of `tag` in held_, or npos; remembers how far held_ was searched, so that a long
  // held text fed byte by byte is scanned once, not once per byte.
  std::size_t find_in_held(std::string_view tag);
  void erase_held(std::size_t num_bytes);

  ToolCallFormat format_;
  bool calls_only_ = false;  // kMistral only
  State state_;
  std::string held_;             // fed bytes not yet returned
  std::size_t search_from_ = 0;  // offset in held_ before which no tag starts
  int num_calls_ = 0;
  bool finished_ = false;
  struct ListScan {  // kMistral's kList
    ListPhase phase = ListPhase::kOpen;
    std::size_t pos = 0;            // offset in held_ scanned up to
    std::size_t element_begin = 0;  // offset in held_ of the open element's `{`
    int depth = 0;                  // brackets open in the element
    bool in_string = false;
    bool escaped = false;
    int calls = 0;  // elements emitted as calls
  } list_;
};

// Length of the longest suffix of `text` that is a proper prefix of `tag`: the bytes a stream
// holds back because the next piece may still complete them into `tag` (also reasoning.cc's).
std::size_t partial_tag_length(std::string_view text, std::string_view tag);

// The whole text at once: the concatenation of every delta's content and calls of
// feed(text) + finish().
ToolCallDelta parse_tool_calls(ToolCallFormat format, std::string_view text,
                               bool calls_only = false);

}  // namespace packserve::server
