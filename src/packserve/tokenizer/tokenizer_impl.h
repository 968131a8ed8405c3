// tokenizer_impl.h: the state behind a Tokenizer, built by tokenizer_json.cc and used by
// tokenizer.cc. Internal to the tokenizer library.
// Invariants: token_bytes_indptr has vocab_size + 1 non-decreasing entries; token_kinds has
// vocab_size entries; every id an encode can produce has a kind other than kUnused.
// Thread-safety: immutable once built (the BPE cache locks itself).
#pragma once

#include <cstdint>
#include <string>
#include <unordered_map>
#include <vector>

#include "packserve/tokenizer/added_tokens.h"
#include "packserve/tokenizer/bpe_model.h"
#include "packserve/tokenizer/normalizer.h"
#include "packserve/tokenizer/pre_tokenizer.h"
#include "packserve/tokenizer/tokenizer.h"

namespace packserve::tokenizer {

enum class TokenKind : std::uint8_t { kUnused, kVocab, kAdded, kSpecial };

struct TokenizerImpl {
  Normalizer normalizer;
  PreTokenizer pre_tokenizer;
  BpeModel model;
  std::vector<AddedToken> added_tokens;
  AddedTokenSplitter raw_splitter;         // added tokens with normalized == false
  AddedTokenSplitter normalized_splitter;  // added tokens with normalized == true
  // post_processor template for add_special_tokens: prefix_ids + sequence + suffix_ids.
  std::vector<TokenId> prefix_ids;
  std::vector<TokenId> suffix_ids;
  // Decode table in CSR form: token id's bytes are
  // token_bytes[token_bytes_indptr[id] .. token_bytes_indptr[id + 1]).
  std::string token_bytes;
  std::vector<std::uint32_t> token_bytes_indptr;
  std::vector<TokenKind> token_kinds;
  BytesToId added_content_to_id;
  // SentencePiece's Strip decoder: leading spaces decode() drops from a sequence's text.
  std::size_t strip_leading_spaces = 0;
  // The model's vocabulary is text (SentencePiece), not the byte-level alphabet.
  bool sentencepiece = false;
};

// Builds a Tokenizer from tokenizer.json text (tokenizer_json.cc).
Result<Tokenizer> load_tokenizer(std::string_view json_text, const std::string& source_name,
                                 const TokenizerLoadOptions& options);

}  // namespace packserve::tokenizer
