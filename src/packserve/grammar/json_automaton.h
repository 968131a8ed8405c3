// json_automaton.h: a byte-level pushdown recognizer of JSON (RFC 8259), as an Automaton of
// automaton_matcher.h. Grammar::json_object (json_object.cc) runs it on one whole object;
// schema_automaton.h runs it on a schema's free-form values (Grammar::json_schema,
// regex_with_json_values, structural_tag).
// Internal to the grammar library.
//
// State: a 16-byte POD (JsonState) so that the mask walk copies it per trie node and the
// mask cache keys on it bit for bit: the container stack as bits (bit d set: the container
// at depth d + 1 is an array), the depth, a lexer/parser mode, the whitespace run, and the
// few bytes a mode needs (UTF-8 continuation bytes left and the range of the next one, hex
// digits left, the literal and how much of it is matched). Fields a mode does not use are
// zero, so equal futures have equal keys.
// Rules beyond the RFC's grammar: at most kMaxJsonDepth containers are open at once; at most
// the automaton's whitespace run in a row; strings are valid UTF-8 (no overlong forms, no
// encoded surrogates) and a \u escape of a high surrogate must be followed by a \u escape of a
// low one (a lone surrogate is refused, as strict parsers such as nlohmann::json do).
// Two starts: start() (mode kStart) takes one object and nothing after its closing brace;
// value_start() (mode kValue, depth 0) takes one value of any kind, whitespace first
// included. A value ends in mode kDone; a number at depth 0 ends only at the byte after it,
// which advance() then refuses (json_number_may_end says when that refusal is the end).
// Thread-safety: a JsonAutomaton is an immutable value.
#pragma once

#include <cstdint>
#include <cstring>

#include "packserve/grammar/grammar.h"
#include "packserve/grammar/mask_cache.h"

namespace packserve::grammar::detail {

enum class JsonMode : uint8_t {
  kStart,         // before the top-level '{'
  kObjectOpen,    // after '{': a key or '}'
  kObjectKey,     // after ',' in an object: a key
  kColon,         // after a key
  kValue,         // after ':' or ',' in an array: a value
  kArrayOpen,     // after '[': a value or ']'
  kAfterValue,    // after a value: ',' or the container's closing bracket
  kString,        // inside a string (flags: key or value)
  kStringEscape,  // after '\'
  kStringU1,      // after '\u': first hex digit
  kStringUD,      // after '\uD': second hex digit decides on surrogates
  kStringHex,     // `remaining` more hex digits
  kLowBackslash,  // after a high surrogate escape: '\' of the low one
  kLowU,          // 'u'
  kLowD,          // 'D'
  kLowC,          // 'C'..'F'
  kStringUtf8,    // `remaining` continuation bytes, the next in [next_lo, next_hi]
  kNumMinus,      // after '-'
  kNumZero,       // after a leading '0'
  kNumInt,        // in [1-9][0-9]*
  kNumDot,        // after '.'
  kNumFrac,       // in the fraction's digits
  kNumExp,        // after 'e' / 'E'
  kNumExpSign,    // after the exponent's sign
  kNumExpDigits,  // in the exponent's digits
  kLiteral,       // in true / false / null: `remaining` bytes of kLiterals[literal] matched
  kDone,          // after the top-level '}'
};

inline constexpr uint8_t kFlagKey = 1;            // kString..kStringUtf8: the string is a key
inline constexpr uint8_t kFlagHighSurrogate = 2;  // kStringHex: a low surrogate escape must follow
inline constexpr const char* kLiterals[] = {"true", "false", "null"};

struct JsonState {
  uint64_t array_bits = 0;
  uint8_t depth = 0;  // open containers
  JsonMode mode = JsonMode::kStart;
  uint8_t whitespace_run = 0;
  uint8_t remaining = 0;
  uint8_t next_lo = 0;
  uint8_t next_hi = 0;
  uint8_t flags = 0;
  uint8_t literal = 0;
};
static_assert(sizeof(JsonState) == 16, "JsonState is a 128-bit cache key without padding");

inline bool is_hex(uint8_t b) {
  return (b >= '0' && b <= '9') || (b >= 'a' && b <= 'f') || (b >= 'A' && b <= 'F');
}
inline bool is_digit(uint8_t b) { return b >= '0' && b <= '9'; }

class JsonAutomaton {
 public:
  using State = JsonState;
  // max_whitespace_run: whitespace bytes allowed in a row between tokens (0: none).
  explicit JsonAutomaton(int max_whitespace_run) : max_whitespace_run_(max_whitespace_run) {}

