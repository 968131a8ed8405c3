// bpe_model.cc: see bpe_model.h.
#include "packserve/tokenizer/bpe_model.h"

#include <algorithm>
#include <mutex>
#include <queue>

#include "packserve/tokenizer/byte_level.h"
#include "packserve/tokenizer/utf8.h"

namespace packserve::tokenizer {

struct BpeModel::Cache {
  std::mutex mutex;
  std::unordered_map<std::string, std::vector<TokenId>, StringHash, std::equal_to<>> words;
};

namespace {

std::string quoted(std::string_view bytes) { return "\"" + bytes_to_byte_level(bytes) + "\""; }

struct Symbol {
  TokenId id;
  int prev;
  int next;
  bool alive;
};

struct Candidate {
  std::uint32_t rank;
  int pos;
  TokenId merged_id;
  // std::priority_queue pops the largest: invert so the lowest rank, then leftmost, is first.
  bool operator<(const Candidate& other) const {
    if (rank != other.rank) return rank > other.rank;
    return pos > other.pos;
  }
};

}  // namespace

Result<BpeModel> BpeModel::create(BytesToId vocab, const std::vector<BpeMerge>& merges,
                                  const BpeOptions& options) {
  BpeModel model;
  model.options_ = options;
  for (int b = 0; b < 256; ++b) {
    const std::string byte(1, static_cast<char>(b));
    const auto it = vocab.find(byte);
    if (it != vocab.end()) model.byte_ids_[b] = it->second;
    if (options.byte_fallback) {
      static constexpr char kHex[] = "0123456789ABCDEF";
      const std::string name = std::string("<0x") + kHex[b >> 4] + kHex[b & 15] + ">";
      const auto fallback = vocab.find(name);
      if (fallback != vocab.end()) model.fallback_ids_[b] = fallback->second;
    }
  }
  model.merges_.reserve(merges.size());
  for (std::size_t i = 0; i < merges.size(); ++i) {
    const BpeMerge& merge = merges[i];
    const std::string where = "model.merges[" + std::to_string(i) + "] = (" +
                              quoted(merge.left_bytes) + ", " + quoted(merge.right_bytes) + ")";
    const auto left = vocab.find(merge.left_bytes);
    if (left == vocab.end()) {
      return invalid_argument(where + ": " + quoted(merge.left_bytes) +
                              " is not in model.vocab; expected merges of vocabulary tokens");
    }
    const auto right = vocab.find(merge.right_bytes);
    if (right == vocab.end()) {
      return invalid_argument(where + ": " + quoted(merge.right_bytes) +
                              " is not in model.vocab; expected merges of vocabulary tokens");
    }
    const std::string joined = merge.left_bytes + merge.right_bytes;
    const auto merged = vocab.find(joined);
    if (merged == vocab.end()) {
      return invalid_argument(where + ": the merged token " + quoted(joined) +
                              " is not in model.vocab");
    }
    // A repeated pair keeps its last rank, as HF's HashMap collect does.
    model.merges_[pair_key(left->second, right->second)] =
        MergeTarget{static_cast<std::uint32_t>(i), merged->second};
  }
  model.vocab_ = std::move(vocab);
  if (options.cache_capacity_words > 0) model.cache_ = std::make_shared<Cache>();
  return model;
}

std::optional<TokenId> BpeModel::find(std::string_view bytes) const {
  const auto it = vocab_.find(bytes);
  if (it == vocab_.end()) return std::nullopt;
  return it->second;
}

void BpeModel::encode_word_uncached(std::string_view word, std::vector<TokenId>& out) const {
  if (options_.ignore_merges) {
    if (const auto id = find(word)) {
      out.push_back(*id);
      return;
    }
  }
  std::vector<Symbol> symbols;
  symbols.reserve(word.size());
  bool last_unk = false;
  const auto push = [&](TokenId id, bool unk) {
    if (unk && last_unk && options_.fuse_unk) return;
    last_unk = unk;
    const int pos = static_cast<int>(symbols.size());
    symbols.push_back(Symbol{id, pos - 1, pos + 1, true});
  };
  if (options_.char_symbols) {
    for (std::size_t at = 0; at < word.size();) {
      // Words are valid UTF-8 (encode validates its input); 1 keeps a stray byte apart.
      const std::size_t n = std::max<std::size_t>(valid_sequence_length(word.substr(at)), 1);
      const std::string_view ch = word.substr(at, n);
      at += n;
      if (const auto id = find(ch)) {
        push(*id, false);
        continue;
      }
      const bool all_bytes =
          options_.byte_fallback && std::all_of(ch.begin(), ch.end(), [&](char c) {
            return fallback_ids_[static_cast<unsigned char>(c)].has_value();
          });
      if (all_bytes) {
        for (const char c : ch) push(*fallback_ids_[static_cast<unsigned char>(c)], false);
      } else if (options_.unk_id) {
        push(*options_.unk_id, true);
      }  // else HF drops what it cannot represent
    }
  } else {
    for (const char c : word) {
      const auto& id = byte_ids_[static_cast<unsigned char>(c)];
      if (!id && !options_.unk_id) continue;  // HF drops bytes it cannot represent
      push(id ? *id : *options_.unk_id, !id);
    }
  }
  if (symbols.empty()) return;
  symbols.back().next = -1;

  std::priority_queue<Candidate> queue;
  auto push_pair = [&](int pos) {
    const int next = symbols[static_cast<std::size_t>(pos)].next;
    if (next < 0) return;
    const auto it = merges_.find(pair_key(symbols[static_cast<std::size_t>(pos)].id,
                                          symbols[static_cast<std::size_t>(next)].id));
    if (it != merges_.end()) queue.push(Candidate{it->second.rank, pos, it->second.merged_id});
  };
  for (int pos = 0; pos + 1 < static_cast<int>(symbols.size()); ++pos) push_pair(pos);

  while (!queue.empty()) {
    const Candidate top = queue.top();
    queue.pop();
    Symbol& left = symbols[static_cast<std::size_t>(top.pos)];
    if (!left.alive || left.next < 0) continue;
    Symbol& right = symbols[static_cast<std::size_t>(left.next)];
    // Stale candidate: the pair at this position changed since it was queued.
    const auto it = merges_.find(pair_key(left.id, right.id));
    if (it == merges_.end() || it->second.merged_id != top.merged_id) continue;
    left.id = top.merged_id;
    right.alive = false;
    left.next = right.next;
    if (left.next >= 0) symbols[static_cast<std::size_t>(left.next)].prev = top.pos;
    if (left.prev >= 0) push_pair(left.prev);
    push_pair(top.pos);
  }
  for (int pos = 0; pos >= 0; pos = symbols[static_cast<std::size_t>(pos)].next) {
    out.push_back(symbols[static_cast<std::size_t>(pos)].id);
  }
}

void BpeModel::encode_word(std::string_view word, std::vector<TokenId>& out) const {
  if (word.size() == 1 && byte_ids_[static_cast<unsigned char>(word[0])]) {
    out.push_back(*byte_ids_[static_cast<unsigned char>(word[0])]);
    return;
  }
  const bool cacheable = cache_ != nullptr && word.size() <= options_.cache_max_word_bytes;
  if (cacheable) {
    std::lock_guard<std::mutex> lock(cache_->mutex);
    const auto it = cache_->words.find(word);
    if (it != cache_->words.end()) {
      out.insert(out.end(), it->second.begin(), it->second.end());
      return;
    }
  }
  const std::size_t first = out.size();
  encode_word_uncached(word, out);
  if (cacheable) {
    std::vector<TokenId> ids(out.begin() + static_cast<std::ptrdiff_t>(first), out.end());
    std::lock_guard<std::mutex> lock(cache_->mutex);
    if (cache_->words.size() >= options_.cache_capacity_words) cache_->words.clear();
    cache_->words.emplace(std::string(word), std::move(ids));
  }
}

}  // namespace packserve::tokenizer
