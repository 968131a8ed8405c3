// ebnf.h: context-free grammars in GBNF (llama.cpp's) / EBNF (xgrammar's, vLLM's
// `structured_outputs.grammar`) notation, compiled to a regex (regex.h's dialect) that
// Grammar::regex then matches, as json_schema.h's schemas are.
//
// Notation (a superset of GBNF):
//   name ::= alternatives        one rule; names are letters, digits, '_' and '-'; the output
//                                matches the rule named `root`. A rule ends where the next
//                                `name ::=` begins, so alternatives may continue on the next
//                                line (with `|` at the end of a line or the start of the next)
//   "text"                       a literal: UTF-8, escapes \n \r \t \\ \" \' \[ \] \- \^ \xHH
//                                \uHHHH \UHHHHHHHH (code points; no surrogates)
//   [abc] [a-z] [^"\\]           a character class of code points (the same escapes); [^...]
//                                any code point not in it
//   .                            any code point, newline included
//   name                         a rule reference
//   ( alternatives )             a group
//   x* x+ x? x{m} x{m,} x{m,n} x{,n}   repetition (counts up to kMaxRepeatCount)
//   a b                          sequence; a | b alternation (an empty alternative allowed)
//   # ...                        a comment to the end of the line
// Recursion: a regex has no stack, so a rule may be open at most kMaxEbnfNesting times on one
// path of the expansion; an alternative that would open it once more is left out (a JSON
// grammar's objects and arrays nest kMaxEbnfNesting deep). A grammar whose root then matches
// nothing is an error.
// Errors (messages "grammar: line L column C: ..." where the text is at fault):
//   kInvalidArgument: malformed text (unterminated literal or class, a bad escape, a reversed
//     range or count, `::=` missing), a rule defined twice, a reference to an undefined rule,
//     no `root`, a root that matches nothing, an expansion over kMaxEbnfRegexBytes;
//   kUnimplemented: xgrammar's lookahead assertions `(= ...)`.
// Thread-safety: pure functions.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

#include "packserve/common/status.h"

namespace packserve::grammar {

// How many times one rule may be open on one path of the expansion (1: no recursion).
inline constexpr int kMaxEbnfNesting = 3;
// The largest regex an expansion may produce (its DFA is capped again by regex.h).
inline constexpr std::size_t kMaxEbnfRegexBytes = std::size_t{1} << 20;

Result<std::string> ebnf_to_regex(std::string_view grammar);

}  // namespace packserve::grammar
