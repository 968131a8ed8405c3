// prompt_synth_test.cc: synthesized prompts have exactly the asked token count (checked by
// encoding with the tokenizer), equal hash ids give equal text and token ids, and caps keep
// shared prefixes. The tokenizer is the hand-made one of tokenizer_test_util.h plus merges
// that make 26 two-letter words " xa".." xz" single tokens.
#include "packserve/benchclient/prompt_synth.h"

#include <gtest/gtest.h>

#include "packserve/tokenizer/tokenizer_test_util.h"

namespace packserve::benchclient {
namespace {

tokenizer::Tokenizer word_tokenizer() {
  nlohmann::json j = tokenizer::testing::make_test_tokenizer_json();
  int next_id = 400;
  j["model"]["vocab"]["Ġx"] = next_id++;
  j["model"]["merges"].push_back("Ġ x");
  for (char c = 'a'; c <= 'z'; ++c) {
    const std::string w = std::string("Ġx") + c;
    j["model"]["vocab"][w] = next_id++;
    j["model"]["merges"].push_back(std::string("Ġx ") + c);
  }
  auto t = tokenizer::Tokenizer::from_json_text(j.dump(), "word_tokenizer");
  EXPECT_TRUE(t.ok()) << t.status().to_string();
  return std::move(t).value();
}

TEST(PromptSynth, FindsTheSingleTokenWords) {
  auto s = PromptSynthesizer::create(word_tokenizer());
  ASSERT_TRUE(s.ok()) << s.status().to_string();
  // 26 " x?" words plus " low" (id 259 = "Ġlow"); " x" itself is a word too.
  EXPECT_EQ(s->num_words(), 28u);
}

TEST(PromptSynth, ExactCountsAndSharedBlocks) {
  const tokenizer::Tokenizer tok = word_tokenizer();
  auto s = PromptSynthesizer::create(tok);
  ASSERT_TRUE(s.ok());
  // Two Mooncake-like requests sharing block 0 (512 tokens) and then differing.
  const std::vector<trace::PromptSegment> a = {{0, 512}, {1, 512}, {2, 76}};
  const std::vector<trace::PromptSegment> b = {{0, 512}, {9, 88}};
  auto pa = s->synthesize(a);
  auto pb = s->synthesize(b);
  ASSERT_TRUE(pa.ok() && pb.ok());
  EXPECT_EQ(pa->target_tokens, 1100);
  EXPECT_EQ(pa->verified_tokens, 1100);
  EXPECT_EQ(pb->verified_tokens, 600);
  auto ia = tok.encode(pa->text);
  auto ib = tok.encode(pb->text);
  ASSERT_TRUE(ia.ok() && ib.ok());
  ASSERT_EQ(ia->size(), 1100u);
  EXPECT_TRUE(std::equal(ia->begin(), ia->begin() + 512, ib->begin()));
  EXPECT_FALSE(std::equal(ia->begin() + 512, ia->begin() + 600, ib->begin() + 512));
  // Deterministic.
  EXPECT_EQ(s->synthesize(a)->text, pa->text);
  // A partial block is a prefix of the full block.
  EXPECT_EQ(s->segment_text(2, 512).substr(0, s->segment_text(2, 76).size()),
            s->segment_text(2, 76));
}

TEST(PromptSynth, CapKeepsThePrefix) {
  const tokenizer::Tokenizer tok = word_tokenizer();
  auto s = PromptSynthesizer::create(tok);
  ASSERT_TRUE(s.ok());
  const std::vector<trace::PromptSegment> a = {{0, 512}, {1, 512}};
  auto capped = s->synthesize(a, 700);
  ASSERT_TRUE(capped.ok());
  EXPECT_EQ(capped->target_tokens, 700);
  EXPECT_EQ(capped->verified_tokens, 700);
  EXPECT_EQ(capped->text.substr(0, s->segment_text(0, 512).size()), s->segment_text(0, 512));
  for (int n : {1, 2, 3, 17, 511, 513}) {
    auto p = s->synthesize({{42, 600}}, n);
    ASSERT_TRUE(p.ok());
    EXPECT_EQ(p->verified_tokens, n);
  }
}

TEST(PromptSynth, TooFewWordsIsAClearError) {
  auto t = tokenizer::Tokenizer::from_json_text(
      tokenizer::testing::make_test_tokenizer_json().dump(), "small");
  ASSERT_TRUE(t.ok());
  auto s = PromptSynthesizer::create(*t);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(s.status().message().find("single-token words"), std::string::npos);
}

}  // namespace
}  // namespace packserve::benchclient
