// bpe_model.h: BPE over raw bytes (byte-level BPE; or, with BpeOptions::char_symbols, over
// code points with byte fallback, as SentencePiece-converted tokenizers): a vocabulary (byte string
// -> id), merges ranked by their position in tokenizer.json (rank 0 merges first), and a bounded
// cache of results per pre-token word. Working on raw bytes instead of the GPT-2 printable alphabet
// is the same algorithm (the alphabet is a bijection, byte_level.h) without re-encoding every word.
// Algorithm (HF tokenizers' Word::merge_all): start from one symbol per byte; repeatedly merge
// the adjacent pair with the lowest rank, leftmost first among equal ranks, until no adjacent
// pair has a merge. With ignore_merges, a word that is itself in the vocabulary is one token.
// Invariants: every merge (a, b) has a, b and a+b in the vocabulary (checked by create()).
// Thread-safety: encode_word may be called concurrently; the cache is guarded by a mutex.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "packserve/common/status.h"

namespace packserve::tokenizer {

using TokenId = std::int32_t;

struct BpeOptions {
  // HF model.ignore_merges (Llama-3 sets it): a word found whole in the vocab is one token.
  bool ignore_merges = false;
  // Token for a byte that has no vocabulary entry; without one such bytes are dropped (HF).
  std::optional<TokenId> unk_id;
  // SentencePiece-style BPE (Llama-2, Mistral up to v0.3): the first symbols are the word's
  // code points (a vocabulary entry each), not its bytes.
  bool char_symbols = false;
  // With char_symbols, HF model.byte_fallback: a code point outside the vocabulary becomes
  // the tokens "<0xXX>" of its UTF-8 bytes (when all exist), else unk_id.
  bool byte_fallback = false;
  // HF model.fuse_unk: consecutive unknown symbols become one unk_id.
  bool fuse_unk = false;
  // Words whose encodings are remembered; when full the cache is cleared. 0 disables it.
  std::size_t cache_capacity_words = 32768;
  // Words longer than this are not cached (they are rare and would crowd the cache out).
  std::size_t cache_max_word_bytes = 64;
};

struct BpeMerge {
  std::string left_bytes;
  std::string right_bytes;
};

struct StringHash {
  using is_transparent = void;
  std::size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
};
using BytesToId = std::unordered_map<std::string, TokenId, StringHash, std::equal_to<>>;

class BpeModel {
 public:
  // `vocab`: token bytes -> id. `merges` in rank order. Errors name "model.merges[i]" and the
  // token that is missing from the vocabulary (shown in the byte-level alphabet).
  static Result<BpeModel> create(BytesToId vocab, const std::vector<BpeMerge>& merges,
                                 const BpeOptions& options);

  // Appends the ids of one pre-token word (raw bytes, non-empty) to `out`.
  void encode_word(std::string_view word, std::vector<TokenId>& out) const;
  // Same without touching the cache (the reference the cache is tested against).
  void encode_word_uncached(std::string_view word, std::vector<TokenId>& out) const;

  std::optional<TokenId> find(std::string_view bytes) const;
  const BytesToId& vocab() const { return vocab_; }
  std::size_t num_merges() const { return merges_.size(); }

 private:
  struct MergeTarget {
    std::uint32_t rank;
    TokenId merged_id;
  };
  static std::uint64_t pair_key(TokenId left, TokenId right) {
    return (static_cast<std::uint64_t>(static_cast<std::uint32_t>(left)) << 32) |
           static_cast<std::uint32_t>(right);
  }
  struct Cache;

  BytesToId vocab_;
  std::unordered_map<std::uint64_t, MergeTarget> merges_;
  std::optional<TokenId> byte_ids_[256];
  std::array<std::optional<TokenId>, 256> fallback_ids_{};  // byte_fallback: "<0xXX>"
  BpeOptions options_;
  std::shared_ptr<Cache> cache_;
};

}  // namespace packserve::tokenizer
