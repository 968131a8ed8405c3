// tool_calls.cc: see tool_calls.h.
#include "packserve/server/tool_calls.h"

#include <algorithm>
#include <nlohmann/json.hpp>
#include <utility>

#include "packserve/common/json_depth.h"
#include "packserve/common/status.h"

namespace packserve::server {
namespace {

using nlohmann::ordered_json;

constexpr std::string_view kHermesOpen = "<tool_call>";
constexpr std::string_view kHermesClose = "</tool_call>";
constexpr std::string_view kPythonTag = "<|python_tag|>";
constexpr std::string_view kMistralTag = "[TOOL_CALLS]";
constexpr std::size_t kNpos = std::string_view::npos;

bool is_json_space(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }

std::string_view skip_space(std::string_view s) {
  while (!s.empty() && is_json_space(s.front())) s.remove_prefix(1);
  return s;
}

bool is_blank(std::string_view s) { return skip_space(s).empty(); }

// `text` as one JSON value (whitespace around allowed); discarded when it is not exactly one
// value or nests deeper than kMaxToolCallJsonDepth. Never throws.
ordered_json parse_json(std::string_view text) {
  if (json_nesting_depth(text, kMaxToolCallJsonDepth) > kMaxToolCallJsonDepth) {
    return ordered_json(ordered_json::value_t::discarded);
  }
  return ordered_json::parse(text.begin(), text.end(), nullptr, /*allow_exceptions=*/false);
}

// Compact text; parsed values hold valid UTF-8, so `replace` never fires but rules out a throw.
std::string compact(const ordered_json& value) {
  return value.dump(-1, ' ', false, ordered_json::error_handler_t::replace);
}

// Which keys of a call object hold its arguments, and whether they may be absent.
struct ArgumentKeys {
  const char* key;
  const char* alias;  // read when `key` is absent
  bool required;      // absent: not a call (else `{}`)
};
constexpr ArgumentKeys kHermesKeys = {"arguments", "parameters", false};
constexpr ArgumentKeys kLlama3Keys = {"parameters", "arguments", true};

// An arguments value: an object, or a string holding an object's text. Its compact text.
std::optional<std::string> arguments_text(const ordered_json& value) {
  if (value.is_object()) return compact(value);
  if (!value.is_string()) return std::nullopt;
  const ordered_json parsed = parse_json(value.get_ref<const std::string&>());
  if (!parsed.is_object()) return std::nullopt;
  return compact(parsed);
}

// `value` as a call: an object with "name" (a non-empty string) and arguments as `keys` says;
// other keys are ignored.
std::optional<ToolCall> to_call(const ordered_json& value, const ArgumentKeys& keys) {
  if (!value.is_object()) return std::nullopt;
  const auto name = value.find("name");
  if (name == value.end() || !name->is_string() || name->get_ref<const std::string&>().empty()) {
    return std::nullopt;
  }
  ToolCall call{name->get<std::string>(), "{}"};
  auto args = value.find(keys.key);
  if (args == value.end()) args = value.find(keys.alias);
  if (args == value.end()) {
    if (keys.required) return std::nullopt;
    return call;
  }
  std::optional<std::string> text = arguments_text(*args);
  if (!text) return std::nullopt;
  call.arguments = std::move(*text);
  return call;
}

// `text` cut at each ';' outside JSON strings (`;` is never JSON outside a string).
std::vector<std::string_view> split_at_semicolons(std::string_view text) {
  std::vector<std::string_view> pieces;
  std::size_t start = 0;
  bool in_string = false;
  bool escaped = false;
  for (std::size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (in_string) {
      if (escaped) {
        escaped = false;
      } else if (c == '\\') {
        escaped = true;
      } else if (c == '"') {
        in_string = false;
      }
    } else if (c == '"') {
      in_string = true;
    } else if (c == ';') {
      pieces.push_back(text.substr(start, i - start));
      start = i + 1;
    }
  }
  pieces.push_back(text.substr(start));
  return pieces;
}

// Llama 3 output after the python tag: one or more call objects separated by ';'.
std::optional<std::vector<ToolCall>> parse_llama3_calls(std::string_view text) {
  std::vector<ToolCall> calls;
  for (std::string_view piece : split_at_semicolons(text)) {
    std::optional<ToolCall> call = to_call(parse_json(piece), kLlama3Keys);
    if (!call) return std::nullopt;
    calls.push_back(std::move(*call));
  }
  return calls;
}

// Llama 3 output without its leading whitespace and optional python tag (and the whitespace
// after it).
std::string_view llama3_body(std::string_view text) {
  text = skip_space(text);
  if (text.starts_with(kPythonTag)) text = skip_space(text.substr(kPythonTag.size()));
  return text;
}

// Mistral output after [TOOL_CALLS]: a JSON list of call objects, or one call object.
std::optional<std::vector<ToolCall>> parse_mistral_calls(std::string_view text) {
  ordered_json value = parse_json(text);
  if (value.is_object()) value = ordered_json::array({std::move(value)});
  if (!value.is_array() || value.empty()) return std::nullopt;
  std::vector<ToolCall> calls;
  for (const ordered_json& item : value) {
    std::optional<ToolCall> call = to_call(item, kHermesKeys);
    if (!call) return std::nullopt;
    calls.push_back(std::move(*call));
  }
  return calls;
}

// A block's body: the call it holds, else its raw text as content. `closed` is false at
// finish(), where a trailing partial close tag is not part of the JSON.
void end_block(std::string_view body, bool closed, ToolCallDelta& out) {
  const std::string_view json =
      closed ? body : body.substr(0, body.size() - partial_tag_length(body, kHermesClose));
  if (std::optional<ToolCall> call = to_call(parse_json(json), kHermesKeys)) {
    out.calls.push_back(std::move(*call));
    return;
  }
  out.content.append(kHermesOpen).append(body);
  if (closed) out.content.append(kHermesClose);
}

}  // namespace

ToolCallParser::ToolCallParser(ToolCallFormat format, bool calls_only)
    : format_(format), calls_only_(calls_only && format == ToolCallFormat::kMistral) {
  if (format == ToolCallFormat::kLlama3Json) {
    state_ = State::kUndecided;
  } else {
    state_ = calls_only_ ? State::kList : State::kBeforeBlocks;
  }
}

ToolCallDelta ToolCallParser::feed(std::string_view text) {
  PS_CHECK(!finished_) << "ToolCallParser::feed after finish";
  ToolCallDelta out;
  if (format_ == ToolCallFormat::kHermes) {
    held_.append(text);
    feed_hermes(out);
  } else if (format_ == ToolCallFormat::kMistral) {
    held_.append(text);
    feed_mistral(out);
  } else {
    feed_llama3(text, out);
  }
  num_calls_ += static_cast<int>(out.calls.size());
  return out;
}

ToolCallDelta ToolCallParser::finish() {
  PS_CHECK(!finished_) << "ToolCallParser::finish called twice";
  finished_ = true;
  ToolCallDelta out;
  if (format_ == ToolCallFormat::kHermes) {
    finish_hermes(out);
  } else if (format_ == ToolCallFormat::kMistral) {
    finish_mistral(out);
  } else {
    finish_llama3(out);
  }
  held_.clear();
  num_calls_ += static_cast<int>(out.calls.size());
  return out;
}

std::size_t ToolCallParser::find_in_held(std::string_view tag) {
  const std::size_t at = std::string_view(held_).find(tag, search_from_);
  if (at == kNpos && held_.size() >= tag.size()) search_from_ = held_.size() - tag.size() + 1;
  return at;
}

void ToolCallParser::erase_held(std::size_t num_bytes) {
  held_.erase(0, num_bytes);
  search_from_ = 0;
}

void ToolCallParser::emit_all_but_partial(std::string_view tag, ToolCallDelta& out) {
  const std::size_t num_certain = held_.size() - partial_tag_length(held_, tag);
  out.content.append(held_, 0, num_certain);
  erase_held(num_certain);
}

void ToolCallParser::emit_text(std::string_view text, ToolCallDelta& out) const {
  if (state_ == State::kBeforeBlocks || !is_blank(text)) out.content.append(text);
}

void ToolCallParser::feed_hermes(ToolCallDelta& out) {
  for (;;) {
    const bool in_block = state_ == State::kInBlock;
    const std::string_view tag = in_block ? kHermesClose : kHermesOpen;
    const std::size_t at = find_in_held(tag);
    if (at == kNpos) break;
    const std::string_view before(held_.data(), at);
    if (in_block) {
      end_block(before, /*closed=*/true, out);
    } else {
      emit_text(before, out);
    }
    erase_held(at + tag.size());
    state_ = in_block ? State::kBetweenBlocks : State::kInBlock;
  }
  if (state_ == State::kBeforeBlocks) emit_all_but_partial(kHermesOpen, out);
}

void ToolCallParser::finish_hermes(ToolCallDelta& out) {
  if (state_ == State::kInBlock) {
    end_block(held_, /*closed=*/false, out);
  } else {
    emit_text(held_, out);
  }
}

void ToolCallParser::feed_llama3(std::string_view text, ToolCallDelta& out) {
  if (state_ == State::kContent) {
    out.content.append(text);
    return;
  }
  held_.append(text);
  if (state_ != State::kUndecided) return;
  const std::string_view body = llama3_body(held_);
  // Undecided while only whitespace came, or a prefix of the python tag (and whitespace after).
  if (body.empty() || kPythonTag.starts_with(body)) return;
  if (body.front() == '{') {
    state_ = State::kJson;
    return;
  }
  state_ = State::kContent;
  out.content.append(held_);
  held_.clear();
}

void ToolCallParser::finish_llama3(ToolCallDelta& out) {
  if (state_ == State::kJson) {
    if (std::optional<std::vector<ToolCall>> calls = parse_llama3_calls(llama3_body(held_))) {
      out.calls = std::move(*calls);
      return;
    }
  }
  out.content.append(held_);
}

void ToolCallParser::feed_mistral(ToolCallDelta& out) {
  if (state_ == State::kBeforeBlocks) {
    const std::size_t at = find_in_held(kMistralTag);
    if (at == kNpos) {
      emit_all_but_partial(kMistralTag, out);
      return;
    }
    out.content.append(held_, 0, at);
    erase_held(at + kMistralTag.size());
    state_ = State::kList;
  }
  if (state_ == State::kList) scan_mistral_list(out);
}

void ToolCallParser::scan_mistral_list(ToolCallDelta& out) {
  ListScan& s = list_;
  // Until the first call, held_ keeps everything after the tag (content as written if that
  // call never comes); from then on it starts after the last call or comma consumed.
  const auto consume = [&](std::size_t end) {
    erase_held(end);
    s.pos = 0;
  };
  while (s.pos < held_.size() && s.phase != ListPhase::kClosed) {
    const char c = held_[s.pos];
    if (s.phase == ListPhase::kInElement) {
      ++s.pos;
      if (s.in_string) {
        if (s.escaped) {
          s.escaped = false;
        } else if (c == '\\') {
          s.escaped = true;
        } else if (c == '"') {
          s.in_string = false;
        }
        continue;
      }
      if (c == '"') {
        s.in_string = true;
      } else if (c == '{' || c == '[') {
        ++s.depth;
      } else if ((c == '}' || c == ']') && --s.depth == 0) {
        const std::string_view element(held_.data() + s.element_begin, s.pos - s.element_begin);
        std::optional<ToolCall> call = to_call(parse_json(element), kHermesKeys);
        if (!call) {
          state_ = State::kJson;  // not a call: content from here (finish_mistral)
          return;
        }
        out.calls.push_back(std::move(*call));
        ++s.calls;
        consume(s.pos);
        s.phase = ListPhase::kAfterElement;
      }
      continue;
    }
    if (is_json_space(c)) {
      ++s.pos;
      continue;
    }
    if (s.phase == ListPhase::kOpen && c == '[') {
      s.phase = ListPhase::kElement;
      ++s.pos;
    } else if (s.phase == ListPhase::kElement && c == '{') {
      s.phase = ListPhase::kInElement;
      s.element_begin = s.pos++;
      s.depth = 1;
    } else if (s.phase == ListPhase::kAfterElement && (c == ',' || c == ']')) {
      consume(s.pos + 1);
      s.phase = c == ',' ? ListPhase::kElement : ListPhase::kClosed;
    } else {
      state_ = State::kJson;  // one object (kOpen), or not a list of calls: read at finish
      return;
    }
  }
}

void ToolCallParser::finish_mistral(ToolCallDelta& out) {
  if (state_ == State::kBeforeBlocks) {
    out.content.append(held_);
    return;
  }
  if (list_.calls == 0) {  // one object, or no element was a call: all of it or none
    if (std::optional<std::vector<ToolCall>> calls = parse_mistral_calls(held_)) {
      out.calls = std::move(*calls);
      return;
    }
    if (!calls_only_) out.content.append(kMistralTag);
    out.content.append(held_);
    return;
  }
  if (state_ == State::kList && list_.phase == ListPhase::kClosed && is_blank(held_)) return;
  out.content.append(held_);
}

ToolCallDelta parse_tool_calls(ToolCallFormat format, std::string_view text, bool calls_only) {
  ToolCallParser parser(format, calls_only);
  ToolCallDelta all = parser.feed(text);
  ToolCallDelta last = parser.finish();
  all.content.append(last.content);
  for (ToolCall& call : last.calls) all.calls.push_back(std::move(call));
  return all;
}

std::size_t partial_tag_length(std::string_view text, std::string_view tag) {
  for (std::size_t n = std::min(text.size(), tag.size() - 1); n > 0; --n) {
    if (text.substr(text.size() - n) == tag.substr(0, n)) return n;
  }
  return 0;
}

}  // namespace packserve::server
