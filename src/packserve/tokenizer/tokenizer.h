// tokenizer.h: a byte-level BPE tokenizer loaded from a Hugging Face tokenizer.json (Llama-3,
// Qwen2, Qwen3 and GPT-2 style): encode text to token ids and decode ids to text.
// Pipeline of encode (HF tokenizers' order):
//   1. cut the raw text on added tokens whose normalized flag is false (added_tokens.h);
//   2. normalize each remaining piece (normalizer, e.g. NFC), cut it on normalized added tokens;
//   3. pre-tokenize into words (Split regexes + ByteLevel, pre_tokenizer.h);
//   4. BPE each word (bpe_model.h, cached per word);
//   5. with add_special_tokens, wrap in the post_processor's template (e.g. Llama-3's BOS).
// Decode concatenates each token's bytes (a vocabulary token's through the byte-level
// alphabet; an added token's content as written) and converts them with utf8.h's lossy
// conversion.
// Invariants: decode(encode(x)) == normalize(x) for valid UTF-8 x (checked in tests against
// Hugging Face's implementation). Errors never leave partial output behind.
// Thread-safety: immutable after loading except the BPE word cache, which is internally
// locked: one Tokenizer may be shared by many threads. Copies share their state.
#pragma once

#include <cstddef>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "packserve/common/status.h"
#include "packserve/tokenizer/bpe_model.h"

namespace packserve::tokenizer {

struct EncodeOptions {
  // Apply the post_processor's template (Llama-3: prepend <|begin_of_text|>). HF's encode
  // defaults to true; prompts rendered by a chat template already hold their BOS.
  bool add_special_tokens = false;
};

struct DecodeOptions {
  // Leave out tokens marked "special": true in added_tokens.
  bool skip_special_tokens = false;
};

struct TokenizerLoadOptions {
  // Passed to the BPE model (cache size, see bpe_model.h).
  std::size_t cache_capacity_words = 32768;
};

struct TokenizerImpl;

class Tokenizer {
 public:
  // Loads `path` (a tokenizer.json). Errors name the file, the JSON field and what was
  // expected, e.g. `tokenizer.json: model.type: expected "BPE", got "Unigram"`.
  static Result<Tokenizer> from_file(const std::string& path,
                                     const TokenizerLoadOptions& options = {});
  // Loads `<dir>/tokenizer.json`.
  static Result<Tokenizer> from_dir(const std::string& dir,
                                    const TokenizerLoadOptions& options = {});
  // Parses tokenizer.json text; `source_name` prefixes error messages.
  static Result<Tokenizer> from_json_text(std::string_view json_text,
                                          const std::string& source_name,
                                          const TokenizerLoadOptions& options = {});

  // Token ids of `text`. kInvalidArgument when `text` is not valid UTF-8.
  Result<std::vector<TokenId>> encode(std::string_view text,
                                      const EncodeOptions& options = {}) const;
  // Text of `ids` (ill-formed UTF-8 from partial characters becomes U+FFFD). kInvalidArgument
  // naming the position when an id is not a token of this tokenizer.
  Result<std::string> decode(std::span<const TokenId> ids, const DecodeOptions& options = {}) const;
  // Appends the raw bytes that token `id` decodes to (nothing for a skipped special token).
  Status append_token_bytes(TokenId id, const DecodeOptions& options, std::string& bytes) const;

  // The id of an added token's content (e.g. "<|im_end|>") or of a vocabulary token written
  // in the byte-level alphabet (e.g. "Ġthe"); nullopt when there is none.
  std::optional<TokenId> token_to_id(std::string_view token) const;
  bool is_special(TokenId id) const;
  // One more than the largest token id.
  std::size_t vocab_size() const;

 private:
  explicit Tokenizer(std::shared_ptr<const TokenizerImpl> impl) : impl_(std::move(impl)) {}
  friend Result<Tokenizer> load_tokenizer(std::string_view, const std::string&,
                                          const TokenizerLoadOptions&);
  std::shared_ptr<const TokenizerImpl> impl_;
};

}  // namespace packserve::tokenizer
