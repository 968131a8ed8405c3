// sentencepiece_test.cc: a hand-made SentencePiece-converted BPE tokenizer.json (as Llama-2 and
// Mistral up to v0.3 ship: Prepend / Replace normalizer, no pre-tokenizer, byte_fallback,
// SentencePiece's decoder), with every expected id worked out by hand from the merge ranks.
// scripts/tokenizer_vs_hf.py checks a real one against Hugging Face on the GPU machine.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "packserve/tokenizer/tokenizer.h"
#include "packserve/tokenizer/tokenizer_test_util.h"

namespace packserve::tokenizer {
namespace {

using Ids = std::vector<TokenId>;
using nlohmann::json;

// <unk> 0, <s> 1, </s> 2, <0x00>..<0xFF> 3..258, then ▁ 259, a 260, b 261, ▁a 262, ab 263,
// ▁ab 264, é 265. Merges by rank: (▁, a) 0, (a, b) 1, (▁a, b) 2.
constexpr TokenId kByte0 = 3;
json sentencepiece_json(bool byte_fallback, bool fuse_unk) {
  json vocab = {{"<unk>", 0}, {"<s>", 1}, {"</s>", 2}};
  static constexpr char kHex[] = "0123456789ABCDEF";
  for (int b = 0; b < 256; ++b) {
    vocab[std::string("<0x") + kHex[b >> 4] + kHex[b & 15] + ">"] = kByte0 + b;
  }
  for (const auto& [text, id] : std::vector<std::pair<std::string, int>>{{"\u2581", 259},
                                                                         {"a", 260},
                                                                         {"b", 261},
                                                                         {"\u2581a", 262},
                                                                         {"ab", 263},
                                                                         {"\u2581ab", 264},
                                                                         {"\u00e9", 265}}) {
    vocab[text] = id;
  }
  return json{{"model",
               {{"type", "BPE"},
                {"unk_token", "<unk>"},
                {"byte_fallback", byte_fallback},
                {"fuse_unk", fuse_unk},
                {"vocab", vocab},
                {"merges", {"\u2581 a", "a b", "\u2581a b"}}}},
              {"added_tokens",
               {{{"id", 0}, {"content", "<unk>"}, {"special", true}},
                {{"id", 1}, {"content", "<s>"}, {"special", true}},
                {{"id", 2}, {"content", "</s>"}, {"special", true}}}},
              {"normalizer",
               {{"type", "Sequence"},
                {"normalizers",
                 {{{"type", "Prepend"}, {"prepend", "\u2581"}},
                  {{"type", "Replace"}, {"pattern", {{"String", " "}}}, {"content", "\u2581"}}}}}},
              {"pre_tokenizer", nullptr},
              {"post_processor",
               {{"type", "TemplateProcessing"},
                {"single",
                 {{{"SpecialToken", {{"id", "<s>"}, {"type_id", 0}}}},
                  {{"Sequence", {{"id", "A"}, {"type_id", 0}}}}}},
                {"special_tokens", {{"<s>", {{"id", "<s>"}, {"ids", {1}}, {"tokens", {"<s>"}}}}}}}},
              {"decoder",
               {{"type", "Sequence"},
                {"decoders",
                 {{{"type", "Replace"}, {"pattern", {{"String", "\u2581"}}}, {"content", " "}},
                  {{"type", "ByteFallback"}},
                  {{"type", "Fuse"}},
                  {{"type", "Strip"}, {"content", " "}, {"start", 1}, {"stop", 0}}}}}}};
}

// The same vocabulary converted with legacy = false: no normalizer, a Metaspace pre-tokenizer.
json metaspace_json(const std::string& prepend_scheme, bool split) {
  json j = sentencepiece_json(/*byte_fallback=*/true, /*fuse_unk=*/true);
  j["normalizer"] = nullptr;
  j["pre_tokenizer"] = {{"type", "Metaspace"},
                        {"replacement", "\u2581"},
                        {"prepend_scheme", prepend_scheme},
                        {"split", split}};
  return j;
}

using testing::encode_ok;
using testing::load_tokenizer_json;

TEST(SentencePieceTokenizer, CodePointsMergeByRankAfterPrependAndReplace) {
  const Tokenizer t =
      load_tokenizer_json(sentencepiece_json(/*byte_fallback=*/true, /*fuse_unk=*/true));
  // "ab ab" -> "▁ab▁ab": (▁,a) r0 twice (leftmost first), then (▁a,b) r2 twice.
  EXPECT_EQ(encode_ok(t, "ab ab"), (Ids{264, 264}));
  // "bab" -> "▁bab": (a,b) r1 -> ▁ b ab; (▁,b) has no merge.
  EXPECT_EQ(encode_ok(t, "bab"), (Ids{259, 261, 263}));
  // A two-byte code point in the vocabulary is one symbol.
  EXPECT_EQ(encode_ok(t, "\u00e9"), (Ids{259, 265}));
  // With the template: <s> first.
  EXPECT_EQ(encode_ok(t, "a", /*special=*/true), (Ids{1, 262}));
  // Text after a special token is normalized on its own: it gets its own ▁.
  EXPECT_EQ(encode_ok(t, "a</s>a"), (Ids{262, 2, 262}));
  EXPECT_EQ(t.token_to_id("\u2581ab"), 264);
}

TEST(SentencePieceTokenizer, ByteFallbackAndFusedUnknowns) {
  const Tokenizer t =
      load_tokenizer_json(sentencepiece_json(/*byte_fallback=*/true, /*fuse_unk=*/true));
  // 日 (E6 97 A5) is not in the vocabulary: its three byte tokens.
  EXPECT_EQ(encode_ok(t, "\u65e5"), (Ids{259, kByte0 + 0xE6, kByte0 + 0x97, kByte0 + 0xA5}));
  const Tokenizer fused =
      load_tokenizer_json(sentencepiece_json(/*byte_fallback=*/false, /*fuse_unk=*/true));
  // Without byte fallback: unknown code points are <unk>, consecutive ones fused.
  EXPECT_EQ(encode_ok(fused, "\u65e5\u672ca\u65e5"), (Ids{259, 0, 260, 0}));
  const Tokenizer apart =
      load_tokenizer_json(sentencepiece_json(/*byte_fallback=*/false, /*fuse_unk=*/false));
  EXPECT_EQ(encode_ok(apart, "\u65e5\u672c"), (Ids{259, 0, 0}));
}

TEST(SentencePieceTokenizer, DecodeReplacesMetaSpacesJoinsBytesAndStripsOneLeadingSpace) {
  const Tokenizer t = load_tokenizer_json(sentencepiece_json(true, true));
  auto text = t.decode(Ids{264, 264});
  ASSERT_TRUE(text.ok());
  EXPECT_EQ(*text, "ab ab");
  text = t.decode(Ids{259, kByte0 + 0xE6, kByte0 + 0x97, kByte0 + 0xA5, 262});
  ASSERT_TRUE(text.ok());
  EXPECT_EQ(*text, "\u65e5 a");
  // A token's own bytes (what streaming and logprobs use) keep their space.
  std::string bytes;
  ASSERT_TRUE(t.append_token_bytes(264, {}, bytes).ok());
  EXPECT_EQ(bytes, " ab");
}

TEST(SentencePieceTokenizer, UnsupportedFormsAreErrorsNamingTheField) {
  const auto message = [](const json& j) {
    auto t = Tokenizer::from_json_text(j.dump(), "sp.json");
    EXPECT_FALSE(t.ok());
    return t.ok() ? std::string() : t.status().message();
  };
  json regex = sentencepiece_json(true, true);
  regex["normalizer"]["normalizers"][1]["pattern"] = {{"Regex", " +"}};
  EXPECT_NE(message(regex).find("sp.json: normalizer.normalizers[1].pattern: expected "
                                "{\"String\": non-empty string}"),
            std::string::npos)
      << message(regex);
  json byte_level = sentencepiece_json(true, true);
  byte_level["decoder"] = {{"type", "ByteLevel"}};
  EXPECT_NE(message(byte_level).find("sp.json: model.byte_fallback: expected false"),
            std::string::npos)
      << message(byte_level);
  json strip = sentencepiece_json(true, true);
  strip["decoder"]["decoders"][3]["stop"] = 1;
  EXPECT_NE(message(strip).find("sp.json: decoder.decoders[3]: expected Strip"), std::string::npos)
      << message(strip);
  json scheme = metaspace_json("sometimes", false);
  EXPECT_NE(message(scheme).find("sp.json: pre_tokenizer.prepend_scheme: expected \"always\""),
            std::string::npos)
      << message(scheme);
  json dash = metaspace_json("first", false);
  dash["pre_tokenizer"]["replacement"] = "-";
  EXPECT_NE(message(dash).find("sp.json: pre_tokenizer.replacement: expected"), std::string::npos)
      << message(dash);
  json byte_level_meta = testing::make_test_tokenizer_json();
  byte_level_meta["pre_tokenizer"] = {{"type", "Metaspace"}, {"replacement", "\u2581"}};
  EXPECT_NE(message(byte_level_meta)
                .find("sp.json: pre_tokenizer.type: Metaspace needs the "
                      "SentencePiece decoder"),
            std::string::npos)
      << message(byte_level_meta);
}

// The conversion without the legacy normalizer (legacy = false, as Mistral v0.3's
// tokenizer.json): no normalizer, the Metaspace pre-tokenizer. Its prepend_scheme decides which
// text gets a leading meta space; "first" is only the text that begins the input, where the
// legacy normalizer prepends one to the text after every added token.
TEST(SentencePieceTokenizer, MetaspacePrependsByItsScheme) {
  const Tokenizer first = load_tokenizer_json(metaspace_json("first", /*split=*/false));
  EXPECT_EQ(encode_ok(first, "ab ab"), (Ids{264, 264}));
  EXPECT_EQ(encode_ok(first, "a</s>a"), (Ids{262, 2, 260}));
  EXPECT_EQ(encode_ok(first, "a</s> a"), (Ids{262, 2, 262}));
  EXPECT_EQ(encode_ok(first, "</s>a"), (Ids{2, 260}));
  // The post-processor's <s> is no text: the input's own text still begins it.
  EXPECT_EQ(encode_ok(first, "a", /*special=*/true), (Ids{1, 262}));
  const Tokenizer always = load_tokenizer_json(metaspace_json("always", /*split=*/false));
  EXPECT_EQ(encode_ok(always, "a</s>a"), (Ids{262, 2, 262}));
  EXPECT_EQ(encode_ok(always, "</s>a"), (Ids{2, 262}));
  const Tokenizer never = load_tokenizer_json(metaspace_json("never", /*split=*/false));
  EXPECT_EQ(encode_ok(never, "ab ab"), (Ids{263, 264}));
  // split: pieces cut before each meta space, each encoded alone: "▁b▁ab" -> ▁b | ▁ab.
  const Tokenizer split = load_tokenizer_json(metaspace_json("first", /*split=*/true));
  EXPECT_EQ(encode_ok(split, "b ab"), (Ids{259, 261, 264}));
  // Older files: add_prefix_space instead of prepend_scheme.
  json legacy_field = metaspace_json("first", false);
  legacy_field["pre_tokenizer"].erase("prepend_scheme");
  legacy_field["pre_tokenizer"]["add_prefix_space"] = false;
  EXPECT_EQ(encode_ok(load_tokenizer_json(legacy_field), "ab ab"), (Ids{263, 264}));
  // Decoding is the same SentencePiece decoder: one leading space stripped.
  EXPECT_EQ(*first.decode(Ids{262, 2, 262}), "a</s> a");
}

}  // namespace
}  // namespace packserve::tokenizer
