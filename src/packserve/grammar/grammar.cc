// grammar.cc: see grammar.h. The Vocabulary and its byte trie (vocabulary_impl.h); the
// grammar kinds live in dfa_grammar.cc (regex, choice), grammar_json_schema.cc,
// grammar_ebnf.cc and json_object.cc.
#include "packserve/grammar/grammar.h"

#include <algorithm>
#include <numeric>

#include "packserve/grammar/automaton_matcher.h"
#include "packserve/grammar/vocabulary_impl.h"

namespace packserve::grammar {
namespace {

// Builds the preorder trie of the tokens in `ids`, each with non-empty bytes.
void build_trie(Vocabulary::Impl& impl, std::vector<int32_t> ids) {
  const auto& bytes = impl.token_bytes;
  std::stable_sort(ids.begin(), ids.end(), [&](int32_t a, int32_t b) {
    return bytes[static_cast<std::size_t>(a)] < bytes[static_cast<std::size_t>(b)];
  });
  // path[d]: index of the open node at depth d + 1 on the current path.
  std::vector<uint32_t> path;
  std::string_view previous;
  auto close_to = [&](std::size_t depth) {
    while (path.size() > depth) {
      impl.nodes[path.back()].subtree_end = static_cast<uint32_t>(impl.nodes.size());
      path.pop_back();
    }
  };
  for (const int32_t id : ids) {
    const std::string_view b = bytes[static_cast<std::size_t>(id)];
    std::size_t common = 0;
    while (common < b.size() && common < previous.size() && b[common] == previous[common]) {
      ++common;
    }
    close_to(common);
    for (std::size_t d = common; d < b.size(); ++d) {
      TrieNode node;
      node.byte = static_cast<uint8_t>(b[d]);
      node.depth = static_cast<uint16_t>(d + 1);
      node.tokens_begin = static_cast<uint32_t>(impl.token_ids.size());
      path.push_back(static_cast<uint32_t>(impl.nodes.size()));
      impl.nodes.push_back(node);
    }
    // Sorted order puts a token before every token it is a proper prefix of, so the node's
    // tokens are contiguous and precede its children's.
    impl.token_ids.push_back(id);
    impl.max_depth = std::max(impl.max_depth, static_cast<int32_t>(b.size()));
    previous = b;
  }
  close_to(0);
  TrieNode sentinel;
  sentinel.tokens_begin = static_cast<uint32_t>(impl.token_ids.size());
  sentinel.subtree_end = static_cast<uint32_t>(impl.nodes.size());
  impl.num_nodes = static_cast<int32_t>(impl.nodes.size());
  impl.nodes.push_back(sentinel);
}

}  // namespace

Vocabulary::Vocabulary(std::vector<std::string> token_bytes, std::vector<int32_t> eos_ids)
    : impl_(std::make_unique<Impl>()) {
  Impl& impl = *impl_;
  impl.token_bytes = std::move(token_bytes);
  const auto size = impl.token_bytes.size();
  PS_CHECK(size <= static_cast<std::size_t>(INT32_MAX)) << "vocabulary size " << size;
  impl.is_eos.assign(size, 0);
  for (const int32_t id : eos_ids) {
    PS_CHECK(id >= 0 && static_cast<std::size_t>(id) < size)
        << "eos id " << id << " outside [0, " << size << ")";
    impl.is_eos[static_cast<std::size_t>(id)] = 1;
  }
  std::sort(eos_ids.begin(), eos_ids.end());
  eos_ids.erase(std::unique(eos_ids.begin(), eos_ids.end()), eos_ids.end());
  impl.eos_ids = std::move(eos_ids);
  std::vector<int32_t> ids;
  for (std::size_t id = 0; id < size; ++id) {
    const std::size_t n = impl.token_bytes[id].size();
    if (n > 0 && n <= kMaxTokenBytes && !impl.is_eos[id]) ids.push_back(static_cast<int32_t>(id));
  }
  build_trie(impl, std::move(ids));
}

Vocabulary::~Vocabulary() = default;

std::string describe_token(int32_t id, std::string_view bytes) {
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out = "token " + std::to_string(id) + " (\"";
  for (const char c : bytes) {
    const auto b = static_cast<uint8_t>(c);
    if (c == '"' || c == '\\') {
      out += '\\';
      out += c;
    } else if (b >= 0x20 && b < 0x7F) {
      out += c;
    } else {
      out += "\\x";
      out += kHex[b >> 4];
      out += kHex[b & 15];
    }
  }
  out += "\")";
  return out;
}

int32_t Vocabulary::size() const { return static_cast<int32_t>(impl_->token_bytes.size()); }

int32_t Vocabulary::mask_words() const { return (size() + 31) / 32; }

std::string_view Vocabulary::bytes(int32_t id) const {
  return impl_->token_bytes[static_cast<std::size_t>(id)];
}

bool Vocabulary::is_eos(int32_t id) const {
  return id >= 0 && id < size() && impl_->is_eos[static_cast<std::size_t>(id)] != 0;
}

}  // namespace packserve::grammar
