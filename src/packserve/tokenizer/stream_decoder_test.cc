// stream_decoder_test.cc: incremental decoding. Oracles: characters split across byte tokens
// by hand, and, on seeded random id sequences, the whole-sequence decode (whose lossy
// conversion utf8_test checks against the Unicode Standard's examples).
#include "packserve/tokenizer/stream_decoder.h"

#include <gtest/gtest.h>

#include <random>

#include "packserve/tokenizer/tokenizer_test_util.h"
#include "packserve/tokenizer/utf8.h"

namespace packserve::tokenizer {
namespace {

Tokenizer test_tokenizer() {
  auto t = Tokenizer::from_json_text(testing::make_test_tokenizer_json().dump(), "test.json");
  EXPECT_TRUE(t.ok()) << t.status().to_string();
  return std::move(t).value();
}

std::string push(StreamDecoder& d, TokenId id) {
  auto text = d.push(id);
  EXPECT_TRUE(text.ok()) << text.status().to_string();
  return text.ok() ? *text : "<error>";
}

TEST(StreamDecoderTest, NeverEmitsHalfACharacter) {
  StreamDecoder d(test_tokenizer(), {});
  // "é" = C3 A9 and "😀" = F0 9F 98 80, one byte token each (ids are byte values here).
  EXPECT_EQ(push(d, 'a'), "a");
  EXPECT_EQ(push(d, 0xC3), "");
  EXPECT_EQ(d.num_pending_bytes(), 1u);
  EXPECT_EQ(push(d, 0xA9), "\xC3\xA9");
  EXPECT_EQ(push(d, 0xF0), "");
  EXPECT_EQ(push(d, 0x9F), "");
  EXPECT_EQ(push(d, 0x98), "");
  EXPECT_EQ(push(d, 0x80), "\xF0\x9F\x98\x80");
  EXPECT_EQ(push(d, 260), "lower");
  EXPECT_EQ(d.finish(), "");
}

TEST(StreamDecoderTest, BrokenBytesBecomeReplacementCharacters) {
  StreamDecoder d(test_tokenizer(), {});
  EXPECT_EQ(push(d, 0xE2), "");
  // 'A' cannot continue E2: the held byte is one U+FFFD, then 'A'.
  EXPECT_EQ(push(d, 'A'),
            "\xEF\xBF\xBD"
            "A");
  EXPECT_EQ(push(d, 0xF0), "");
  EXPECT_EQ(d.finish(), "\xEF\xBF\xBD");  // a truncated character at the end
  EXPECT_EQ(d.num_pending_bytes(), 0u);
}

TEST(StreamDecoderTest, UnknownIdLeavesStateUnchanged) {
  StreamDecoder d(test_tokenizer(), {});
  EXPECT_EQ(push(d, 0xC3), "");
  const auto bad = d.push(290);
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(push(d, 0xA9), "\xC3\xA9");
}

TEST(StreamDecoderTest, SkipsSpecialTokensWhenAsked) {
  StreamDecoder d(test_tokenizer(), {.skip_special_tokens = true});
  EXPECT_EQ(push(d, 300), "");
  EXPECT_EQ(push(d, 301), "<think>");
}

TEST(StreamDecoderTest, ConcatenationEqualsWholeDecodeOnRandomIds) {
  const Tokenizer t = test_tokenizer();
  // Ids drawn mostly from bytes >= 0x80 so that characters are often split and often broken.
  const std::vector<TokenId> extra = {256, 257, 258, 259, 260, 261, 262, 300, 301, 303, 307};
  for (std::uint32_t seed = 0; seed < 200; ++seed) {
    SCOPED_TRACE("seed " + std::to_string(seed));
    std::mt19937 rng(seed);  // 32-bit results
    std::vector<TokenId> ids(static_cast<std::size_t>(rng() % 40));
    for (TokenId& id : ids) {
      const auto r = static_cast<std::uint32_t>(rng() % 10);
      id = r < 6   ? static_cast<TokenId>(0x80 + rng() % 0x80)
           : r < 8 ? static_cast<TokenId>(rng() % 0x80)
                   : extra[rng() % extra.size()];
    }
    StreamDecoder d(t, {});
    std::string streamed;
    for (const TokenId id : ids) {
      const std::string chunk = push(d, id);
      EXPECT_TRUE(validate_utf8(chunk).ok());  // every chunk is whole characters
      streamed += chunk;
      EXPECT_LE(d.num_pending_bytes(), 3u);
    }
    streamed += d.finish();
    const auto whole = t.decode(ids);
    ASSERT_TRUE(whole.ok());
    EXPECT_EQ(streamed, *whole);
  }
}

}  // namespace
}  // namespace packserve::tokenizer
