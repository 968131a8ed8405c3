// grammar_structural_tag.cc: Grammar::structural_tag (grammar.h). Outside a structure the
// output is free text, scanned for the triggers by an Aho-Corasick automaton; when a trigger
// completes, the structures' automaton (schema_automaton.h, over the regex
// (?:BEGIN SCHEMA END|...) with the schemas' free-form values as holes) continues from the
// state after that trigger's bytes, and when a structure completes the scan starts again.
#include <array>
#include <deque>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "packserve/grammar/automaton_matcher.h"
#include "packserve/grammar/dfa_grammar.h"
#include "packserve/grammar/json_schema.h"
#include "packserve/grammar/regex.h"
#include "packserve/grammar/schema_automaton.h"

namespace packserve::grammar {
namespace {

using Json = nlohmann::ordered_json;
using detail::JsonMode;
using detail::SchemaAutomaton;
using detail::SchemaState;

struct Structure {
  std::string begin, schema, end;  // schema: JSON text, keys in the order written
  std::string schema_at;           // its path in the tag, for its errors
};

Status tag_error(const std::string& at, const std::string& what) {
  return invalid_argument("structural_tag: " + at + ": " + what);
}

// A begin, end or trigger: a non-empty string of at most kMaxStructuralTagBytes, without the
// byte that stands for a free-form value in the structures' regex (kFreeFormHole, U+0001).
Result<std::string> tag_string(const Json& value, const std::string& at) {
  if (!value.is_string() || value.get_ref<const std::string&>().empty() ||
      value.get_ref<const std::string&>().size() > kMaxStructuralTagBytes ||
      value.get_ref<const std::string&>().find(static_cast<char>(kFreeFormHole)) !=
          std::string::npos) {
    return tag_error(at, "expected a non-empty string of at most " +
                             std::to_string(kMaxStructuralTagBytes) + " bytes without U+0001");
  }
  return value.get<std::string>();
}

Result<std::string> member_string(const Json& object, const std::string& key,
                                  const std::string& at) {
  const auto it = object.find(key);
  if (it == object.end()) return tag_error(at + "." + key, "required");
  return tag_string(*it, at + "." + key);
}

struct Tag {
  std::vector<Structure> structures;
  std::vector<std::string> triggers;
  bool at_least_one = false;  // the output starts with a structure
  bool stop_after_first = false;
};

// Where the two forms keep the parts of a tag: {"structures": [{"begin", "schema", "end"}],
// "triggers"} and xgrammar's {"format": {"type": "triggered_tags", "tags": [{"begin",
// "content": {"type": "json_schema", "json_schema"}, "end"}], "triggers"}}.
struct TagForm {
  std::string structures;  // the list's path ("structures", "format.tags")
  std::string triggers;    // ("triggers", "format.triggers")
  bool content = false;    // a tag's schema is content.json_schema (else: schema)
};

Result<bool> flag(const Json& value, const std::string& at) {
  if (!value.is_boolean()) return tag_error(at, "expected true or false");
  return value.get<bool>();
}

// The structures' list and the triggers of `object` (the root, or the format), then the checks
// between them.
Result<Tag> read_tag(const Json& object, const TagForm& form, Tag tag) {
  const std::string shape = form.content ? "{begin, content, end}" : "{begin, schema, end}";
  const auto structures = object.find(form.content ? "tags" : "structures");
  if (structures == object.end() || !structures->is_array() || structures->empty() ||
      structures->size() > kMaxStructuralTagStructures) {
    return tag_error(form.structures, "expected a list of 1 to " +
                                          std::to_string(kMaxStructuralTagStructures) + " " +
                                          shape + " objects");
  }
  for (std::size_t i = 0; i < structures->size(); ++i) {
    const std::string at = form.structures + "[" + std::to_string(i) + "]";
    const Json& s = (*structures)[i];
    if (!s.is_object()) return tag_error(at, "expected an object " + shape);
    const char* body = form.content ? "content" : "schema";
    for (const auto& [key, value] : s.items()) {
      if (form.content && key == "type") {
        if (value != "tag") return tag_error(at + ".type", "expected \"tag\"");
      } else if (key != "begin" && key != body && key != "end") {
        return tag_error(at + "." + key, std::string("not expected (begin, ") + body + ", end)");
      }
    }
    Structure structure;
    PS_ASSIGN_OR_RETURN(structure.begin, member_string(s, "begin", at));
    PS_ASSIGN_OR_RETURN(structure.end, member_string(s, "end", at));
    const auto schema = s.find(body);
    if (schema == s.end()) return tag_error(at + "." + body, "required");
    if (form.content) {
      const std::string c = at + ".content";
      if (!schema->is_object() || schema->value("type", Json()) != "json_schema") {
        return unimplemented("structural_tag: " + c +
                             ": only {\"type\": \"json_schema\"} content is supported");
      }
      for (const auto& [key, value] : schema->items()) {
        if (key != "type" && key != "json_schema") {
          return tag_error(c + "." + key, "not expected (type, json_schema)");
        }
      }
      const auto inner = schema->find("json_schema");
      if (inner == schema->end()) return tag_error(c + ".json_schema", "required");
      structure.schema = inner->dump();
      structure.schema_at = c + ".json_schema";
    } else {
      structure.schema = schema->dump();
      structure.schema_at = at + ".schema";
    }
    tag.structures.push_back(std::move(structure));
  }
  const auto triggers = object.find("triggers");
  if (triggers == object.end() || !triggers->is_array() || triggers->empty() ||
      triggers->size() > kMaxStructuralTagTriggers) {
    return tag_error(form.triggers, "expected a list of 1 to " +
                                        std::to_string(kMaxStructuralTagTriggers) + " strings");
  }
  for (std::size_t j = 0; j < triggers->size(); ++j) {
    PS_ASSIGN_OR_RETURN(std::string trigger,
                        tag_string((*triggers)[j], form.triggers + "[" + std::to_string(j) + "]"));
    tag.triggers.push_back(std::move(trigger));
  }
  for (std::size_t i = 0; i < tag.structures.size(); ++i) {
    bool triggered = false;
    for (const std::string& t : tag.triggers) triggered |= tag.structures[i].begin.starts_with(t);
    if (!triggered) {
      return tag_error(form.structures + "[" + std::to_string(i) + "].begin",
                       "expected to start with one of the triggers");
    }
  }
  for (std::size_t j = 0; j < tag.triggers.size(); ++j) {
    const std::string at = form.triggers + "[" + std::to_string(j) + "]";
    bool used = false;
    for (const Structure& s : tag.structures) used |= s.begin.starts_with(tag.triggers[j]);
    if (!used) return tag_error(at, "starts no structure's begin");
    // Then at most one trigger ends at any byte of the text, and the first to end is the one
    // whose structures may start there (one that starts with it starts those too).
    for (std::size_t k = 0; k < tag.triggers.size(); ++k) {
      const std::string& t = tag.triggers[j];
      const std::string other = form.triggers + "[" + std::to_string(k) + "]";
      if (k != j && t.size() > tag.triggers[k].size() &&
          t.find(tag.triggers[k], 1) != std::string::npos) {
        return tag_error(at,
                         "holds " + other + " after its start: that one would always open first");
      }
      if (k < j && t == tag.triggers[k]) return tag_error(at, "repeats " + other);
    }
  }
  return tag;
}

Result<Tag> parse_tag(std::string_view text) {
  const Json root = Json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (root.is_discarded() || !root.is_object()) {
    return invalid_argument(
        "structural_tag: expected a JSON object with structures and triggers, or a format");
  }
  Tag tag;
  const auto format = root.find("format");
  for (const auto& [key, value] : root.items()) {
    if (key == "type") {
      if (value != "structural_tag") return tag_error("type", "expected \"structural_tag\"");
    } else if (format != root.end()) {
      if (key != "format") return tag_error(key, "not expected beside format (type, format)");
    } else if (key == "stop_after_first") {
      PS_ASSIGN_OR_RETURN(tag.stop_after_first, flag(value, key));
    } else if (key != "structures" && key != "triggers") {
      return tag_error(key, "not expected (type, structures, triggers, stop_after_first)");
    }
  }
  if (format == root.end()) return read_tag(root, TagForm{"structures", "triggers", false}, tag);
  if (!format->is_object() || format->value("type", Json()) != "triggered_tags") {
    return unimplemented(
        "structural_tag: format: only {\"type\": \"triggered_tags\"} is supported");
  }
  for (const auto& [key, value] : format->items()) {
    if (key == "at_least_one") {
      PS_ASSIGN_OR_RETURN(tag.at_least_one, flag(value, "format." + key));
    } else if (key == "stop_after_first") {
      PS_ASSIGN_OR_RETURN(tag.stop_after_first, flag(value, "format." + key));
    } else if (key != "type" && key != "tags" && key != "triggers") {
      return tag_error("format." + key,
                       "not expected (type, triggers, tags, at_least_one, stop_after_first)");
    }
  }
  return read_tag(*format, TagForm{"format.tags", "format.triggers", true}, tag);
}

// The Aho-Corasick automaton of the triggers over bytes: node 0 is the root (no trigger
// started), next[node * 256 + byte] the longest trigger prefix the text then ends with, and
// completed[node] the trigger that ends there (-1: none; parse_tag leaves at most one).
struct TriggerScanner {
  std::vector<int32_t> next;
  std::vector<int32_t> completed;

