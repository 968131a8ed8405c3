// vocabulary_impl.h: Vocabulary::Impl, the vocabulary as a byte trie laid out for the mask
// walk (automaton_matcher.h). Internal to the grammar library.
//
// The trie holds every token with bytes that is not an EOS token. Its nodes (the root
// excluded) are stored in depth-first preorder, so a subtree is the contiguous index range
// [i, nodes[i].subtree_end): the walk visits nodes in array order and skips a rejected
// subtree with one jump, touching memory sequentially (the layout XGrammar and llguidance
// use for their token tries).
// Invariants: nodes[i].depth >= 1 is the length of the node's byte path; a node's parent is
// the last node before it with depth - 1; the tokens whose bytes end at node i are
// token_ids[nodes[i].tokens_begin .. nodes[i + 1].tokens_begin) (nodes has one extra sentinel
// entry at the end for this); max_depth is the longest token's length.
// Thread-safety: immutable once built.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "packserve/grammar/grammar.h"

namespace packserve::grammar {

// Longer tokens (no tokenizer has them) are left out of the trie and never allowed.
inline constexpr std::size_t kMaxTokenBytes = UINT16_MAX;

struct TrieNode {
  uint32_t subtree_end = 0;   // one past the last node of this node's subtree
  uint32_t tokens_begin = 0;  // into Vocabulary::Impl::token_ids
  uint16_t depth = 0;         // byte path length, >= 1
  uint8_t byte = 0;           // the byte on the edge from the parent
};

struct Vocabulary::Impl {
  std::vector<std::string> token_bytes;  // [size]
  std::vector<uint8_t> is_eos;           // [size]
  std::vector<int32_t> eos_ids;          // sorted, unique
  std::vector<TrieNode> nodes;           // preorder, plus one sentinel
  std::vector<int32_t> token_ids;        // grouped by node
  int32_t num_nodes = 0;                 // nodes.size() - 1
  int32_t max_depth = 0;
};

}  // namespace packserve::grammar
