// regex_compile.cc: regex.h's compile_regex and compile_choice. The syntax tree becomes a
// Thompson NFA built back to front (each node compiled with its continuation state known),
// then a DFA by subset construction over byte equivalence classes, then the states from
// which no match is reachable are folded into the dead state.
#include <algorithm>
#include <string>
#include <unordered_map>
#include <utility>

#include "packserve/grammar/regex.h"
#include "packserve/grammar/regex_parser.h"

namespace packserve::grammar {
namespace {

// A byte state consumes one byte in [lo, hi] and moves to `out`; any other state is an
// epsilon state with the `eps` successors (none: a state no match passes through). State
// kMatchState is the single accepting state.
struct NfaState {
  bool is_byte = false;
  uint8_t lo = 0;
  uint8_t hi = 0;
  int32_t out = 0;
  std::vector<int32_t> eps;
};
constexpr int32_t kMatchState = 0;

class NfaBuilder {
 public:
  NfaBuilder() { states_.emplace_back(); }  // kMatchState

  // Returns the entry state of `node` followed by `next`. Stops adding states (and
  // returns `next`) once the limit is exceeded; too_large() then says so.
  int32_t compile(const RegexNode& node, int32_t next) {
    if (too_large_) return next;
    switch (node.kind) {
      case RegexNode::Kind::kEmpty:
        return next;
      case RegexNode::Kind::kBytes:
        return add_byte(node.byte_lo, node.byte_hi, next);
      case RegexNode::Kind::kCodePoints:
        return compile_code_points(node.code_points, next);
      case RegexNode::Kind::kConcat:
        for (auto it = node.children.rbegin(); it != node.children.rend(); ++it) {
          next = compile(*it, next);
        }
        return next;
      case RegexNode::Kind::kAlternation: {
        std::vector<int32_t> entries;
        for (const RegexNode& child : node.children) entries.push_back(compile(child, next));
        return add_eps(std::move(entries));
      }
      case RegexNode::Kind::kRepeat:
        return compile_repeat(node, next);
    }
    return next;
  }

  bool too_large() const { return too_large_; }
  std::vector<NfaState>& states() { return states_; }

 private:
  int32_t add(NfaState s) {
    if (static_cast<int64_t>(states_.size()) >= kMaxNfaStates) {
      too_large_ = true;
      return kMatchState;
    }
    states_.push_back(std::move(s));
    return static_cast<int32_t>(states_.size() - 1);
  }
  int32_t add_byte(uint8_t lo, uint8_t hi, int32_t out) {
    NfaState s;
    s.is_byte = true;
    s.lo = lo;
    s.hi = hi;
    s.out = out;
    return add(std::move(s));
  }
  int32_t add_eps(std::vector<int32_t> eps) {
    NfaState s;
    s.eps = std::move(eps);
    return add(std::move(s));
  }

  int32_t compile_code_points(const CodePointSet& set, int32_t next) {
    std::vector<int32_t> entries;
    for (const Utf8Sequence& seq : utf8_sequences(set)) {
      int32_t cur = next;
      for (int i = seq.num_ranges - 1; i >= 0; --i) {
        cur = add_byte(seq.ranges[i].lo, seq.ranges[i].hi, cur);
      }
      entries.push_back(cur);
    }
    if (entries.size() == 1) return entries[0];
    return add_eps(std::move(entries));  // no entries: an empty set, which nothing passes
  }

  int32_t compile_repeat(const RegexNode& node, int32_t next) {
    const RegexNode& child = node.children[0];
    int32_t cur = next;
    if (!node.max_count.has_value()) {
      // x{n,} = x^(n-1) x+ (n >= 1) or x* (n = 0); the loop state chooses x again or next.
      const int32_t loop = add_eps({});
      const int32_t entry = compile(child, loop);
      if (too_large_) return next;
      states_[loop].eps = {entry, next};
      cur = node.min_count == 0 ? loop : entry;
      for (int32_t i = 1; i < node.min_count && !too_large_; ++i) cur = compile(child, cur);
      return cur;
    }
    // x{n,m} = x^n (x (x (...)?)?)?: each optional copy may stop at next.
    for (int32_t i = 0; i < *node.max_count - node.min_count && !too_large_; ++i) {
      const int32_t entry = compile(child, cur);
      cur = add_eps({entry, next});
    }
    for (int32_t i = 0; i < node.min_count && !too_large_; ++i) cur = compile(child, cur);
    return cur;
  }

