// dfa_grammar.cc: see dfa_grammar.h; Grammar::regex and Grammar::choice.
#include "packserve/grammar/dfa_grammar.h"

#include "packserve/grammar/automaton_matcher.h"

namespace packserve::grammar {
namespace {

class DfaAutomaton {
 public:
  using State = int32_t;  // a DFA state id, never Dfa::kDeadState

  explicit DfaAutomaton(Dfa dfa) : dfa_(std::move(dfa)) {}

  State start() const { return dfa_.start_state; }
  bool step(State from, uint8_t byte, State* to) const {
    *to = dfa_.next(from, byte);
    return *to != Dfa::kDeadState;
  }
  bool accepting(State s) const { return dfa_.accepting[static_cast<std::size_t>(s)] != 0; }
  bool finished(State s) const {
    return accepting(s) && dfa_.has_live_edge[static_cast<std::size_t>(s)] == 0;
  }
  MaskKey key(State s) const { return MaskKey{0, static_cast<uint64_t>(s)}; }

 private:
  Dfa dfa_;
};

}  // namespace

Status check_vocabulary(const std::shared_ptr<const Vocabulary>& vocab) {
  if (vocab == nullptr) return invalid_argument("vocab: must not be null");
  return ok_status();
}

std::shared_ptr<const Grammar> make_dfa_grammar(Dfa dfa, std::shared_ptr<const Vocabulary> vocab) {
  return AutomatonGrammar<DfaAutomaton>::create(DfaAutomaton(std::move(dfa)), std::move(vocab));
}

Result<std::shared_ptr<const Grammar>> Grammar::regex(std::string_view pattern,
                                                      std::shared_ptr<const Vocabulary> vocab) {
  PS_RETURN_IF_ERROR(check_vocabulary(vocab));
  PS_ASSIGN_OR_RETURN(Dfa dfa, compile_regex(pattern));
  return make_dfa_grammar(std::move(dfa), std::move(vocab));
}

Result<std::shared_ptr<const Grammar>> Grammar::choice(std::span<const std::string> choices,
                                                       std::shared_ptr<const Vocabulary> vocab) {
  PS_RETURN_IF_ERROR(check_vocabulary(vocab));
  PS_ASSIGN_OR_RETURN(Dfa dfa, compile_choice(choices));
  return make_dfa_grammar(std::move(dfa), std::move(vocab));
}

}  // namespace packserve::grammar
