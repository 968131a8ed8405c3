// added_tokens.cc: see added_tokens.h. Word characters and whitespace use Unicode
// properties through ICU, as Rust's char::is_alphanumeric / char::is_whitespace do.
#include "packserve/tokenizer/added_tokens.h"

#include <unicode/uchar.h>

#include <algorithm>

#include "packserve/tokenizer/utf8.h"

namespace packserve::tokenizer {
namespace {

bool is_word_char(char32_t c) {
  if (c == U'_') return true;
  const auto cp = static_cast<UChar32>(c);
  if (u_hasBinaryProperty(cp, UCHAR_ALPHABETIC)) return true;
  const int8_t type = u_charType(cp);
  return type == U_DECIMAL_DIGIT_NUMBER || type == U_LETTER_NUMBER || type == U_OTHER_NUMBER;
}

bool is_whitespace(char32_t c) {
  return u_hasBinaryProperty(static_cast<UChar32>(c), UCHAR_WHITE_SPACE) != 0;
}

// The code point that ends right before byte offset `end` (text is valid UTF-8), and its
// start offset.
char32_t char_before(std::string_view text, std::size_t end, std::size_t& start) {
  start = end - 1;
  while (start > 0 && (static_cast<unsigned char>(text[start]) & 0xC0) == 0x80) --start;
  char32_t cp = 0;
  (void)valid_sequence_length(text.substr(start, end - start), &cp);
  return cp;
}

char32_t char_at(std::string_view text, std::size_t begin, std::size_t& length) {
  char32_t cp = 0;
  length = valid_sequence_length(text.substr(begin), &cp);
  if (length == 0) length = 1;
  return cp;
}

}  // namespace

AddedTokenSplitter::AddedTokenSplitter(const std::vector<AddedToken>& tokens, bool normalized) {
  for (const AddedToken& t : tokens) {
    if (t.normalized != normalized || t.content.empty()) continue;
    patterns_.push_back(Pattern{t.content, t.id, t.single_word, t.lstrip, t.rstrip});
  }
  for (std::size_t i = 0; i < patterns_.size(); ++i) {
    by_first_byte_[static_cast<unsigned char>(patterns_[i].content[0])].push_back(i);
  }
  for (auto& group : by_first_byte_) {
    std::stable_sort(group.begin(), group.end(), [&](std::size_t a, std::size_t b) {
      return patterns_[a].content.size() > patterns_[b].content.size();
    });
  }
}

void AddedTokenSplitter::split(std::string_view text, std::vector<TextSegment>& out) const {
  std::size_t emitted = 0;  // text[0, emitted) is already in `out`
  std::size_t pos = 0;
  while (pos < text.size()) {
    const auto& group = by_first_byte_[static_cast<unsigned char>(text[pos])];
    const Pattern* hit = nullptr;
    for (const std::size_t index : group) {
      if (text.substr(pos).starts_with(patterns_[index].content)) {
        hit = &patterns_[index];
        break;
      }
    }
    if (hit == nullptr) {
      ++pos;
      continue;
    }
    std::size_t begin = pos;
    std::size_t end = pos + hit->content.size();
    pos = end;  // non-overlapping: the scan resumes after this occurrence either way
    if (hit->single_word) {
      std::size_t unused = 0;
      const bool word_before = begin > 0 && is_word_char(char_before(text, begin, unused));
      const bool word_after = end < text.size() && is_word_char(char_at(text, end, unused));
      if (word_before || word_after) continue;
    }
    if (hit->lstrip) {
      while (begin > emitted) {
        std::size_t start = 0;
        if (!is_whitespace(char_before(text, begin, start))) break;
        begin = start;
      }
    }
    if (hit->rstrip) {
      while (end < text.size()) {
        std::size_t length = 0;
        if (!is_whitespace(char_at(text, end, length))) break;
        end += length;
      }
      pos = end;
    }
    if (begin > emitted) out.push_back(TextSegment{text.substr(emitted, begin - emitted), {}});
    out.push_back(TextSegment{text.substr(begin, end - begin), hit->id});
    emitted = end;
  }
  if (emitted < text.size()) out.push_back(TextSegment{text.substr(emitted), {}});
}

}  // namespace packserve::tokenizer
