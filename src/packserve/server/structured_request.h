// structured_request.h: reads a generation request's structured-output fields into
// engine::StructuredOutput (docs/server.md "Structured outputs"):
//   - OpenAI's response_format: {"type": "text" | "json_object" | "json_schema",
//     "json_schema": {"name", "schema", "strict", "description"}};
//   - vLLM's structured_outputs: {"json" | "regex" | "choice" | "grammar" | "structural_tag" |
//     "json_object": ..., "whitespace_pattern", "disable_any_whitespace", ...};
//   - vLLM's older guided_json / guided_regex / guided_choice / guided_grammar (and
//     guided_decoding_backend, accepted and ignored: there is one backend).
// A grammar is GBNF / EBNF text (grammar/ebnf.h).
// At most one of them may constrain a request. A schema given as a JSON object keeps the key
// order of the body (properties are generated in the order written), so it is read again from
// the raw body with an order-keeping parser. Unsupported forms (xgrammar's newer structural
// tag "format") are 400 naming the field, never ignored.
// Internal to the server library (nlohmann::json). Thread-safety: pure functions.
#pragma once

#include <nlohmann/json.hpp>
#include <optional>
#include <string_view>

#include "packserve/engine/engine.h"
#include "packserve/server/api_error.h"

namespace packserve::server {

// The body fields read here (for the endpoints' known fields).
inline constexpr const char* kStructuredFields[] = {"response_format",
                                                    "structured_outputs",
                                                    "guided_json",
                                                    "guided_regex",
                                                    "guided_choice",
                                                    "guided_grammar",
                                                    "guided_decoding_backend",
                                                    "guided_whitespace_pattern"};

// Fills `out` from `body` (parsed from `raw_body`); out.kind stays kNone when no field
// constrains the request.
std::optional<ApiError> parse_structured_output(const nlohmann::json& body,
                                                std::string_view raw_body,
                                                engine::StructuredOutput& out);

}  // namespace packserve::server
