// json_object.cc: Grammar::json_object, the JSON recognizer (json_automaton.h) from its
// object start (one object, nothing after its closing brace), run through the shared
// automaton matcher (automaton_matcher.h).
#include "packserve/grammar/automaton_matcher.h"
#include "packserve/grammar/dfa_grammar.h"
#include "packserve/grammar/json_automaton.h"

namespace packserve::grammar {

using detail::JsonAutomaton;

Result<std::shared_ptr<const Grammar>> Grammar::json_object(std::shared_ptr<const Vocabulary> vocab,
                                                            bool allow_whitespace) {
  PS_RETURN_IF_ERROR(check_vocabulary(vocab));
  return AutomatonGrammar<JsonAutomaton>::create(
      JsonAutomaton(allow_whitespace ? kMaxWhitespaceRun : 0), std::move(vocab));
}

}  // namespace packserve::grammar
