// tool_request.h: reads chat's tool fields into an OpenAiRequest (docs/server.md "Tool calls"):
//   tools: a list of {"type": "function", "function": {"name", "description", "parameters",
//          "strict"}}; names are 1-64 of [a-zA-Z0-9_-] and distinct; each tool is kept as the
//          JSON text the body wrote (key order kept) for the chat template;
//   tool_choice: "none" | "auto" | "required" | {"type": "function", "function": {"name"}};
//          default "auto" with tools, "none" without; "required" and a named function need
//          tools and fill OpenAiRequest::structured with the constraint that makes the output
//          the calls (so they cannot be combined with another structured output);
//   parallel_tool_calls: true (default) or false (at most one call).
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

namespace packserve::server {

// The body fields read here (for chat's known fields).
inline constexpr const char* kToolFields[] = {"tools", "tool_choice", "parallel_tool_calls"};

// Tools per request (OpenAI's limit).
inline constexpr std::size_t kMaxTools = 128;

// body["tools"] (present) into `out`, each tool checked and kept as the body wrote it.
std::optional<ApiError> parse_tools(const nlohmann::json& body, std::string_view raw_body,
                                    std::vector<Tool>& out);

// Fills out.tools, out.tool_choice, out.tool_choice_index, out.parallel_tool_calls and, for
// a required or named choice, out.structured. Precondition: out.structured was parsed.
std::optional<ApiError> parse_tool_fields(const nlohmann::json& body, std::string_view raw_body,
                                          OpenAiRequest& out);

// The JSON schema of tool_choice "required"'s output for `tools`: a list of at least one (and
// with `parallel` false at most one) {"name": <a tool's name>, "parameters": <its
// parameters>} objects.
std::string required_calls_schema(const std::vector<Tool>& tools, bool parallel);

// The JSON schema of a call's arguments: its parameters, or any object when it has none.
std::string arguments_schema(const Tool& tool);

}  // namespace packserve::server