  State start() const { return JsonState{}; }
  static State value_start() {
    JsonState s;
    s.mode = JsonMode::kValue;
    return s;
  }
  bool step(const State& from, uint8_t byte, State* to) const {
    *to = from;
    return advance(*to, byte);
  }
  bool accepting(const State& s) const { return s.mode == JsonMode::kDone; }
  bool finished(const State& s) const { return s.mode == JsonMode::kDone; }
  MaskKey key(const State& s) const {
    MaskKey k;
    std::memcpy(&k.hi, &s, 8);
    std::memcpy(&k.lo, reinterpret_cast<const char*>(&s) + 8, 8);
    return k;
  }

 private:
  static bool top_is_array(const State& s) { return ((s.array_bits >> (s.depth - 1)) & 1u) != 0; }

  static bool push(State& s, bool is_array) {
    if (s.depth >= kMaxJsonDepth) return false;
    if (is_array) s.array_bits |= uint64_t{1} << s.depth;
    ++s.depth;
    s.mode = is_array ? JsonMode::kArrayOpen : JsonMode::kObjectOpen;
    return true;
  }
  static void pop(State& s) {
    --s.depth;
    s.array_bits &= ~(uint64_t{1} << s.depth);
    s.mode = s.depth == 0 ? JsonMode::kDone : JsonMode::kAfterValue;
  }
  static void end_value(State& s) {
    s.mode = s.depth == 0 ? JsonMode::kDone : JsonMode::kAfterValue;
    s.remaining = s.flags = s.literal = 0;
  }

  static bool start_value(State& s, uint8_t b) {
    switch (b) {
      case '"':
        s.mode = JsonMode::kString;
        s.flags = 0;
        return true;
      case '{':
        return push(s, /*is_array=*/false);
      case '[':
        return push(s, /*is_array=*/true);
      case '-':
        s.mode = JsonMode::kNumMinus;
        return true;
      case '0':
        s.mode = JsonMode::kNumZero;
        return true;
      case 't':
      case 'f':
      case 'n':
        s.mode = JsonMode::kLiteral;
        s.literal = b == 't' ? 0 : b == 'f' ? 1 : 2;
        s.remaining = 1;
        return true;
      default:
        if (b >= '1' && b <= '9') {
          s.mode = JsonMode::kNumInt;
          return true;
        }
        return false;
    }
  }

  // The first byte of a multi-byte UTF-8 character in a string (Unicode Table 3-7).
  static bool start_utf8(State& s, uint8_t b) {
    uint8_t lo = 0x80;
    uint8_t hi = 0xBF;
    uint8_t n = 0;
    if (b >= 0xC2 && b <= 0xDF) {
      n = 1;
    } else if (b >= 0xE0 && b <= 0xEF) {
      n = 2;
      if (b == 0xE0) lo = 0xA0;  // no overlong forms
      if (b == 0xED) hi = 0x9F;  // no surrogates
    } else if (b >= 0xF0 && b <= 0xF4) {
      n = 3;
      if (b == 0xF0) lo = 0x90;  // no overlong forms
      if (b == 0xF4) hi = 0x8F;  // <= U+10FFFF
    } else {
      return false;
    }
    s.mode = JsonMode::kStringUtf8;
    s.remaining = n;
    s.next_lo = lo;
    s.next_hi = hi;
    return true;
  }

  // Ends a number at byte b (which is not part of it) and reads b after the value.
  bool end_number(State& s, uint8_t b) const {
    end_value(s);
    return advance(s, b);
  }

