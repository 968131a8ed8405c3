// grammar_json_schema.cc: Grammar::json_schema, the schema compiled to a regex
// (json_schema.h) and matched as one (dfa_grammar.h).
#include "packserve/grammar/dfa_grammar.h"
#include "packserve/grammar/json_schema.h"
#include "packserve/grammar/regex.h"

namespace packserve::grammar {

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
  PS_ASSIGN_OR_RETURN(const std::string pattern, json_schema_to_regex(schema_json, options));
  Result<Dfa> dfa = compile_regex(pattern);
  if (!dfa.ok()) {
    // The limits are on the whole schema's automaton (e.g. several long maxLength strings).
    return Status(dfa.status().code(),
                  "json_schema: the schema's matcher does not compile: " + dfa.status().message());
  }
  return make_dfa_grammar(std::move(*dfa), std::move(vocab));
}

}  // namespace packserve::grammar