  explicit TriggerScanner(const std::vector<std::string>& triggers) {
    std::vector<std::array<int32_t, 256>> children(1);
    children[0].fill(-1);
    std::vector<int32_t> depth(1, 0);
    completed.assign(1, -1);
    for (std::size_t j = 0; j < triggers.size(); ++j) {
      int32_t node = 0;
      for (const char c : triggers[j]) {
        const auto b = static_cast<uint8_t>(c);
        if (children[static_cast<std::size_t>(node)][b] < 0) {
          children[static_cast<std::size_t>(node)][b] = static_cast<int32_t>(children.size());
          children.emplace_back().fill(-1);
          depth.push_back(depth[static_cast<std::size_t>(node)] + 1);
          completed.push_back(-1);
        }
        node = children[static_cast<std::size_t>(node)][b];
      }
      completed[static_cast<std::size_t>(node)] = static_cast<int32_t>(j);
    }
    // Breadth first: a node's failure (its longest proper suffix in the trie) comes first.
    const std::size_t n = children.size();
    next.assign(n * 256, 0);
    std::vector<int32_t> failure(n, 0);
    std::deque<int32_t> queue;
    for (int b = 0; b < 256; ++b) {
      const int32_t child = children[0][static_cast<std::size_t>(b)];
      if (child >= 0) {
        next[static_cast<std::size_t>(b)] = child;
        queue.push_back(child);
      }
    }
    while (!queue.empty()) {
      const auto node = static_cast<std::size_t>(queue.front());
      queue.pop_front();
      const auto fail = static_cast<std::size_t>(failure[node]);
      if (completed[node] < 0) completed[node] = completed[fail];
      for (std::size_t b = 0; b < 256; ++b) {
        const int32_t child = children[node][b];
        if (child < 0) {
          next[node * 256 + b] = next[fail * 256 + b];
        } else {
          failure[static_cast<std::size_t>(child)] = next[fail * 256 + b];
          next[node * 256 + b] = child;
          queue.push_back(child);
        }
      }
    }
  }
};

// scan >= 0: free text, the scanner in node `scan` (inner is zero). kInside: inside a
// structure, the structures' automaton in `inner`. kStopped: after the first structure, with
// stop_after_first (inner is zero).
constexpr int32_t kInside = -1;
constexpr int32_t kStopped = -2;

struct TagState {
  SchemaState inner;
  int32_t scan = 0;
  int32_t unused = 0;  // zero: the state has no indeterminate bytes
};

class TagAutomaton {
 public:
  using State = TagState;

