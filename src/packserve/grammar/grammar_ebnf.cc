// grammar_ebnf.cc: Grammar::ebnf, the grammar compiled to a regex (ebnf.h) and matched as one
// (dfa_grammar.h).
#include "packserve/grammar/dfa_grammar.h"
#include "packserve/grammar/ebnf.h"
#include "packserve/grammar/regex.h"

namespace packserve::grammar {

Result<std::shared_ptr<const Grammar>> Grammar::ebnf(std::string_view grammar,
                                                     std::shared_ptr<const Vocabulary> vocab) {
  PS_RETURN_IF_ERROR(check_vocabulary(vocab));
  PS_ASSIGN_OR_RETURN(const std::string pattern, ebnf_to_regex(grammar));
  Result<Dfa> dfa = compile_regex(pattern);
  if (!dfa.ok()) {
    return Status(dfa.status().code(),
                  "grammar: the grammar's matcher does not compile: " + dfa.status().message());
  }
  return make_dfa_grammar(std::move(*dfa), std::move(vocab));
}

}  // namespace packserve::grammar
