// tokenizer_test.cc: encode/decode of the hand-made tokenizer of tokenizer_test_util.h, where
// every expected id sequence follows from the merge ranks by hand (worked in the comments),
// added and special tokens with their flags, and load errors naming file and field.
#include "packserve/tokenizer/tokenizer.h"

#include <gtest/gtest.h>

#include "packserve/tokenizer/tokenizer_test_util.h"
#include "testing/mutate.h"

namespace packserve::tokenizer {
namespace {

using Ids = std::vector<TokenId>;

using testing::encode_ok;
using testing::load_tokenizer_json;

std::string decode(const Tokenizer& t, const Ids& ids, bool skip_special = false) {
  auto text = t.decode(ids, {.skip_special_tokens = skip_special});
  EXPECT_TRUE(text.ok()) << text.status().to_string();
  return text.ok() ? *text : "";
}

class HandMadeTokenizerTest : public ::testing::TestWithParam<bool> {};

TEST_P(HandMadeTokenizerTest, MergesFollowRank) {
  const Tokenizer t =
      load_tokenizer_json(testing::make_test_tokenizer_json(/*array_merges=*/GetParam()));
  // "lower": pairs (l,o) r1, (o,w) r5, (e,r) r0 -> e+r, then l+o, lo+w, low+er = "lower".
  EXPECT_EQ(encode_ok(t, "lower"), (Ids{260}));
  // " lower" (one word): e+r, l+o, lo+w; then (Ġ,low) r3 beats (low,er) r4 -> Ġlow er.
  EXPECT_EQ(encode_ok(t, "lower lower"), (Ids{260, 259, 256}));
  // "loow": l+o (r1) before o+w (r5) -> lo o w -> lo ow.
  EXPECT_EQ(encode_ok(t, "loow"), (Ids{257, 261}));
  // "owl": o+w -> ow l ('l' = 108). "wl" is in the vocab but no merge makes it.
  EXPECT_EQ(encode_ok(t, "owl"), (Ids{261, 108}));
  EXPECT_EQ(encode_ok(t, "wl"), (Ids{'w', 'l'}));
  // Non-ASCII bytes are single-byte tokens here: "ü" = C3 BC.
  EXPECT_EQ(encode_ok(t, "h\xC3\xBC"), (Ids{'h', 0xC3, 0xBC}));
  EXPECT_EQ(encode_ok(t, ""), Ids{});
}

TEST_P(HandMadeTokenizerTest, DecodeRoundTripsAndReplacesBrokenCharacters) {
  const Tokenizer t = load_tokenizer_json(testing::make_test_tokenizer_json(GetParam()));
  for (const char* text :
       {"lower lower", "h\xC3\xBC\xC3\xA9 \xF0\x9F\x98\x80\n\t", "a<|im_start|>b"}) {
    EXPECT_EQ(decode(t, encode_ok(t, text)), text);
  }
  EXPECT_EQ(decode(t, {0xC3}), "\xEF\xBF\xBD");
  EXPECT_EQ(decode(t, {259, 256}), " lower");
}

INSTANTIATE_TEST_SUITE_P(MergeFormats, HandMadeTokenizerTest, ::testing::Bool(),
                         [](const auto& param_info) {
                           return param_info.param ? "array" : "string";
                         });

TEST(TokenizerTest, IgnoreMergesTakesWholeVocabWords) {
  nlohmann::json j = testing::make_test_tokenizer_json();
  j["model"]["ignore_merges"] = true;
  const Tokenizer t = load_tokenizer_json(j);
  EXPECT_EQ(encode_ok(t, "wl"), (Ids{262}));
  EXPECT_EQ(encode_ok(t, "loow"), (Ids{257, 261}));  // not in the vocab: merges as before
}

TEST(TokenizerTest, AddedAndSpecialTokens) {
  const Tokenizer t = load_tokenizer_json(testing::make_test_tokenizer_json());
  EXPECT_EQ(encode_ok(t, "a<|im_start|>b"), (Ids{'a', 300, 'b'}));
  EXPECT_EQ(encode_ok(t, "<think>lower"), (Ids{301, 260}));
  // Leftmost-longest: "ab!cd" wins over its prefix "ab!".
  EXPECT_EQ(encode_ok(t, "ab!cd ab!c"), (Ids{306, 32, 305, 'c'}));
  // lstrip/rstrip swallow the spaces around <mask>.
  EXPECT_EQ(encode_ok(t, "a  <mask>  b"), (Ids{'a', 303, 'b'}));
  // single_word: <w> counts only between non-word characters.
  EXPECT_EQ(encode_ok(t, "a<w>"), (Ids{'a', '<', 'w', '>'}));
  EXPECT_EQ(encode_ok(t, "a <w>"), (Ids{'a', 32, 304}));
  // normalized token "é": found after NFC composes e + U+0301.
  EXPECT_EQ(encode_ok(t, "e\xCC\x81"), (Ids{307}));
  // An added token decodes to its content as written (not through the byte alphabet).
  EXPECT_EQ(decode(t, {307}), "\xC3\xA9");
  // Post-processor template: <s> before the sequence.
  EXPECT_EQ(encode_ok(t, "lower", /*add_special_tokens=*/true), (Ids{302, 260}));
  // Decode: special tokens are kept or skipped; non-special added tokens always kept.
  EXPECT_EQ(decode(t, {300, 'h', 301}), "<|im_start|>h<think>");
  EXPECT_EQ(decode(t, {300, 'h', 301}, /*skip_special=*/true), "h<think>");
  EXPECT_TRUE(t.is_special(300));
  EXPECT_FALSE(t.is_special(301));
  EXPECT_EQ(t.token_to_id("<|im_start|>"), std::optional<TokenId>(300));
  EXPECT_EQ(t.token_to_id("\xC4\xA0low"), std::optional<TokenId>(259));  // "Ġlow"
  EXPECT_EQ(t.vocab_size(), 308u);
}

TEST(TokenizerTest, BadInputIsAnError) {
  const Tokenizer t = load_tokenizer_json(testing::make_test_tokenizer_json());
  const auto bad_utf8 = t.encode("ab\xFF");
  ASSERT_FALSE(bad_utf8.ok());
  EXPECT_EQ(bad_utf8.status().code(), StatusCode::kInvalidArgument);
  const auto bad_id = t.decode(Ids{'a', 280});  // 263..299 are not tokens
  ASSERT_FALSE(bad_id.ok());
  EXPECT_NE(bad_id.status().message().find("ids[1]"), std::string::npos);
  EXPECT_FALSE(t.decode(Ids{-1}).ok());
}

// Loads `j` and expects kInvalidArgument whose message holds every string of `needles`.
void expect_load_error(const nlohmann::json& j, std::initializer_list<const char*> needles) {
  const auto t = Tokenizer::from_json_text(j.dump(), "test.json");
  ASSERT_FALSE(t.ok());
  EXPECT_EQ(t.status().code(), StatusCode::kInvalidArgument);
  for (const char* needle : needles) {
    EXPECT_NE(t.status().message().find(needle), std::string::npos) << t.status().message();
  }
}

TEST(TokenizerLoadTest, ErrorsNameFileFieldAndExpectation) {
  const nlohmann::json good = testing::make_test_tokenizer_json();
  nlohmann::json j = good;
  j["model"]["type"] = "Unigram";
  expect_load_error(j, {"test.json", "model.type", "\"BPE\"", "Unigram"});
  j = good;
  j["model"]["merges"][2] = "lo q";  // "lo"+"q" = "loq" is not in the vocab
  expect_load_error(j, {"model.merges[2]", "loq"});
  j = good;
  j["model"]["merges"][0] = "abc";
  expect_load_error(j, {"model.merges[0]", "two tokens"});
  j = good;
  j["model"]["vocab"]["a"] = -4;
  expect_load_error(j, {"model.vocab[\"a\"]", "token id"});
  j = good;
  j.erase("decoder");
  expect_load_error(j, {"decoder", "ByteLevel"});
  j = good;
  j["pre_tokenizer"]["pretokenizers"][0]["behavior"] = "Sideways";
  expect_load_error(j, {"pre_tokenizer.pretokenizers[0].behavior", "Isolated"});
  j = good;
  j["pre_tokenizer"]["pretokenizers"][0]["pattern"]["Regex"] = "(unclosed";
  expect_load_error(j, {"pre_tokenizer.pretokenizers[0].pattern", "offset"});
  j = good;
  j["normalizer"] = {{"type", "Lowercase"}};
  expect_load_error(j, {"normalizer.type", "Lowercase"});
  j = good;
  j["added_tokens"][1]["special"] = "yes";
  expect_load_error(j, {"added_tokens[1].special", "true or false"});
  j = good;
  j["pre_tokenizer"] = {{"type", "Split"}, {"pattern", {{"String", " "}}}, {"behavior", "Removed"}};
  expect_load_error(j, {"pre_tokenizer", "ByteLevel"});
  j = good;
  j["post_processor"]["special_tokens"]["<s>"]["ids"][0] = 299;  // 263..299 are not tokens
  expect_load_error(j, {"post_processor.special_tokens[\"<s>\"].ids[0]", "299",
                        "neither in model.vocab nor in added_tokens"});
  j = good;
  j.erase("added_tokens");  // <s> (302) was an added token: the template's id dangles
  expect_load_error(j, {"post_processor.special_tokens[\"<s>\"].ids[0]", "302"});
  const auto not_json = Tokenizer::from_json_text("{\"model\": ", "broken.json");
  ASSERT_FALSE(not_json.ok());
  EXPECT_NE(not_json.status().message().find("broken.json"), std::string::npos);
  const auto missing = Tokenizer::from_dir("/nonexistent-dir");
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.status().code(), StatusCode::kNotFound);
}

// Seeded character mutations of the hand-made tokenizer.json (replaced, inserted, deleted):
// each either loads, and then encodes and decodes without a crash (the decoded text of what
// it encodes round-trips unless encoding itself is refused), or fails with kInvalidArgument
// naming the file. scripts/sanitize-check.sh runs it under ASan/UBSan.
TEST(TokenizerLoadTest, MutatedFilesLoadAndRunOrFailNamingTheFile) {
  const std::string valid = testing::make_test_tokenizer_json().dump();
  const std::string alphabet = "{}[],:\"0123456789-.abelnoqrstuxBPE \\\x80\xff";
  const std::string texts[] = {"hello world", "lo lo q", "ab  cd\n\t", "\xc3\xa9t\xc3\xa9"};
  Rng rng(20261124);
  int loaded = 0;
  for (int trial = 0; trial < 2000; ++trial) {
    std::string text = valid;
    const int mutations = static_cast<int>(rng.uniform_int(1, 3));
    for (int m = 0; m < mutations; ++m) packserve::testing::mutate_char(text, rng, alphabet);
    const auto t = Tokenizer::from_json_text(text, "mutated.json");
    if (!t.ok()) {
      ASSERT_EQ(t.status().code(), StatusCode::kInvalidArgument)
          << "trial " << trial << ": " << t.status().to_string();
      ASSERT_NE(t.status().message().find("mutated.json"), std::string::npos)
          << t.status().to_string();
      continue;
    }
    ++loaded;
    for (const std::string& s : texts) {
      SCOPED_TRACE("trial " + std::to_string(trial) + ", text \"" + s + "\"");
      const auto ids = t->encode(s, {.add_special_tokens = true});
      if (!ids.ok()) {
        ASSERT_EQ(ids.status().code(), StatusCode::kInvalidArgument) << ids.status().to_string();
        continue;
      }
      const auto back = t->decode(*ids);
      ASSERT_TRUE(back.ok()) << back.status().to_string();
    }
  }
  // Mutations inside a token's text or a value often keep the file loadable: both paths ran.
  EXPECT_GT(loaded, 0);
  EXPECT_LT(loaded, 2000);
}

}  // namespace
}  // namespace packserve::tokenizer
