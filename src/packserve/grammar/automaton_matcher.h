// automaton_matcher.h: the Grammar and Matcher shared by every grammar kind, over a byte
// automaton (dfa_grammar.cc: a regex DFA; json_object.cc: a JSON pushdown recognizer).
// Internal to the grammar library.
//
// An Automaton is a value type with
//   using State = ...;                              // trivially copyable, small
//   State start() const;
//   bool step(const State& from, uint8_t byte, State* to) const;  // false: no match follows
//   bool accepting(const State&) const;             // the bytes so far are a complete match
//   bool finished(const State&) const;              // accepting, and no byte is accepted
//   MaskKey key(const State&) const;                // equal keys <=> equal futures
// The mask of a state is computed by walking the vocabulary trie (vocabulary_impl.h) in
// preorder from that state, pruning a subtree at the first rejected byte, and is cached in the
// grammar's MaskCache under key(state). Instantiate in the .cc that defines the automaton's
// step, so that the walk inlines it.
// Thread-safety: as grammar.h (the grammar shared and immutable but for its locked cache, a
// matcher per thread).
#pragma once

#include <algorithm>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "packserve/grammar/grammar.h"
#include "packserve/grammar/mask_cache.h"
#include "packserve/grammar/vocabulary_impl.h"

namespace packserve::grammar {

// `token 17 ("}x")`, the bytes escaped as C string literals (non-printable bytes as \xHH).
std::string describe_token(int32_t id, std::string_view bytes);

// Sets the bit of every trie token whose bytes the automaton accepts from `start`; `mask` must
// be zero on entry. Returns the number of bits set. `stack` is scratch space.
template <typename Automaton>
int64_t walk_trie(const Vocabulary::Impl& vocab, const Automaton& automaton,
                  const typename Automaton::State& start, std::span<uint32_t> mask,
                  std::vector<typename Automaton::State>& stack) {
  stack.resize(static_cast<std::size_t>(vocab.max_depth) + 1);
  stack[0] = start;
  const TrieNode* nodes = vocab.nodes.data();
  const int32_t* token_ids = vocab.token_ids.data();
  const auto num_nodes = static_cast<uint32_t>(vocab.num_nodes);
  int64_t num_allowed = 0;
  uint32_t i = 0;
  while (i < num_nodes) {
    const TrieNode& node = nodes[i];
    if (!automaton.step(stack[node.depth - 1u], node.byte, &stack[node.depth])) {
      i = node.subtree_end;
      continue;
    }
    for (uint32_t t = node.tokens_begin; t < nodes[i + 1].tokens_begin; ++t) {
      const auto id = static_cast<uint32_t>(token_ids[t]);
      mask[id >> 5] |= 1u << (id & 31u);
      ++num_allowed;
    }
    ++i;
  }
  return num_allowed;
}

template <typename Automaton>
class AutomatonMatcher;

template <typename Automaton>
class AutomatonGrammar final : public Grammar,
                               public std::enable_shared_from_this<AutomatonGrammar<Automaton>> {
 public:
  static std::shared_ptr<const Grammar> create(Automaton automaton,
                                               std::shared_ptr<const Vocabulary> vocab) {
    return std::make_shared<AutomatonGrammar>(std::move(automaton), std::move(vocab));
  }
  AutomatonGrammar(Automaton automaton, std::shared_ptr<const Vocabulary> vocab)
      : automaton_(std::move(automaton)), vocab_(std::move(vocab)) {}

  std::unique_ptr<Matcher> matcher() const override {
    return std::make_unique<AutomatonMatcher<Automaton>>(this->shared_from_this());
  }
  const Vocabulary& vocabulary() const override { return *vocab_; }
  const Automaton& automaton() const { return automaton_; }
  MaskCache& mask_cache() const { return mask_cache_; }

 private:
  const Automaton automaton_;
  const std::shared_ptr<const Vocabulary> vocab_;
  mutable MaskCache mask_cache_;
};

template <typename Automaton>
class AutomatonMatcher final : public Matcher {
 public:
  using State = typename Automaton::State;

  explicit AutomatonMatcher(std::shared_ptr<const AutomatonGrammar<Automaton>> grammar)
      : grammar_(std::move(grammar)), state_(grammar_->automaton().start()) {}

  int64_t fill_mask(std::span<uint32_t> mask) override {
    const Vocabulary& vocab = grammar_->vocabulary();
    PS_CHECK(mask.size() == static_cast<std::size_t>(vocab.mask_words()))
        << "mask has " << mask.size() << " words, the vocabulary needs " << vocab.mask_words();
    std::fill(mask.begin(), mask.end(), 0u);
    if (eos_accepted_) return 0;
    const Automaton& automaton = grammar_->automaton();
    const MaskKey key = automaton.key(state_);
    MaskCache& cache = grammar_->mask_cache();
    if (const auto hit = cache.lookup(key, mask)) return *hit;
    int64_t num_allowed = walk_trie(vocab.impl(), automaton, state_, mask, stack_);
    if (automaton.accepting(state_)) {
      for (const int32_t id : vocab.impl().eos_ids) {
        mask[static_cast<std::size_t>(id) >> 5] |= 1u << (static_cast<uint32_t>(id) & 31u);
        ++num_allowed;
      }
    }
    cache.insert(key, mask, num_allowed);
    return num_allowed;
  }

  Status accept(int32_t token) override {
    const Vocabulary& vocab = grammar_->vocabulary();
    if (token < 0 || token >= vocab.size()) {
      return invalid_argument("token " + std::to_string(token) + " is outside the vocabulary [0, " +
                              std::to_string(vocab.size()) + ")");
    }
    const std::string_view bytes = vocab.bytes(token);
    const Automaton& automaton = grammar_->automaton();
    if (eos_accepted_) {
      return invalid_argument(describe_token(token, bytes) +
                              " is not allowed here: the output has ended");
    }
    if (vocab.is_eos(token)) {
      if (!automaton.accepting(state_)) {
        return invalid_argument(describe_token(token, bytes) +
                                " is not allowed here: the output is not a complete match");
      }
      eos_accepted_ = true;
      return ok_status();
    }
    if (bytes.empty() || bytes.size() > kMaxTokenBytes) {
      return invalid_argument(describe_token(token, bytes) +
                              " is not allowed here: a token without bytes is never allowed");
    }
    State state = state_;
    for (const char c : bytes) {
      State next;
      if (!automaton.step(state, static_cast<uint8_t>(c), &next)) {
        return invalid_argument(describe_token(token, bytes) + " is not allowed here");
      }
      state = next;
    }
    state_ = state;
    return ok_status();
  }

  bool accepting() const override { return grammar_->automaton().accepting(state_); }
  bool finished() const override { return eos_accepted_ || grammar_->automaton().finished(state_); }

 private:
  const std::shared_ptr<const AutomatonGrammar<Automaton>> grammar_;
  State state_;
  bool eos_accepted_ = false;
  std::vector<State> stack_;  // walk_trie's scratch, kept to avoid reallocation
};

}  // namespace packserve::grammar