  TagAutomaton(TriggerScanner scanner, SchemaAutomaton structures,
               const std::vector<std::string>& triggers, bool at_least_one, bool stop_after_first)
      : scanner_(std::move(scanner)),
        structures_(std::move(structures)),
        at_least_one_(at_least_one),
        stop_after_first_(stop_after_first) {
    for (const std::string& t : triggers) {
      SchemaState s = structures_.start();
      for (const char c : t) {
        SchemaState to;
        // parse_tag: some begin starts with the trigger, so its bytes are a live prefix.
        (void)structures_.step(s, static_cast<uint8_t>(c), &to);
        s = to;
      }
      after_trigger_.push_back(s);
    }
  }

  // at_least_one: the output opens with a structure's begin.
  State start() const {
    State s;
    if (at_least_one_) {
      s.scan = kInside;
      s.inner = structures_.start();
    }
    return s;
  }

  bool step(const State& from, uint8_t byte, State* to) const {
    *to = State{};
    if (from.scan == kStopped) return false;
    if (from.scan >= 0) {
      const int32_t node = scanner_.next[static_cast<std::size_t>(from.scan) * 256 + byte];
      const int32_t trigger = scanner_.completed[static_cast<std::size_t>(node)];
      if (trigger < 0) {
        to->scan = node;
      } else {
        to->scan = kInside;
        to->inner = after_trigger_[static_cast<std::size_t>(trigger)];
      }
      return true;
    }
    to->scan = kInside;
    if (!structures_.step(from.inner, byte, &to->inner)) return false;
    // A structure ends where its text first is complete (its end string is never empty).
    if (to->inner.value.mode == JsonMode::kStart && structures_.accepting(to->inner)) {
      *to = State{};
      if (stop_after_first_) to->scan = kStopped;
    }
    return true;
  }

