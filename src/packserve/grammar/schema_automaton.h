// schema_automaton.h: the byte automaton of a JSON schema's regex whose free-form values are
// holes (json_schema.h JsonSchemaOptions::free_form_holes): the regex's DFA runs the schema's
// structure and, where a hole may come, the JSON recognizer (json_automaton.h) runs the value.
// Used by Grammar::json_schema, Grammar::regex_with_json_values (grammar_json_schema.cc) and
// Grammar::structural_tag (grammar_structural_tag.cc). Internal to the grammar library.
#pragma once

#include <cstdint>
#include <cstring>
#include <optional>
#include <utility>
#include <vector>

#include "packserve/grammar/json_automaton.h"
#include "packserve/grammar/json_schema.h"
#include "packserve/grammar/mask_cache.h"
#include "packserve/grammar/regex.h"

namespace packserve::grammar::detail {

static_assert(kMaxJsonDepth <= 32, "the mask key keeps 32 bits of the container stack");

inline bool starts_json_value(uint8_t b) {
  return b == '"' || b == '{' || b == '[' || b == '-' || (b >= '0' && b <= '9') || b == 't' ||
         b == 'f' || b == 'n';
}

// value.mode == kStart: matching the schema's DFA, in state `dfa`. Any other mode: inside a
// free-form value; `dfa` is the state after it.
struct SchemaState {
  JsonState value;
  int32_t dfa = Dfa::kDeadState;
  int32_t unused = 0;  // zero: the state has no indeterminate bytes
};

class SchemaAutomaton {
 public:
  using State = SchemaState;

  // nullopt when a hole of `dfa` is ambiguous: a state that may start a free-form value also
  // has a transition of its own on a byte that starts a JSON value (as under anyOf
  // [{"type": "string"}, {}]). max_whitespace_run: the free-form
  // values' whitespace, as the regex's (kMaxWhitespaceRun for kJsonWs, 0 for none).
  static std::optional<SchemaAutomaton> create(Dfa dfa, int max_whitespace_run) {
    std::vector<int32_t> after_hole(static_cast<std::size_t>(dfa.num_states), Dfa::kDeadState);
    for (int32_t s = 0; s < dfa.num_states; ++s) {
      const int32_t after = dfa.next(s, kFreeFormHole);
      if (after == Dfa::kDeadState) continue;
      for (int b = 0; b < 256; ++b) {
        if (starts_json_value(static_cast<uint8_t>(b)) &&
            dfa.next(s, static_cast<uint8_t>(b)) != Dfa::kDeadState) {
          return std::nullopt;
        }
      }
      after_hole[static_cast<std::size_t>(s)] = after;
    }
    return SchemaAutomaton(std::move(dfa), std::move(after_hole), max_whitespace_run);
  }

  State start() const {
    State s;
    s.dfa = dfa_.start_state;
    return s;
  }

  bool step(const State& from, uint8_t byte, State* to) const {
    *to = from;
    if (byte == kFreeFormHole) return false;  // a raw U+0001 is no JSON
    if (from.value.mode == JsonMode::kStart) return step_dfa(*to, byte);
    if (json_.step(from.value, byte, &to->value)) {
      if (to->value.mode == JsonMode::kDone) to->value = JsonState{};
      return true;
    }
    if (!detail::json_number_may_end(from.value)) return false;
    to->value = JsonState{};  // the byte after a number ends it
    return step_dfa(*to, byte);
  }

  bool accepting(const State& s) const {
    const bool dfa_accepts = dfa_.accepting[static_cast<std::size_t>(s.dfa)] != 0;
    if (s.value.mode == JsonMode::kStart) return dfa_accepts;
    return dfa_accepts && detail::json_number_may_end(s.value);
  }
  bool finished(const State& s) const {
    return s.value.mode == JsonMode::kStart && accepting(s) &&
           dfa_.has_live_edge[static_cast<std::size_t>(s.dfa)] == 0;
  }
  // hi: the DFA state and the value's container stack; lo: the value's other fields (zero
  // outside a value, never zero inside one: its mode is not kStart).
  MaskKey key(const State& s) const {
    MaskKey k;
    k.hi = (static_cast<uint64_t>(static_cast<uint32_t>(s.dfa)) << 32) |
           (s.value.array_bits & 0xFFFFFFFFu);
    std::memcpy(&k.lo, reinterpret_cast<const char*>(&s.value) + 8, 8);
    return k;
  }

 private:
  SchemaAutomaton(Dfa dfa, std::vector<int32_t> after_hole, int max_whitespace_run)
      : dfa_(std::move(dfa)), after_hole_(std::move(after_hole)), json_(max_whitespace_run) {}

  bool step_dfa(State& s, uint8_t byte) const {
    const int32_t after = after_hole_[static_cast<std::size_t>(s.dfa)];
    if (after != Dfa::kDeadState && starts_json_value(byte)) {
      // Unambiguous (create): the DFA has no transition of its own on this byte.
      if (!json_.step(JsonAutomaton::value_start(), byte, &s.value)) return false;
      s.dfa = after;
      return true;
    }
    s.dfa = dfa_.next(s.dfa, byte);
    return s.dfa != Dfa::kDeadState;
  }

  Dfa dfa_;
  std::vector<int32_t> after_hole_;  // [state]: the state after a free-form value, or dead
  JsonAutomaton json_;
};

}  // namespace packserve::grammar::detail
