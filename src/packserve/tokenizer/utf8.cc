// utf8.cc: see utf8.h. Well-formed sequences are those of Unicode Table 3-7.
#include "packserve/tokenizer/utf8.h"

#include <string>

namespace packserve::tokenizer {
namespace {

// The range the second byte must lie in for a given lead byte (Table 3-7); the third and
// fourth bytes are always 0x80..0xBF. Returns the sequence length, or 0 for a bad lead.
std::size_t expected_length(unsigned char lead, unsigned char& second_lo,
                            unsigned char& second_hi) {
  second_lo = 0x80;
  second_hi = 0xBF;
  if (lead < 0x80) return 1;
  if (lead >= 0xC2 && lead <= 0xDF) return 2;
  if (lead >= 0xE0 && lead <= 0xEF) {
    if (lead == 0xE0) second_lo = 0xA0;  // no overlong 3-byte forms
    if (lead == 0xED) second_hi = 0x9F;  // no surrogates
    return 3;
  }
  if (lead >= 0xF0 && lead <= 0xF4) {
    if (lead == 0xF0) second_lo = 0x90;  // no overlong 4-byte forms
    if (lead == 0xF4) second_hi = 0x8F;  // <= U+10FFFF
    return 4;
  }
  return 0;
}

// Number of bytes, from bytes[0], that form a well-formed prefix of some sequence (the
// "maximal subpart"), and whether that prefix is a complete sequence.
std::size_t maximal_prefix(std::string_view bytes, bool& complete) {
  complete = false;
  const auto lead = static_cast<unsigned char>(bytes[0]);
  unsigned char lo = 0;
  unsigned char hi = 0;
  const std::size_t need = expected_length(lead, lo, hi);
  if (need == 0) return 0;
  std::size_t have = 1;
  while (have < need && have < bytes.size()) {
    const auto b = static_cast<unsigned char>(bytes[have]);
    if (have == 1 ? (b < lo || b > hi) : (b < 0x80 || b > 0xBF)) break;
    ++have;
  }
  complete = have == need;
  return have;
}

}  // namespace

void append_utf8(char32_t code_point, std::string& out) {
  const auto cp = static_cast<std::uint32_t>(code_point);
  if (cp < 0x80) {
    out.push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out.push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out.push_back(static_cast<char>(0xE0 | (cp >> 12)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    out.push_back(static_cast<char>(0xF0 | (cp >> 18)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
}

std::size_t valid_sequence_length(std::string_view bytes, char32_t* code_point) {
  if (bytes.empty()) return 0;
  bool complete = false;
  const std::size_t n = maximal_prefix(bytes, complete);
  if (!complete) return 0;
  if (code_point != nullptr) {
    const auto b0 = static_cast<std::uint32_t>(static_cast<unsigned char>(bytes[0]));
    std::uint32_t cp = n == 1 ? b0 : n == 2 ? (b0 & 0x1F) : n == 3 ? (b0 & 0x0F) : (b0 & 0x07);
    for (std::size_t i = 1; i < n; ++i) {
      cp = (cp << 6) | (static_cast<unsigned char>(bytes[i]) & 0x3Fu);
    }
    *code_point = static_cast<char32_t>(cp);
  }
  return n;
}

Status validate_utf8(std::string_view text) {
  std::size_t i = 0;
  while (i < text.size()) {
    if (static_cast<unsigned char>(text[i]) < 0x80) {
      ++i;
      continue;
    }
    const std::size_t n = valid_sequence_length(text.substr(i));
    if (n == 0) {
      return invalid_argument("text: ill-formed UTF-8 at byte offset " + std::to_string(i) +
                              ": expected valid UTF-8");
    }
    i += n;
  }
  return ok_status();
}

std::size_t append_utf8_lossy(std::string_view bytes, bool final, std::string& out) {
  std::size_t i = 0;
  while (i < bytes.size()) {
    if (static_cast<unsigned char>(bytes[i]) < 0x80) {
      out.push_back(bytes[i]);
      ++i;
      continue;
    }
    bool complete = false;
    const std::size_t n = maximal_prefix(bytes.substr(i), complete);
    if (complete) {
      out.append(bytes.substr(i, n));
      i += n;
    } else if (n > 0 && i + n == bytes.size() && !final) {
      return i;  // an incomplete character that more bytes may still complete
    } else {
      append_utf8(kReplacementChar, out);
      i += n == 0 ? 1 : n;
    }
  }
  return i;
}

}  // namespace packserve::tokenizer