  std::vector<NfaState> states_;
  bool too_large_ = false;
};

struct VectorHash {
  uint64_t operator()(const std::vector<int32_t>& v) const {
    uint64_t h = 1469598103934665603ull;
    for (const int32_t x : v) h = (h ^ static_cast<uint32_t>(x)) * 1099511628211ull;
    return h;
  }
};

class DfaBuilder {
 public:
  explicit DfaBuilder(const std::vector<NfaState>& nfa) : nfa_(nfa), mark_(nfa.size(), 0) {}

  Result<Dfa> build(int32_t nfa_start) {
    compute_byte_classes();
    intern({});  // kDeadState: the empty set
    const int32_t start = intern(closure({nfa_start}));
    const auto num_classes = static_cast<std::size_t>(dfa_.num_byte_classes);
    std::vector<std::vector<int32_t>> seeds(num_classes);
    for (std::size_t s = 1; s < sets_.size(); ++s) {  // sets_ grows while we walk it
      for (auto& seed : seeds) seed.clear();
      for (const int32_t q : sets_[s]) {
        const NfaState& st = nfa_[static_cast<std::size_t>(q)];
        if (!st.is_byte) continue;
        for (int c = dfa_.byte_class[st.lo]; c <= dfa_.byte_class[st.hi]; ++c) {
          seeds[static_cast<std::size_t>(c)].push_back(st.out);
        }
      }
      for (std::size_t c = 0; c < num_classes; ++c) {
        int32_t target = Dfa::kDeadState;
        if (c > 0 && seeds[c] == seeds[c - 1]) {
          target = dfa_.transitions[s * num_classes + c - 1];
        } else if (!seeds[c].empty()) {
          target = intern(closure(seeds[c]));
        }
        if (sets_.size() > static_cast<std::size_t>(kMaxDfaStates)) {
          return invalid_argument("regex: too complex: the DFA has over " +
                                  std::to_string(kMaxDfaStates) + " states");
        }
        if (total_set_entries_ > kMaxDfaSetEntries) {
          return invalid_argument("regex: too complex: the DFA's states hold over " +
                                  std::to_string(kMaxDfaSetEntries) + " NFA states in all");
        }
        dfa_.transitions[s * num_classes + c] = target;
      }
    }
    dfa_.start_state = start;
    dfa_.num_states = static_cast<int32_t>(sets_.size());
    prune_dead_states();
    if (dfa_.start_state == Dfa::kDeadState) {
      return invalid_argument("regex: the pattern matches no string");
    }
    return std::move(dfa_);
  }

 private:
  // Bytes split at every range boundary of every byte state; classes numbered in byte order.
  void compute_byte_classes() {
    std::array<bool, 257> boundary{};
    boundary[0] = true;
    for (const NfaState& s : nfa_) {
      if (!s.is_byte) continue;
      boundary[s.lo] = true;
      boundary[static_cast<std::size_t>(s.hi) + 1] = true;
    }
    int cls = -1;
    for (int b = 0; b < 256; ++b) {
      if (boundary[static_cast<std::size_t>(b)]) ++cls;
      dfa_.byte_class[static_cast<std::size_t>(b)] = static_cast<uint8_t>(cls);
    }
    dfa_.num_byte_classes = cls + 1;
  }

  // The byte states and the match state reachable from `seeds` through epsilon edges,
  // sorted: two closures are the same DFA state iff their vectors are equal.
  std::vector<int32_t> closure(const std::vector<int32_t>& seeds) {
    ++generation_;
    std::vector<int32_t> out;
    stack_.assign(seeds.begin(), seeds.end());
    while (!stack_.empty()) {
      const int32_t q = stack_.back();
      stack_.pop_back();
      uint32_t& m = mark_[static_cast<std::size_t>(q)];
      if (m == generation_) continue;
      m = generation_;
      const NfaState& st = nfa_[static_cast<std::size_t>(q)];
      if (st.is_byte || q == kMatchState) out.push_back(q);
      for (const int32_t e : st.eps) stack_.push_back(e);
    }
    std::sort(out.begin(), out.end());
    return out;
  }

