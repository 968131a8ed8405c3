// dfa_grammar.h: a Grammar over a compiled regex DFA (regex.h), behind Grammar::regex,
// Grammar::choice and Grammar::json_schema. Masks are cached per DFA state. Internal to the
// grammar library.
// Thread-safety: as grammar.h.
#pragma once

#include <memory>

#include "packserve/grammar/grammar.h"
#include "packserve/grammar/regex.h"

namespace packserve::grammar {

// `dfa` must come from compile_regex / compile_choice; `vocab` must not be null.
std::shared_ptr<const Grammar> make_dfa_grammar(Dfa dfa, std::shared_ptr<const Vocabulary> vocab);

// kInvalidArgument "vocab: must not be null" for a null vocabulary, else ok.
Status check_vocabulary(const std::shared_ptr<const Vocabulary>& vocab);

}  // namespace packserve::grammar
