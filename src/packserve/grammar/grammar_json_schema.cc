// grammar_json_schema.cc: Grammar::json_schema. The schema is compiled to a regex
// (json_schema.h) whose free-form values are each the one byte kFreeFormHole; its DFA runs
// the schema's structure and, where a hole may come, the JSON recognizer (json_automaton.h)
// runs the value (the two together: schema_automaton.h), so free-form values nest up to
// kMaxJsonDepth containers and cost the DFA one transition each. Where the hole is ambiguous (a DFA
// state that both may start a free-form value and has a transition of its own on a byte that starts
// a JSON value, as under anyOf [{"type": "string"}, {}]), and under a whitespace pattern of the
// request's (the recognizer knows runs of JSON whitespace only), the schema is compiled again with
// every free-form value spelt out kMaxFreeFormDepth levels deep and matched as a plain regex
// (dfa_grammar.h).
#include <optional>
#include <vector>

#include "packserve/grammar/automaton_matcher.h"
#include "packserve/grammar/dfa_grammar.h"
#include "packserve/grammar/json_schema.h"
#include "packserve/grammar/regex.h"
#include "packserve/grammar/schema_automaton.h"

namespace packserve::grammar {
namespace {

using detail::SchemaAutomaton;

bool has_hole(const Dfa& dfa) {
  for (int32_t s = 0; s < dfa.num_states; ++s) {
    if (dfa.next(s, kFreeFormHole) != Dfa::kDeadState) return true;
  }
  return false;
}

// The grammar of `holes` (a DFA whose kFreeFormHole transitions are free-form values): the
// DFA and the recognizer, or, where a hole is ambiguous, the DFA `spelt_out` returns.
template <typename SpeltOut>
Result<std::shared_ptr<const Grammar>> with_json_values(Dfa holes, const SpeltOut& spelt_out,
                                                        std::shared_ptr<const Vocabulary> vocab,
                                                        bool allow_whitespace) {
  if (!has_hole(holes)) return make_dfa_grammar(std::move(holes), std::move(vocab));
  if (std::optional<SchemaAutomaton> automaton =
          SchemaAutomaton::create(std::move(holes), allow_whitespace ? kMaxWhitespaceRun : 0)) {
    return AutomatonGrammar<SchemaAutomaton>::create(std::move(*automaton), std::move(vocab));
  }
  PS_ASSIGN_OR_RETURN(Dfa dfa, spelt_out());
  return make_dfa_grammar(std::move(dfa), std::move(vocab));
}

Result<Dfa> compile_schema_regex(std::string_view schema_json, const JsonSchemaOptions& options) {
  PS_ASSIGN_OR_RETURN(const std::string pattern, json_schema_to_regex(schema_json, options));
  Result<Dfa> dfa = compile_regex(pattern);
  if (!dfa.ok()) {
    // The limits are on the whole schema's automaton (e.g. several long maxLength strings).
    return Status(dfa.status().code(),
                  "json_schema: the schema's matcher does not compile: " + dfa.status().message());
  }
  return dfa;
}

}  // namespace

Result<std::shared_ptr<const Grammar>> Grammar::json_schema(std::string_view schema_json,
                                                            std::shared_ptr<const Vocabulary> vocab,
                                                            std::optional<std::string> whitespace) {
  PS_RETURN_IF_ERROR(check_vocabulary(vocab));
  JsonSchemaOptions options;
  if (whitespace) {
    if (Result<Dfa> alone = compile_regex(*whitespace); !alone.ok()) {
      return Status(alone.status().code(), "whitespace: " + alone.status().message());
    }
    options.whitespace = std::move(*whitespace);
  }
  if (options.whitespace != kJsonWs && !options.whitespace.empty()) {
    PS_ASSIGN_OR_RETURN(Dfa dfa, compile_schema_regex(schema_json, options));
    return make_dfa_grammar(std::move(dfa), std::move(vocab));
  }
  JsonSchemaOptions holes = options;
  holes.free_form_holes = true;
  PS_ASSIGN_OR_RETURN(Dfa dfa, compile_schema_regex(schema_json, holes));
  return with_json_values(
      std::move(dfa), [&] { return compile_schema_regex(schema_json, options); }, std::move(vocab),
      !options.whitespace.empty());
}

Result<std::shared_ptr<const Grammar>> Grammar::regex_with_json_values(
    std::string_view pattern, std::string_view spelt_out, std::shared_ptr<const Vocabulary> vocab,
    bool allow_whitespace) {
  PS_RETURN_IF_ERROR(check_vocabulary(vocab));
  PS_ASSIGN_OR_RETURN(Dfa dfa, compile_regex(pattern));
  return with_json_values(
      std::move(dfa), [&] { return compile_regex(spelt_out); }, std::move(vocab), allow_whitespace);
}

}  // namespace packserve::grammar
