// utf8_test.cc: UTF-8 validation and lossy conversion against the worked examples of the
// Unicode Standard (§3.9, "U+FFFD Substitution of Maximal Subparts", Table 3-8) and the
// GPT-2 byte-level alphabet against its definition.
#include "packserve/tokenizer/utf8.h"

#include <gtest/gtest.h>

#include <set>

#include "packserve/tokenizer/byte_level.h"

namespace packserve::tokenizer {
namespace {

const std::string kFffd = "\xEF\xBF\xBD";

std::string lossy(std::string_view bytes) {
  std::string out;
  EXPECT_EQ(append_utf8_lossy(bytes, /*final=*/true, out), bytes.size());
  return out;
}

TEST(Utf8Test, LossyFollowsUnicodeTable3_8) {
  // 61 F1 80 80 E1 80 C2 62 80 63 80 BF 64: F1 80 80, E1 80 and C2 are maximal subparts
  // (one U+FFFD each), and each stray continuation byte is one U+FFFD.
  const std::string bytes = "\x61\xF1\x80\x80\xE1\x80\xC2\x62\x80\x63\x80\xBF\x64";
  EXPECT_EQ(lossy(bytes), "a" + kFffd + kFffd + kFffd + "b" + kFffd + "c" + kFffd + kFffd + "d");
}

TEST(Utf8Test, LossyRejectsOverlongSurrogateAndOutOfRange) {
  EXPECT_EQ(lossy("\xC0\xAF"), kFffd + kFffd);                          // C0 is never a lead byte
  EXPECT_EQ(lossy("\xED\xA0\x80"), kFffd + kFffd + kFffd);              // U+D800: A0 not after ED
  EXPECT_EQ(lossy("\xF4\x90\x80\x80"), kFffd + kFffd + kFffd + kFffd);  // > U+10FFFF
  EXPECT_EQ(lossy("\xE2\x82\xAC"), "\xE2\x82\xAC");                     // U+20AC is fine
}

TEST(Utf8Test, LossyHoldsAnIncompleteTailUnlessFinal) {
  std::string out;
  EXPECT_EQ(append_utf8_lossy("a\xE2\x82", /*final=*/false, out), 1u);
  EXPECT_EQ(out, "a");
  out.clear();
  EXPECT_EQ(append_utf8_lossy("a\xE2\x82", /*final=*/true, out), 3u);
  EXPECT_EQ(out, "a" + kFffd);
  // A tail that can no longer become valid is not held back.
  out.clear();
  EXPECT_EQ(append_utf8_lossy("a\xE2\x41", /*final=*/false, out), 3u);
  EXPECT_EQ(out, "a" + kFffd + "A");
}

TEST(Utf8Test, ValidateNamesTheOffset) {
  EXPECT_TRUE(validate_utf8("h\xC3\xA9llo \xF0\x9F\x98\x80").ok());
  const Status s = validate_utf8("ab\xC3(");
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("byte offset 2"), std::string::npos) << s.message();
}

TEST(ByteLevelTest, AlphabetMatchesTheGpt2Definition) {
  // Printable bytes stand for themselves; the others map in order to U+0100.. : bytes 0..32
  // are U+0100..U+0120, 0x7F..0xA0 are U+0121..U+0142, 0xAD is U+0143.
  EXPECT_EQ(byte_to_char('A'), U'A');
  EXPECT_EQ(byte_to_char(0), U'\u0100');
  EXPECT_EQ(byte_to_char('\n'), U'\u010A');
  EXPECT_EQ(byte_to_char(' '), U'\u0120');
  EXPECT_EQ(byte_to_char(0x7F), U'\u0121');
  EXPECT_EQ(byte_to_char(0xA0), U'\u0142');
  EXPECT_EQ(byte_to_char(0xAD), U'\u0143');
  EXPECT_EQ(byte_to_char(0xAE), U'\u00AE');
  std::set<char32_t> seen;
  for (int b = 0; b < 256; ++b) {
    const char32_t c = byte_to_char(static_cast<std::uint8_t>(b));
    EXPECT_TRUE(seen.insert(c).second) << "byte " << b;
    ASSERT_TRUE(char_to_byte(c).has_value());
    EXPECT_EQ(*char_to_byte(c), b);
  }
  EXPECT_FALSE(char_to_byte(U' ').has_value());
  EXPECT_EQ(byte_level_to_bytes("\xC4\xA0hi"), std::optional<std::string>(" hi"));  // "Ġhi"
  EXPECT_EQ(bytes_to_byte_level(" hi\n"), "\xC4\xA0hi\xC4\x8A");                    // "ĠhiĊ"
  EXPECT_FALSE(byte_level_to_bytes("a b").has_value());
}

}  // namespace
}  // namespace packserve::tokenizer
