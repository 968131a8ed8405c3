// tokenizer_test_util.h: a small hand-made byte-level BPE tokenizer.json for the unit tests,
// small enough that every expected encoding can be worked out by hand.
//   vocab: the 256 byte-level characters with id == byte value ('a' = 97, ' ' -> "Ġ" = 32),
//          then the merge results below, then "wl" = 262 (in the vocab, reachable by no merge).
//   merges (rank: pair -> token id): 0: e r -> "er" 256; 1: l o -> "lo" 257;
//          2: lo w -> "low" 258; 3: Ġ low -> "Ġlow" 259; 4: low er -> "lower" 260;
//          5: o w -> "ow" 261.
//   pre_tokenizer: the Qwen2/Qwen3 Split regex (Isolated) + ByteLevel(use_regex = false).
//   added tokens: see kAddedTokensJson.
#pragma once

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

#include "packserve/tokenizer/byte_level.h"
#include "packserve/tokenizer/tokenizer.h"
#include "packserve/tokenizer/utf8.h"

namespace packserve::tokenizer::testing {

inline constexpr const char* kQwenSplitRegex =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

// 300 <|im_start|> special; 301 <think> not special; 302 <s> special (the template's BOS);
// 303 <mask> lstrip + rstrip; 304 <w> single_word; 305 "ab!" and 306 "ab!cd" (longest wins);
// 307 "é" normalized (matched after NFC).
inline constexpr const char* kAddedTokensJson = R"([
  {"id": 300, "content": "<|im_start|>", "special": true, "normalized": false},
  {"id": 301, "content": "<think>", "special": false, "normalized": false},
  {"id": 302, "content": "<s>", "special": true, "normalized": false},
  {"id": 303, "content": "<mask>", "special": true, "normalized": false, "lstrip": true,
   "rstrip": true},
  {"id": 304, "content": "<w>", "special": false, "normalized": false, "single_word": true},
  {"id": 305, "content": "ab!", "special": false, "normalized": false},
  {"id": 306, "content": "ab!cd", "special": false, "normalized": false},
  {"id": 307, "content": "\u00e9", "special": false, "normalized": true}
])";

inline nlohmann::json make_test_tokenizer_json(bool array_merges = false) {
  nlohmann::json vocab = nlohmann::json::object();
  for (int b = 0; b < 256; ++b) {
    std::string key;
    append_utf8(byte_to_char(static_cast<std::uint8_t>(b)), key);
    vocab[key] = b;
  }
  const char* merges[][3] = {{"e", "r", "er"},     {"l", "o", "lo"},       {"lo", "w", "low"},
                             {"Ġ", "low", "Ġlow"}, {"low", "er", "lower"}, {"o", "w", "ow"}};
  nlohmann::json merge_list = nlohmann::json::array();
  int next_id = 256;
  for (const auto& m : merges) {
    vocab[m[2]] = next_id++;
    if (array_merges) {
      merge_list.push_back({m[0], m[1]});
    } else {
      merge_list.push_back(std::string(m[0]) + " " + m[1]);
    }
  }
  vocab["wl"] = 262;
  nlohmann::json j;
  j["version"] = "1.0";
  j["added_tokens"] = nlohmann::json::parse(kAddedTokensJson);
  j["normalizer"] = {{"type", "NFC"}};
  j["pre_tokenizer"] = {
      {"type", "Sequence"},
      {"pretokenizers",
       {{{"type", "Split"},
         {"pattern", {{"Regex", kQwenSplitRegex}}},
         {"behavior", "Isolated"},
         {"invert", false}},
        {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", false}}}}};
  j["post_processor"] = {
      {"type", "TemplateProcessing"},
      {"single",
       {{{"SpecialToken", {{"id", "<s>"}, {"type_id", 0}}}},
        {{"Sequence", {{"id", "A"}, {"type_id", 0}}}}}},
      {"special_tokens", {{"<s>", {{"id", "<s>"}, {"ids", {302}}, {"tokens", {"<s>"}}}}}}};
  j["decoder"] = {{"type", "ByteLevel"}};
  j["model"] = {{"type", "BPE"},          {"dropout", nullptr}, {"unk_token", nullptr},
                {"ignore_merges", false}, {"vocab", vocab},     {"merges", merge_list}};
  return j;
}

// A tokenizer.json the test expects to load (a failure is a test failure naming the error).
inline Tokenizer load_tokenizer_json(const nlohmann::json& j) {
  auto t = Tokenizer::from_json_text(j.dump(), "test.json");
  EXPECT_TRUE(t.ok()) << t.status().to_string();
  return std::move(t).value();
}

// The ids of `text`, which the test expects to encode.
inline std::vector<TokenId> encode_ok(const Tokenizer& t, std::string_view text,
                                      bool add_special_tokens = false) {
  auto ids = t.encode(text, {.add_special_tokens = add_special_tokens});
  EXPECT_TRUE(ids.ok()) << ids.status().to_string();
  return ids.ok() ? *ids : std::vector<TokenId>{};
}

}  // namespace packserve::tokenizer::testing