  bool advance(State& s, uint8_t b) const {
    switch (s.mode) {
      case JsonMode::kString:
        if (b == '"') {
          if ((s.flags & kFlagKey) != 0) {
            s.mode = JsonMode::kColon;
            s.flags = 0;
          } else {
            end_value(s);
          }
          return true;
        }
        if (b == '\\') {
          s.mode = JsonMode::kStringEscape;
          return true;
        }
        if (b < 0x20) return false;
        if (b < 0x80) return true;
        return start_utf8(s, b);
      case JsonMode::kStringUtf8:
        if (b < s.next_lo || b > s.next_hi) return false;
        if (--s.remaining == 0) {
          s.mode = JsonMode::kString;
          s.next_lo = s.next_hi = 0;
        } else {
          s.next_lo = 0x80;
          s.next_hi = 0xBF;
        }
        return true;
      case JsonMode::kStringEscape:
        switch (b) {
          case '"':
          case '\\':
          case '/':
          case 'b':
          case 'f':
          case 'n':
          case 'r':
          case 't':
            s.mode = JsonMode::kString;
            return true;
          case 'u':
            s.mode = JsonMode::kStringU1;
            return true;
          default:
            return false;
        }
      case JsonMode::kStringU1:
        if (b == 'd' || b == 'D') {
          s.mode = JsonMode::kStringUD;
          return true;
        }
        if (!is_hex(b)) return false;
        s.mode = JsonMode::kStringHex;
        s.remaining = 3;
        return true;
      case JsonMode::kStringUD:
        if (b >= '0' && b <= '7') {
          s.mode = JsonMode::kStringHex;
          s.remaining = 2;
          return true;
        }
        if (b == '8' || b == '9' || b == 'a' || b == 'b' || b == 'A' || b == 'B') {
          s.mode = JsonMode::kStringHex;
          s.remaining = 2;
          s.flags |= kFlagHighSurrogate;
          return true;
        }
        return false;  // a lone low surrogate, or not hex
      case JsonMode::kStringHex:
        if (!is_hex(b)) return false;
        if (--s.remaining == 0) {
          if ((s.flags & kFlagHighSurrogate) != 0) {
            s.flags &= static_cast<uint8_t>(~kFlagHighSurrogate);
            s.mode = JsonMode::kLowBackslash;
          } else {
            s.mode = JsonMode::kString;
          }
        }
        return true;
      case JsonMode::kLowBackslash:
        s.mode = JsonMode::kLowU;
        return b == '\\';
      case JsonMode::kLowU:
        s.mode = JsonMode::kLowD;
        return b == 'u';
      case JsonMode::kLowD:
        s.mode = JsonMode::kLowC;
        return b == 'd' || b == 'D';
      case JsonMode::kLowC:
        s.mode = JsonMode::kStringHex;
        s.remaining = 2;
        return (b >= 'c' && b <= 'f') || (b >= 'C' && b <= 'F');
      case JsonMode::kNumMinus:
        if (b == '0') {
          s.mode = JsonMode::kNumZero;
          return true;
        }
        s.mode = JsonMode::kNumInt;
        return b >= '1' && b <= '9';
      case JsonMode::kNumZero:
      case JsonMode::kNumInt:
        if (is_digit(b) && s.mode == JsonMode::kNumInt) return true;
        if (b == '.') {
          s.mode = JsonMode::kNumDot;
          return true;
        }
        if (b == 'e' || b == 'E') {
          s.mode = JsonMode::kNumExp;
          return true;
        }
        return end_number(s, b);
      case JsonMode::kNumDot:
        s.mode = JsonMode::kNumFrac;
        return is_digit(b);
      case JsonMode::kNumFrac:
        if (is_digit(b)) return true;
        if (b == 'e' || b == 'E') {
          s.mode = JsonMode::kNumExp;
          return true;
        }
        return end_number(s, b);
      case JsonMode::kNumExp:
        if (b == '+' || b == '-') {
          s.mode = JsonMode::kNumExpSign;
          return true;
        }
        s.mode = JsonMode::kNumExpDigits;
        return is_digit(b);
      case JsonMode::kNumExpSign:
        s.mode = JsonMode::kNumExpDigits;
        return is_digit(b);
      case JsonMode::kNumExpDigits:
        if (is_digit(b)) return true;
        return end_number(s, b);
      case JsonMode::kLiteral: {
        const char* literal = kLiterals[s.literal];
        if (b != static_cast<uint8_t>(literal[s.remaining])) return false;
        if (literal[++s.remaining] == '\0') end_value(s);
        return true;
      }
      case JsonMode::kDone:
        return false;
      default:
        break;
    }
    // The structural modes, where whitespace may come first.
    if (b == ' ' || b == '\t' || b == '\n' || b == '\r') {
      if (s.whitespace_run >= max_whitespace_run_) return false;
      ++s.whitespace_run;
      return true;
    }
    s.whitespace_run = 0;
    switch (s.mode) {
      case JsonMode::kStart:
        return b == '{' && push(s, /*is_array=*/false);
      case JsonMode::kObjectOpen:
        if (b == '}') {
          pop(s);
          return true;
        }
        [[fallthrough]];
      case JsonMode::kObjectKey:
        if (b != '"') return false;
        s.mode = JsonMode::kString;
        s.flags = kFlagKey;
        return true;
      case JsonMode::kColon:
        s.mode = JsonMode::kValue;
        return b == ':';
      case JsonMode::kArrayOpen:
        if (b == ']') {
          pop(s);
          return true;
        }
        return start_value(s, b);
      case JsonMode::kValue:
        return start_value(s, b);
      case JsonMode::kAfterValue:
        if (b == ',') {
          s.mode = top_is_array(s) ? JsonMode::kValue : JsonMode::kObjectKey;
          return true;
        }
        if (b == (top_is_array(s) ? ']' : '}')) {
          pop(s);
          return true;
        }
        return false;
      default:
        return false;
    }
  }

  int max_whitespace_run_;
};

// The mode is a complete number that more digits, '.', 'e' or 'E' may extend: at depth 0 any
// other byte ends the value (advance() refuses it).
inline bool json_number_may_end(const JsonState& s) {
  return s.depth == 0 && (s.mode == JsonMode::kNumZero || s.mode == JsonMode::kNumInt ||
                          s.mode == JsonMode::kNumFrac || s.mode == JsonMode::kNumExpDigits);
}

}  // namespace packserve::grammar::detail
