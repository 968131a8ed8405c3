// tool_request.h: reads chat's tool fields into an OpenAiRequest (docs/server.md "Tool calls"):
//   tools: a list of {"type": "function", "function": {"name", "description", "parameters",
//          "strict"}}; names are 1-64 of [a-zA-Z0-9_-] and distinct; each tool is kept as the
//          JSON text the body wrote (key order kept) for the chat template;
//   tool_choice: "none" | "auto" | "required" | {"type": "function", "function": {"name"}};
//          default "auto" with tools, "none" without; "required" and a named function need
//          tools and constrain the output to the calls (so they cannot be combined with
//          another structured output): a named function's in OpenAiRequest::structured at
//          parse time, "required"'s once the model's call syntax is known
//          (required_calls_constraint);
//   parallel_tool_calls: true (default) or false (required's constraint allows one call; under
//          auto every call the model writes is returned);
//   strict tools under "auto" constrain the calls the model opens (auto_calls_constraint).
// Errors are HTTP 400 naming the field (`tools[1].function.name: ...`).
// Internal to the server library (nlohmann::json). Thread-safety: pure functions.
#pragma once

#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "packserve/server/api_error.h"
#include "packserve/server/openai_request.h"
#include "packserve/server/tool_calls.h"

namespace packserve::server {

// The body fields read here (for chat's known fields).
inline constexpr const char* kToolFields[] = {"tools", "tool_choice", "parallel_tool_calls"};

// Tools per request (OpenAI's limit).
inline constexpr std::size_t kMaxTools = 128;

// body["tools"] (present) into `out`, each tool checked and kept as the body wrote it.
std::optional<ApiError> parse_tools(const nlohmann::json& body, std::string_view raw_body,
                                    std::vector<Tool>& out);

// Fills out.tools, out.tool_choice, out.tool_choice_index, out.parallel_tool_calls and, for a
// named choice, out.structured. Precondition: out.structured was parsed.
std::optional<ApiError> parse_tool_fields(const nlohmann::json& body, std::string_view raw_body,
                                          OpenAiRequest& out);

// tool_choice "required"'s constraint: the output is calls of `tools` in the model's own
// syntax, so that the model writes what it was trained to and the calls are read (and
// streamed) as under "auto":
//   kHermes:     one or more (with `parallel` false: one) blocks
//                `<tool_call>\n{"name": <a tool>, "arguments": <its arguments>}\n</tool_call>`,
//                each followed by an optional newline;
//   kLlama3Json: one `{"name": <a tool>, "parameters": <its arguments>}` (Llama 3's template
//                takes one call per turn);
//   kMistral:    the list after Mistral's [TOOL_CALLS] control token (which no constraint can
//                allow: the grammar never allows special tokens), an optional space then
//                `[{"name": <a tool>, "arguments": <its arguments>}, ...]` (with `parallel`
//                false one call). Its calls repeat in the regex: the automaton is about twice
//                a Hermes one's.
// Each call is the JSON schema of its tool's arguments (arguments_schema) beside a "name"
// const, a tool appearing once in the regex: a JSON list would repeat every tool's schema
// (its first item and the others), doubling the automaton. The schemas' free-form values
// (a tool without parameters takes any object) are holes, matched by the JSON recognizer
// (`spec`), with the same regex spelt out beside it (`spelt_out`;
// grammar::Grammar::regex_with_json_values). A regex that does not compile is a 400 naming
// `tools`.
ApiResult<engine::StructuredOutput> required_calls_constraint(const std::vector<Tool>& tools,
                                                              bool parallel, ToolCallFormat format);

// tool_choice "auto" with strict tools (function.strict true), as OpenAI's strict function
// calling: a structural tag (grammar::Grammar::structural_tag) that leaves the text free until
// the model opens a call, and then holds it to a call of a tool, a strict tool's arguments
// following its schema and any other tool's any object:
//   kHermes:     opened by `<tool_call>`, the block
//                `<tool_call>\n{"name": <a tool>, "arguments": <its arguments>}\n</tool_call>`;
//   kLlama3Json: opened by `{"name":` (xgrammar's trigger for it), the object
//                `{"name": <a tool>, "parameters": <its arguments>}`.
// With `parallel` false the output ends after the first call (the tag's stop_after_first).
// nullopt when no tool is strict, or for Mistral, whose [TOOL_CALLS] is a control token no
// constraint can see: the calls are then read unconstrained. A schema that does not compile is
// a 400 naming `tools` (when the engine compiles the tag).
std::optional<engine::StructuredOutput> auto_calls_constraint(const std::vector<Tool>& tools,
                                                              bool parallel, ToolCallFormat format);

// The JSON schema of a call's arguments: its parameters, or any object when it has none.
std::string arguments_schema(const Tool& tool);

}  // namespace packserve::server
