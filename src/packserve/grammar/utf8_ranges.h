// utf8_ranges.h: Unicode code point sets and their UTF-8 byte-sequence automata, for the regex
// compiler (regex_compile.cc) and parser (regex_parser.cc).
// A set of code points (a class such as [α-ω] or [^"]) becomes an alternation of byte-range
// sequences, each 1-4 ranges long, that together match exactly the well-formed UTF-8
// encodings of the set's members: no overlong forms, no surrogates, nothing past U+10FFFF
// (the algorithm of Rust's regex-syntax utf8 module: split a range at the encoding-length
// boundaries, then wherever its ends disagree in a leading byte, until every byte position
// is an independent range).
// Invariants: a CodePointSet is sorted, disjoint, non-adjacent and holds no surrogates.
// Thread-safety: pure functions.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace packserve::grammar {

inline constexpr char32_t kMaxCodePoint = 0x10FFFF;

struct CodePointRange {
  char32_t lo = 0;  // inclusive
  char32_t hi = 0;  // inclusive
};
using CodePointSet = std::vector<CodePointRange>;

// Sorts and merges `ranges` (any order, overlapping allowed) and removes the surrogates
// U+D800..U+DFFF, giving a set that satisfies the invariant above.
CodePointSet normalize_code_points(CodePointSet ranges);
// Every scalar value (U+0000..U+10FFFF without surrogates) not in `set`.
CodePointSet complement_code_points(const CodePointSet& set);

struct ByteRange {
  uint8_t lo = 0;  // inclusive
  uint8_t hi = 0;  // inclusive
};
// One alternative of a class's automaton: byte i of the encoding lies in ranges[i].
struct Utf8Sequence {
  ByteRange ranges[4];
  int num_ranges = 0;
};

// The sequences whose union matches exactly the UTF-8 encodings of the members of `set`.
std::vector<Utf8Sequence> utf8_sequences(const CodePointSet& set);

}  // namespace packserve::grammar
