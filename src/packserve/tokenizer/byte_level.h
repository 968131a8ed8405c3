// byte_level.h: the GPT-2 byte-to-unicode alphabet of byte-level BPE. Every byte 0..255 is
// shown as one printable code point so that vocabulary entries are printable strings: the
// bytes '!'..'~', 0xA1..0xAC and 0xAE..0xFF stand for themselves, the other 68 bytes (controls,
// space, 0x7F..0xA0, 0xAD) map in increasing order to U+0100, U+0101, ... (space -> U+0120 'Ġ',
// '\n' -> U+010A 'Ċ').
// Invariants: byte_to_char is a bijection from the 256 bytes onto its 256 code points.
// Thread-safety: constant tables, free functions.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace packserve::tokenizer {

// The code point that stands for `byte` in a byte-level vocabulary.
char32_t byte_to_char(std::uint8_t byte);
// The byte that `code_point` stands for, or nullopt when it is not in the alphabet.
std::optional<std::uint8_t> char_to_byte(char32_t code_point);

// "Ġhi" -> " hi". Returns nullopt when `text` is not valid UTF-8 or holds a code point
// outside the alphabet.
std::optional<std::string> byte_level_to_bytes(std::string_view text);
// " hi" -> "Ġhi" (any bytes; the result is valid UTF-8).
std::string bytes_to_byte_level(std::string_view bytes);

}  // namespace packserve::tokenizer
