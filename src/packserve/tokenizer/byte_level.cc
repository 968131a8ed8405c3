// byte_level.cc: see byte_level.h.
#include "packserve/tokenizer/byte_level.h"

#include <array>

#include "packserve/tokenizer/utf8.h"

namespace packserve::tokenizer {
namespace {

constexpr bool stands_for_itself(int b) {
  return (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
}

constexpr std::array<char32_t, 256> make_byte_to_char() {
  std::array<char32_t, 256> table{};
  char32_t next_shifted = 256;
  for (int b = 0; b < 256; ++b) {
    table[static_cast<std::size_t>(b)] =
        stands_for_itself(b) ? static_cast<char32_t>(b) : next_shifted++;
  }
  return table;
}

constexpr std::array<char32_t, 256> kByteToChar = make_byte_to_char();
// Every mapped code point is < 0x144 (256 + 68), so the inverse is a small dense table.
constexpr char32_t kMaxMappedChar = 256 + 68;

constexpr std::array<int, kMaxMappedChar> make_char_to_byte() {
  std::array<int, kMaxMappedChar> table{};
  for (auto& v : table) v = -1;
  for (int b = 0; b < 256; ++b) table[kByteToChar[static_cast<std::size_t>(b)]] = b;
  return table;
}

constexpr std::array<int, kMaxMappedChar> kCharToByte = make_char_to_byte();

}  // namespace

char32_t byte_to_char(std::uint8_t byte) { return kByteToChar[byte]; }

std::optional<std::uint8_t> char_to_byte(char32_t code_point) {
  if (code_point >= kMaxMappedChar) return std::nullopt;
  const int b = kCharToByte[code_point];
  if (b < 0) return std::nullopt;
  return static_cast<std::uint8_t>(b);
}

std::optional<std::string> byte_level_to_bytes(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  std::size_t i = 0;
  while (i < text.size()) {
    char32_t cp = 0;
    const std::size_t n = valid_sequence_length(text.substr(i), &cp);
    if (n == 0) return std::nullopt;
    const auto b = char_to_byte(cp);
    if (!b) return std::nullopt;
    out.push_back(static_cast<char>(*b));
    i += n;
  }
  return out;
}

std::string bytes_to_byte_level(std::string_view bytes) {
  std::string out;
  out.reserve(bytes.size() * 2);
  for (const char c : bytes) append_utf8(byte_to_char(static_cast<std::uint8_t>(c)), out);
  return out;
}

}  // namespace packserve::tokenizer
