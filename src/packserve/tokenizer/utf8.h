// utf8.h: UTF-8 scanning shared by the tokenizer: strict validation of input text, lossy
// conversion of decoded bytes (each maximal invalid subpart becomes one U+FFFD, the
// "substitution of maximal subparts" practice of Unicode §3.9 that Rust's from_utf8_lossy
// follows), and the split point a streaming decoder must hold back so that it never emits
// half a character.
// Invariants: every function here is pure; outputs are always valid UTF-8.
// Thread-safety: free functions without state.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "packserve/common/status.h"

namespace packserve::tokenizer {

inline constexpr char32_t kReplacementChar = 0xFFFD;

// Appends the UTF-8 encoding of `code_point` (must be a Unicode scalar value) to `out`.
void append_utf8(char32_t code_point, std::string& out);

// Length in bytes of the valid UTF-8 sequence starting at bytes[0], or 0 when bytes does not
// start with a complete, well-formed sequence (bad lead, bad continuation, overlong form,
// surrogate, > U+10FFFF, or truncated). `code_point` receives the value when non-null.
std::size_t valid_sequence_length(std::string_view bytes, char32_t* code_point = nullptr);

// kInvalidArgument naming the byte offset of the first ill-formed sequence, else ok.
Status validate_utf8(std::string_view text);

// Converts `bytes` to valid UTF-8, replacing each maximal ill-formed subpart by U+FFFD, and
// appends the result to `out`. With `final == false`, a trailing incomplete but so far
// well-formed sequence (at most 3 bytes) is not converted; the return value is the number of
// bytes consumed, so bytes[return..] must be presented again with more bytes after it.
// With `final == true` everything is consumed (a truncated tail becomes one U+FFFD).
std::size_t append_utf8_lossy(std::string_view bytes, bool final, std::string& out);

}  // namespace packserve::tokenizer