  bool accepting(const State& s) const { return s.scan != kInside; }
  // Free text may always follow, unless the first structure stopped the output.
  bool finished(const State& s) const { return s.scan == kStopped; }
  // Free text and kStopped: the top bit of hi and the scanner's node (as unsigned); inside: the
  // structures' key (its hi holds a DFA state < 2^31 in its upper half: top bit clear).
  MaskKey key(const State& s) const {
    if (s.scan != kInside) {
      return MaskKey{uint64_t{1} << 63, static_cast<uint64_t>(static_cast<uint32_t>(s.scan))};
    }
    return structures_.key(s.inner);
  }

 private:
  TriggerScanner scanner_;
  SchemaAutomaton structures_;
  std::vector<SchemaState> after_trigger_;  // [trigger]: the structures' state after its bytes
  bool at_least_one_;
  bool stop_after_first_;
};

// The regex (?:BEGIN SCHEMA END|...) of the structures, their schemas compiled with `options`.
Result<std::string> structures_regex(const std::vector<Structure>& structures,
                                     const JsonSchemaOptions& options) {
  std::string regex = "(?:";
  for (std::size_t i = 0; i < structures.size(); ++i) {
    Result<std::string> schema = json_schema_to_regex(structures[i].schema, options);
    if (!schema.ok()) {
      return Status(schema.status().code(), "structural_tag: " + structures[i].schema_at + ": " +
                                                schema.status().message());
    }
    if (i > 0) regex += '|';
    regex += regex_literal(structures[i].begin) + *schema + regex_literal(structures[i].end);
  }
  return regex + ")";
}

Result<Dfa> compile_structures(const std::vector<Structure>& structures,
                               const JsonSchemaOptions& options) {
  PS_ASSIGN_OR_RETURN(const std::string regex, structures_regex(structures, options));
  Result<Dfa> dfa = compile_regex(regex);
  if (!dfa.ok()) {
    return Status(
        dfa.status().code(),
        "structural_tag: the structures' matcher does not compile: " + dfa.status().message());
  }
  return dfa;
}

}  // namespace

Result<std::shared_ptr<const Grammar>> Grammar::structural_tag(
    std::string_view tag_json, std::shared_ptr<const Vocabulary> vocab) {
  PS_RETURN_IF_ERROR(check_vocabulary(vocab));
  PS_ASSIGN_OR_RETURN(Tag tag, parse_tag(tag_json));
  JsonSchemaOptions holes;
  holes.free_form_holes = true;
  PS_ASSIGN_OR_RETURN(Dfa dfa, compile_structures(tag.structures, holes));
  std::optional<SchemaAutomaton> structures =
      SchemaAutomaton::create(std::move(dfa), kMaxWhitespaceRun);
  if (!structures) {
    // An ambiguous hole (schema_automaton.h): the free-form values spelt out instead.
    PS_ASSIGN_OR_RETURN(Dfa spelt_out, compile_structures(tag.structures, JsonSchemaOptions{}));
    structures = SchemaAutomaton::create(std::move(spelt_out), kMaxWhitespaceRun);
  }
  return AutomatonGrammar<TagAutomaton>::create(
      TagAutomaton(TriggerScanner(tag.triggers), std::move(*structures), tag.triggers,
                   tag.at_least_one, tag.stop_after_first),
      std::move(vocab));
}

}  // namespace packserve::grammar