  // The id of the DFA state `set`, a new one when unseen. Each set is stored once (sets_);
  // the index maps its hash to the ids with that hash.
  int32_t intern(std::vector<int32_t> set) {
    const uint64_t hash = VectorHash{}(set);
    const auto [begin, end] = ids_.equal_range(hash);
    for (auto it = begin; it != end; ++it) {
      if (sets_[static_cast<std::size_t>(it->second)] == set) return it->second;
    }
    const auto id = static_cast<int32_t>(sets_.size());
    ids_.emplace(hash, id);
    total_set_entries_ += static_cast<int64_t>(set.size());
    sets_.push_back(std::move(set));
    dfa_.transitions.resize(sets_.size() * static_cast<std::size_t>(dfa_.num_byte_classes),
                            Dfa::kDeadState);
    dfa_.accepting.push_back(!sets_.back().empty() && sets_.back()[0] == kMatchState);
    return id;
  }

  // Live states reach an accepting one; edges into the others go to the dead state.
  void prune_dead_states() {
    const auto n = static_cast<std::size_t>(dfa_.num_states);
    const auto nc = static_cast<std::size_t>(dfa_.num_byte_classes);
    std::vector<std::vector<int32_t>> reverse(n);
    for (std::size_t s = 0; s < n; ++s) {
      for (std::size_t c = 0; c < nc; ++c) {
        reverse[static_cast<std::size_t>(dfa_.transitions[s * nc + c])].push_back(
            static_cast<int32_t>(s));
      }
    }
    std::vector<uint8_t> live(n, 0);
    std::vector<int32_t> work;
    for (std::size_t s = 0; s < n; ++s) {
      if (dfa_.accepting[s]) {
        live[s] = 1;
        work.push_back(static_cast<int32_t>(s));
      }
    }
    while (!work.empty()) {
      const auto s = static_cast<std::size_t>(work.back());
      work.pop_back();
      for (const int32_t p : reverse[s]) {
        if (!live[static_cast<std::size_t>(p)]) {
          live[static_cast<std::size_t>(p)] = 1;
          work.push_back(p);
        }
      }
    }
    dfa_.has_live_edge.assign(n, 0);
    for (std::size_t s = 0; s < n; ++s) {
      for (std::size_t c = 0; c < nc; ++c) {
        int32_t& t = dfa_.transitions[s * nc + c];
        if (!live[s] || !live[static_cast<std::size_t>(t)]) t = Dfa::kDeadState;
        if (t != Dfa::kDeadState) dfa_.has_live_edge[s] = 1;
      }
    }
    if (!live[static_cast<std::size_t>(dfa_.start_state)]) dfa_.start_state = Dfa::kDeadState;
  }

  const std::vector<NfaState>& nfa_;
  std::vector<uint32_t> mark_;
  uint32_t generation_ = 0;
  std::vector<int32_t> stack_;
  std::vector<std::vector<int32_t>> sets_;
  std::unordered_multimap<uint64_t, int32_t> ids_;
  int64_t total_set_entries_ = 0;  // NFA states over all DFA states: the work and memory
  Dfa dfa_;
};

Result<Dfa> compile_tree(const RegexNode& tree) {
  NfaBuilder nfa;
  const int32_t start = nfa.compile(tree, kMatchState);
  if (nfa.too_large()) {
    return invalid_argument("regex: too complex: the NFA has over " +
                            std::to_string(kMaxNfaStates) + " states");
  }
  return DfaBuilder(nfa.states()).build(start);
}

}  // namespace

Result<Dfa> compile_regex(std::string_view pattern) {
  PS_ASSIGN_OR_RETURN(const RegexNode tree, parse_regex(pattern));
  return compile_tree(tree);
}

Result<Dfa> compile_choice(std::span<const std::string> choices) {
  if (choices.empty()) return invalid_argument("choice: expected at least one string, got none");
  RegexNode tree;
  tree.kind = RegexNode::Kind::kAlternation;
  for (const std::string& choice : choices) {
    RegexNode literal;
    literal.kind = RegexNode::Kind::kConcat;
    for (const char c : choice) {
      RegexNode byte;
      byte.kind = RegexNode::Kind::kBytes;
      byte.byte_lo = byte.byte_hi = static_cast<uint8_t>(c);
      literal.children.push_back(std::move(byte));
    }
    tree.children.push_back(std::move(literal));
  }
  return compile_tree(tree);
}

}  // namespace packserve::grammar
