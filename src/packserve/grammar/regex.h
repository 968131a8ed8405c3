// regex.h: the regex dialect of structured outputs and its compilation to a DFA over bytes.
// Grammar::regex and Grammar::json_schema (whose compiler, json_schema.h, emits this
// dialect) match with it; Grammar::choice builds the same DFA from literal strings.
//
// Dialect (a subset of Python `re` / ECMAScript, over Unicode code points matched as UTF-8):
//   - The pattern matches the WHOLE output (implicit anchors). `^` as the very first byte and
//     `$` as the very last are accepted and ignored; anywhere else they are kUnimplemented.
//   - Literals: any UTF-8 character except the metacharacters \ . [ ] ( ) { } | * + ? ^ $.
//     A `{` that does not start a valid {n}, {n,} or {n,m} quantifier, and a lone `}` or
//     `]`, are literals (as in Python and JS); `{,m}` is therefore the literal "{,m}".
//   - Escapes: \ followed by ASCII punctuation is that character; \n \r \t \f \v \0 (NUL;
//     \0 followed by a digit is an octal escape: kUnimplemented); \d \D \w \W \s \S, ASCII
//     (\d = [0-9], \w = [A-Za-z0-9_], \s = [ \t\n\r\f\v]; the negated ones match every other
//     code point); \xHH (U+00HH); \uXXXX (a code point; a high surrogate must be followed by a
//     \u low surrogate and the pair is one code point; a lone surrogate is kInvalidArgument);
//     \UXXXXXXXX; \ followed by a non-ASCII character is that character. Any other escaped
//     ASCII letter or digit is an error (see below).
//   - `.`: any code point except \n.
//   - Classes [...] and [^...]: code points and ranges a-z (non-ASCII too), escapes and
//     \d \w \s \D \W \S inside, `]` first and `-` first or last are literals, \b is backspace.
//     A negated class matches any scalar value not in it: neither `.` nor a negated class ever
//     produces invalid UTF-8.
//   - Groups (...), (?:...), (?P<name>...), (?<name>...) (no captures are reported);
//     alternation | (empty alternatives allowed); quantifiers * + ? {n} {n,} {n,m} and their
//     lazy forms (*? etc.: the same language).
// Errors (messages "regex: position P: ..." with P the 0-based byte offset in the pattern):
//   - kUnimplemented: backreferences (\1, \k<name>, (?P=name)), lookaround (?= (?! (?<= (?<!,
//     \b \B \A \Z \z \G, \p{..}, inline flags (?i) and other (? groups, possessive quantifiers
//     (*+ ++ ?+ {n}+), ^ or $ elsewhere than at the ends.
//   - kInvalidArgument: unmatched ( or ), unterminated [, bad ranges [z-a] or [\d-z],
//     {3,2}, nothing to repeat (*a, a**, (+)), a trailing backslash, a bad escape (\q, \x4,
//     \uD800 alone), invalid UTF-8 in the pattern, a pattern that matches no string ([^\s\S]).
//   - kInvalidArgument "regex: too complex: ...": a repetition count over kMaxRepeatCount,
//     groups nested deeper than kMaxGroupDepth, an NFA over kMaxNfaStates states, a DFA over
//     kMaxDfaStates states or whose states hold over kMaxDfaSetEntries NFA states in all.
//
// Compilation: parse to an AST (regex_parser.h) -> Thompson NFA over bytes, each class an
// alternation of UTF-8 byte-range sequences (utf8_ranges.h), counted repetitions expanded
// -> DFA by subset construction over byte equivalence classes -> states that cannot reach
// acceptance merged into the dead state.
// Thread-safety: pure functions; a Dfa is an immutable value.
#pragma once

#include <array>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "packserve/common/status.h"

namespace packserve::grammar {

inline constexpr int kMaxRepeatCount = 1000;
inline constexpr int kMaxGroupDepth = 200;
// NFA states: about 40 per JSON string character (kJsonStringChar), so bounded strings run into
// it before the DFA cap; 200k lets the union of six agent-style tools with 1,700 bounded
// string characters in all compile (45k DFA states, 0.4 s, 58 MB peak; docs/benchmarks.md
// "Tool calls"), where 100k did not.
inline constexpr int kMaxNfaStates = 200000;
inline constexpr int kMaxDfaStates = 50000;
// NFA states summed over the DFA's states: bounds the subset construction's time (about
// 0.1 us each, so < 0.5 s) where thousands of DFA states each hold thousands of NFA states,
// as in (.{0,100}){0,10} (13M). A string of maxLength 1000 in JSON needs 54k.
inline constexpr int64_t kMaxDfaSetEntries = 4'000'000;

// A DFA over bytes. Every state except the dead one can still reach an accepting state.
struct Dfa {
  // No match can follow: every byte loops here. Never accepting.
  static constexpr int32_t kDeadState = 0;

  int32_t start_state = kDeadState;
  int32_t num_states = 0;
  // Bytes that no transition tells apart share a class; classes are contiguous byte ranges
  // numbered in byte order.
  int32_t num_byte_classes = 0;
  std::array<uint8_t, 256> byte_class{};
  std::vector<int32_t> transitions;    // [num_states * num_byte_classes]: next state
  std::vector<uint8_t> accepting;      // [num_states]: the bytes so far are a match
  std::vector<uint8_t> has_live_edge;  // [num_states]: some byte leads to a live state

  int32_t next(int32_t state, uint8_t byte) const {
    return transitions[static_cast<std::size_t>(state) *
                           static_cast<std::size_t>(num_byte_classes) +
                       byte_class[byte]];
  }
};

// `text` with the dialect's metacharacters escaped, so that it matches itself.
inline std::string regex_literal(std::string_view text) {
  std::string out;
  for (const char c : text) {
    if (std::string_view("\\.[](){}|*+?^$").find(c) != std::string_view::npos) out += '\\';
    out += c;
  }
  return out;
}

// Compiles `pattern` (the dialect above). Errors as above.
Result<Dfa> compile_regex(std::string_view pattern);
// The DFA of "exactly one of `choices`" (bytes taken literally; empty strings allowed).
// kInvalidArgument when `choices` is empty or the automaton exceeds the limits above.
Result<Dfa> compile_choice(std::span<const std::string> choices);

}  // namespace packserve::grammar
