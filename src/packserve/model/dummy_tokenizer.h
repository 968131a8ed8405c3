// dummy_tokenizer.h: a small but real byte-level BPE tokenizer for dummy checkpoints
// (issue 4 "Loading": make-dummy-model writes a real vocabulary).
//
// Vocabulary: ids 0..255 are the 256 single bytes (id = byte value, written in the GPT-2
// byte-level alphabet, tokenizer/byte_level.h), then the tokens of BPE merges learned by
// learn_bpe_merges() from a built-in English text, then the added special tokens
// <|endoftext|>, <|im_start|>, <|im_end|> (in that order, as in Qwen2/Qwen3).
// tokenizer.json uses Qwen2/Qwen3's pre-tokenizer (the Split regex, then ByteLevel), NFC
// normalization and the ByteLevel decoder, so packserve::tokenizer and Hugging Face's
// `tokenizers` load it; tokenizer_config.json carries a ChatML chat_template with
// eos_token <|im_end|>. Everything is a pure function of `num_merges`: no randomness.
// Thread-safety: pure functions.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "packserve/common/status.h"

namespace packserve::model {

struct DummyTokenizerFiles {
  std::string tokenizer_json;          // tokenizer.json text
  std::string tokenizer_config_json;   // tokenizer_config.json text
  int64_t vocab_size = 0;              // one more than the largest id
  std::vector<int64_t> eos_token_ids;  // <|im_end|>, <|endoftext|>
  int64_t bos_token_id = 0;            // <|endoftext|> (Qwen's convention; never prepended)
};

// Learns up to `num_merges` merges from `text` by classic BPE: words are cut as a simplified
// Qwen2 pre-tokenizer would (an optional space or punctuation mark + letters, one digit,
// punctuation runs, whitespace runs), every word is split into bytes, then repeatedly the most
// frequent adjacent pair (ties: the lexicographically smallest pair of byte strings) is merged,
// until `num_merges` merges or no pair occurs twice. Returns the merges as raw byte strings.
std::vector<std::pair<std::string, std::string>> learn_bpe_merges(std::string_view text,
                                                                  int num_merges);

// The built-in English text the dummy vocabulary is learned from (a few KB).
std::string_view dummy_tokenizer_corpus();

// The dummy tokenizer with `num_merges` merges learned from dummy_tokenizer_corpus().
DummyTokenizerFiles make_dummy_tokenizer(int num_merges = 400);

}  // namespace packserve::model
