// openai_request.cc: see openai_request.h.
#include "packserve/server/openai_request.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <nlohmann/json.hpp>
#include <set>
#include <utility>

#include "packserve/server/request_json.h"
#include "packserve/server/structured_request.h"
#include "packserve/server/tool_request.h"

namespace packserve::server {
namespace {

using nlohmann::json;

// Fields each endpoint recognises; anything else is 400 (OpenAI answers unknown arguments
// the same way), so a misspelt parameter is never silently ignored.
const std::set<std::string>& known_fields(Endpoint endpoint) {
  // clang-format off
  static const std::set<std::string> kCommon = {
      "model", "max_tokens", "temperature", "top_p", "top_k", "min_p", "seed", "stop", "n", "priority",
      "logprobs", "presence_penalty", "frequency_penalty", "repetition_penalty", "logit_bias",
      "stream", "stream_options", "user", "stop_token_ids", "ignore_eos", "min_tokens",
      "skip_special_tokens", "include_stop_str_in_output", "truncate_prompt_tokens",
      "allowed_token_ids", "bad_words"};
  // clang-format on
  static const std::set<std::string> kCompletions = [] {
    auto s = kCommon;
    s.insert(std::begin(kStructuredFields), std::end(kStructuredFields));
    s.insert({"prompt", "echo", "best_of", "suffix"});
    return s;
  }();
  static const std::set<std::string> kChat = [] {
    auto s = kCommon;
    s.insert(std::begin(kStructuredFields), std::end(kStructuredFields));
    s.insert(std::begin(kToolFields), std::end(kToolFields));
    s.insert({"messages", "max_completion_tokens", "top_logprobs", "chat_template_kwargs",
              "add_generation_prompt", "continue_final_message"});
    return s;
  }();
  return endpoint == Endpoint::kCompletions ? kCompletions : kChat;
}

ApiResult<int64_t> get_int(const json& body, const char* field, int64_t min, int64_t max,
                           const std::string& expected) {
  const json& v = body.at(field);
  if (v.is_number_unsigned()) {
    const uint64_t u = v.get<uint64_t>();
    if (u > static_cast<uint64_t>(max) || (min > 0 && u < static_cast<uint64_t>(min))) {
      return wrong(field, expected, v);
    }
    return static_cast<int64_t>(u);
  }
  if (!v.is_number_integer()) return wrong(field, expected, v);
  const int64_t i = v.get<int64_t>();
  if (i < min || i > max) return wrong(field, expected, v);
  return i;
}

ApiResult<double> get_number(const json& body, const char* field, double min, double max,
                             bool min_exclusive, const std::string& expected) {
  const json& v = body.at(field);
  if (!v.is_number()) return wrong(field, expected, v);
  const double d = v.get<double>();
  if (!std::isfinite(d) || d < min || d > max || (min_exclusive && d == min)) {
    return wrong(field, expected, v);
  }
  return d;
}

// One prompt of `p` (the body's "prompt", or an element of a batch, named `field`): a string
// or a non-empty list of token ids.
std::optional<ApiError> parse_one_prompt(const json& p, const std::string& field,
                                         const char* expected, OpenAiRequest& out) {
  Prompt prompt;
  if (p.is_string()) {
    PS_API_ASSIGN(prompt.text, parse_text_prompt(p, field, expected));
  } else if (p.is_array() && !p.empty() && p[0].is_number()) {
    auto ids = token_id_list(p, field);
    if (!ids.ok()) return ids.error();
    prompt.token_ids = std::move(ids.value());
  } else {
    return wrong(field, expected, p);
  }
  out.prompts.push_back(std::move(prompt));
  return std::nullopt;
}

std::optional<ApiError> parse_prompt(const json& body, OpenAiRequest& out) {
  if (!body.contains("prompt")) return bad_request("prompt: required", "prompt");
  const json& p = body.at("prompt");
  const char* kExpected =
      "a string, a list of token ids, or a list of strings or of token-id lists";
  const bool batch = p.is_array() && !p.empty() && (p[0].is_string() || p[0].is_array());
  if (!batch) return parse_one_prompt(p, "prompt", kExpected, out);
  if (p.size() > static_cast<std::size_t>(kMaxChoices)) {
    return bad_request("prompt: a batch of " + std::to_string(p.size()) + " prompts exceeds the " +
                           std::to_string(kMaxChoices) + " choices a request may ask for",
                       "prompt");
  }
  for (std::size_t i = 0; i < p.size(); ++i) {
    const std::string f = "prompt[" + std::to_string(i) + "]";
    if (p[i].is_string() != p[0].is_string()) {
      return wrong(
          f, p[0].is_string() ? "a string, as prompt[0]" : "a list of token ids, as prompt[0]",
          p[i]);
    }
    PS_API_TRY(parse_one_prompt(p[i], f, "a string or a non-empty list of token ids", out));
  }
  return std::nullopt;
}

// logit_bias: {"token id": bias} with decimal ids < 2^31 and biases in [-100, 100].
std::optional<ApiError> parse_logit_bias(const json& body, OpenAiRequest& out) {
  if (!present(body, "logit_bias")) return std::nullopt;
  const json& v = body.at("logit_bias");
  if (!v.is_object()) return wrong("logit_bias", "an object of token id -> bias", v);
  if (v.size() > engine::kMaxLogitBias) {
    return bad_request("logit_bias: expected at most " + std::to_string(engine::kMaxLogitBias) +
                           " entries, got " + std::to_string(v.size()),
                       "logit_bias");
  }
  for (const auto& [key, bias] : v.items()) {
    int64_t id = -1;
    if (!key.empty() && key.size() <= 10 &&
        std::all_of(key.begin(), key.end(), [](char c) { return c >= '0' && c <= '9'; })) {
      id = std::stoll(key);
    }
    if (id < 0 || id > INT32_MAX) {
      return bad_request(
          "logit_bias: expected token ids as decimal strings, got " + describe(json(key)),
          "logit_bias");
    }
    const std::string field = "logit_bias[" + key + "]";
    if (!bias.is_number() || !std::isfinite(bias.get<double>()) || bias.get<double>() < -100.0 ||
        bias.get<double>() > 100.0) {
      return wrong(field, "a number in [-100, 100]", bias);
    }
    out.logit_bias.emplace_back(static_cast<int32_t>(id), bias.get<double>());
  }
  return std::nullopt;
}

std::optional<ApiError> parse_stop(const json& body, OpenAiRequest& out) {
  if (!present(body, "stop")) return std::nullopt;
  const json& s = body.at("stop");
  const std::string expected = "a non-empty string or a list of at most " +
                               std::to_string(kMaxStopStrings) + " non-empty strings";
  std::vector<json> items;
  if (s.is_string()) {
    items.push_back(s);
  } else if (s.is_array() && s.size() <= static_cast<std::size_t>(kMaxStopStrings)) {
    items.assign(s.begin(), s.end());
  } else {
    return wrong("stop", expected, s);
  }
  for (std::size_t i = 0; i < items.size(); ++i) {
    const std::string f = s.is_string() ? "stop" : "stop[" + std::to_string(i) + "]";
    if (!items[i].is_string() || items[i].get<std::string>().empty()) {
      return wrong(f, "a non-empty string", items[i]);
    }
    if (items[i].get<std::string>().size() > kMaxStopStringBytes) {
      return bad_request(f + ": longer than " + std::to_string(kMaxStopStringBytes) + " bytes", f);
    }
    out.stop.push_back(items[i].get<std::string>());
  }
  return std::nullopt;
}

ApiResult<OpenAiRequest> parse_fields(const json& body, std::string_view raw_body,
                                      Endpoint endpoint) {
  OpenAiRequest out;
  out.endpoint = endpoint;
  PS_API_TRY(check_known_fields(body, known_fields(endpoint)));
  PS_API_ASSIGN(out.model, parse_model(body));

  if (endpoint == Endpoint::kCompletions) {
    PS_API_TRY(parse_prompt(body, out));
  } else {
    PS_API_ASSIGN(out.messages, parse_messages(body));
  }
  const char* max_field = "max_tokens";
  if (endpoint == Endpoint::kChatCompletions && present(body, "max_completion_tokens")) {
    max_field = "max_completion_tokens";
  }
  if (present(body, max_field)) {
    PS_API_ASSIGN(out.max_tokens, get_int(body, max_field, 1, INT32_MAX, "an integer >= 1"));
    out.max_tokens_field = max_field;
  }
  if (present(body, "temperature")) {
    PS_API_ASSIGN(out.temperature,
                  get_number(body, "temperature", 0.0, 1e6, false, "a finite number >= 0"));
  }
  if (present(body, "top_p")) {
    PS_API_ASSIGN(out.top_p, get_number(body, "top_p", 0.0, 1.0, true, "a number in (0, 1]"));
  }
  if (present(body, "top_k")) {
    int64_t k = 0;
    PS_API_ASSIGN(k, get_int(body, "top_k", -1, INT32_MAX, "an integer >= 0 (or -1 for off)"));
    out.top_k = k < 0 ? 0 : static_cast<int32_t>(k);
  }
  if (present(body, "min_p")) {
    PS_API_ASSIGN(out.min_p, get_number(body, "min_p", 0.0, 1.0, false, "a number in [0, 1]"));
  }
  if (present(body, "seed")) {
    int64_t seed = 0;
    PS_API_ASSIGN(seed, get_int(body, "seed", INT64_MIN, INT64_MAX, "an integer"));
    out.seed = static_cast<uint64_t>(seed);
  }
  if (present(body, "priority")) {
    int64_t priority = 0;
    PS_API_ASSIGN(priority, get_int(body, "priority", INT32_MIN, INT32_MAX,
                                    "an integer (lower is scheduled first)"));
    out.priority = static_cast<int32_t>(priority);
  }
  PS_API_TRY(parse_stop(body, out));
  if (present(body, "stop_token_ids")) {
    const json& v = body.at("stop_token_ids");
    if (!v.is_array()) return wrong("stop_token_ids", "a list of token ids", v);
    PS_API_ASSIGN(out.stop_token_ids, token_id_list(v, "stop_token_ids"));
  }
  if (present(body, "allowed_token_ids")) {
    const json& v = body.at("allowed_token_ids");
    if (!v.is_array() || v.empty()) {
      return wrong("allowed_token_ids", "a non-empty list of token ids", v);
    }
    PS_API_ASSIGN(out.allowed_token_ids, token_id_list(v, "allowed_token_ids"));
  }
  if (present(body, "bad_words")) {
    const json& v = body.at("bad_words");
    const std::string expected =
        "a list of at most " + std::to_string(kMaxBadWords) + " words (strings)";
    if (!v.is_array() || v.size() > kMaxBadWords) return wrong("bad_words", expected, v);
    for (std::size_t i = 0; i < v.size(); ++i) {
      const std::string f = "bad_words[" + std::to_string(i) + "]";
      if (!v[i].is_string() || v[i].get_ref<const std::string&>().find_first_not_of(
                                   kBadWordSpace) == std::string::npos) {
        return wrong(f, "a word (a string with text other than whitespace)", v[i]);
      }
      out.bad_words.push_back(v[i].get<std::string>());
    }
  }
  if (present(body, "ignore_eos")) PS_API_ASSIGN(out.ignore_eos, get_bool(body, "ignore_eos"));
  if (present(body, "include_stop_str_in_output")) {
    PS_API_ASSIGN(out.include_stop_str_in_output, get_bool(body, "include_stop_str_in_output"));
  }
  if (present(body, "skip_special_tokens")) {
    PS_API_ASSIGN(out.skip_special_tokens, get_bool(body, "skip_special_tokens"));
  }
  if (present(body, "truncate_prompt_tokens")) {
    int64_t k = 0;
    PS_API_ASSIGN(k, get_int(body, "truncate_prompt_tokens", -1, INT32_MAX,
                             "-1 (the model's context) or an integer >= 1"));
    if (k == 0) {
      return wrong("truncate_prompt_tokens", "-1 (the model's context) or an integer >= 1",
                   body.at("truncate_prompt_tokens"));
    }
    out.truncate_prompt_tokens = k;
  }
  if (present(body, "min_tokens")) {
    int64_t min_tokens = 0;
    PS_API_ASSIGN(min_tokens, get_int(body, "min_tokens", 0, INT32_MAX, "an integer >= 0"));
    out.min_tokens = static_cast<int32_t>(min_tokens);
  }
  if (present(body, "n")) {
    int64_t n = 1;
    PS_API_ASSIGN(n, get_int(body, "n", 1, kMaxChoices,
                             "an integer in [1, " + std::to_string(kMaxChoices) + "]"));
    out.n = static_cast<int32_t>(n);
  }
  if (present(body, "best_of")) {
    int64_t best_of = 0;
    PS_API_ASSIGN(best_of, get_int(body, "best_of", 1, kMaxChoices,
                                   "n (" + std::to_string(out.n) +
                                       "): best_of greater than n is not supported"));
    if (best_of != out.n) {
      return wrong("best_of",
                   "n (" + std::to_string(out.n) + "): best_of greater than n is not supported",
                   body.at("best_of"));
    }
  }
  const std::size_t num_prompts = endpoint == Endpoint::kCompletions ? out.prompts.size() : 1;
  if (num_prompts * static_cast<std::size_t>(out.n) > static_cast<std::size_t>(kMaxChoices)) {
    return bad_request("n: " + std::to_string(num_prompts) + " prompts x n " +
                           std::to_string(out.n) + " = " + std::to_string(num_prompts * out.n) +
                           " choices exceeds the " + std::to_string(kMaxChoices) +
                           " a request may ask for",
                       "n");
  }
  if (present(body, "echo")) PS_API_ASSIGN(out.echo, get_bool(body, "echo"));
  if (present(body, "suffix")) {
    return wrong("suffix", "null (suffix is not supported)", body.at("suffix"));
  }
  for (const auto& [field, value] : {std::pair{"presence_penalty", &out.presence_penalty},
                                     std::pair{"frequency_penalty", &out.frequency_penalty}}) {
    if (present(body, field)) {
      PS_API_ASSIGN(*value, get_number(body, field, -2.0, 2.0, false, "a number in [-2, 2]"));
    }
  }
  if (present(body, "repetition_penalty")) {
    PS_API_ASSIGN(out.repetition_penalty,
                  get_number(body, "repetition_penalty", 0.0, std::numeric_limits<double>::max(),
                             true, "a finite number > 0 (1 = off)"));
  }
  PS_API_TRY(parse_logit_bias(body, out));
  PS_API_TRY(parse_structured_output(body, raw_body, out.structured));
  if (endpoint == Endpoint::kChatCompletions) {
    PS_API_TRY(parse_tool_fields(body, raw_body, out));
    PS_API_TRY(parse_chat_template_kwargs(body, out.chat_options));
    PS_API_TRY(parse_generation_prompt(body, out.add_generation_prompt, out.chat_options));
  }
  if (present(body, "user") && !body.at("user").is_string()) {
    return wrong("user", "a string", body.at("user"));
  }
  const std::string top_expected =
      "an integer in [0, " + std::to_string(engine::kMaxTopLogprobs) + "]";
  if (present(body, "logprobs")) {
    if (endpoint == Endpoint::kCompletions) {
      int64_t k = 0;
      PS_API_ASSIGN(k, get_int(body, "logprobs", 0, engine::kMaxTopLogprobs,
                               top_expected + " (the sampled token's log-probability and that "
                                              "many alternatives)"));
      out.logprobs = true;
      out.top_logprobs = static_cast<int32_t>(k);
    } else {
      PS_API_ASSIGN(out.logprobs, get_bool(body, "logprobs"));
    }
  }
  if (present(body, "top_logprobs")) {
    int64_t k = 0;
    PS_API_ASSIGN(k, get_int(body, "top_logprobs", 0, engine::kMaxTopLogprobs, top_expected));
    if (k > 0 && !out.logprobs) {
      return bad_request("top_logprobs: needs \"logprobs\": true", "top_logprobs");
    }
    out.top_logprobs = static_cast<int32_t>(k);
  }
  if (present(body, "stream")) PS_API_ASSIGN(out.stream, get_bool(body, "stream"));
  if (present(body, "stream_options")) {
    const json& so = body.at("stream_options");
    if (!out.stream) {
      return bad_request("stream_options: only allowed when stream is true", "stream_options");
    }
    if (!so.is_object()) return wrong("stream_options", "an object", so);
    for (const auto& [key, value] : so.items()) {
      const std::string f = "stream_options." + key;
      if (key != "include_usage" && key != "continuous_usage_stats") {
        return bad_request(f + ": not supported (include_usage, continuous_usage_stats)", f);
      }
      if (!value.is_boolean()) return wrong(f, "true or false", value);
      (key == "include_usage" ? out.include_usage : out.continuous_usage) = value.get<bool>();
    }
    out.continuous_usage = out.continuous_usage && out.include_usage;  // as vLLM
  }
  return out;
}

}  // namespace

std::string error_body(const ApiError& error) {
  json inner = {{"message", error.message},
                {"type", error.type},
                {"param", error.param ? json(*error.param) : json(nullptr)},
                {"code", error.code ? json(*error.code) : json(nullptr)}};
  return json{{"error", inner}}.dump(-1, ' ', false, json::error_handler_t::replace);
}

ApiResult<OpenAiRequest> parse_openai_request(std::string_view body, Endpoint endpoint) {
  return parse_json_body<OpenAiRequest>(
      body, [body, endpoint](const json& parsed) { return parse_fields(parsed, body, endpoint); });
}

std::string prompt_field(const OpenAiRequest& request, std::size_t index) {
  if (request.endpoint == Endpoint::kChatCompletions) return "messages";
  return request.prompts.size() > 1 ? "prompt[" + std::to_string(index) + "]" : "prompt";
}

ApiResult<bool> truncate_prompt(const OpenAiRequest& request, int64_t max_model_len,
                                std::vector<int32_t>& ids) {
  if (!request.truncate_prompt_tokens) return false;
  const int64_t k =
      *request.truncate_prompt_tokens == -1 ? max_model_len : *request.truncate_prompt_tokens;
  if (k > max_model_len) {
    return bad_request("truncate_prompt_tokens = " + std::to_string(k) +
                           " exceeds the model's context of " + std::to_string(max_model_len) +
                           " tokens",
                       "truncate_prompt_tokens");
  }
  if (static_cast<int64_t>(ids.size()) <= k) return false;
  ids.erase(ids.begin(), ids.end() - k);
  return true;
}

ApiResult<int32_t> resolve_max_tokens(const OpenAiRequest& request, int64_t num_prompt_tokens,
                                      int64_t max_model_len, std::size_t prompt_index) {
  const std::string prompt_field = server::prompt_field(request, prompt_index);
  if (num_prompt_tokens < 1) return bad_request(prompt_field + ": must not be empty", prompt_field);
  const int64_t room = max_model_len - num_prompt_tokens;
  if (room < 1) {
    return bad_request(prompt_field + ": the prompt is " + std::to_string(num_prompt_tokens) +
                           " tokens, which leaves no room in the model's context of " +
                           std::to_string(max_model_len) + " tokens",
                       prompt_field);
  }
  if (request.max_tokens) {
    if (*request.max_tokens > room) {
      return bad_request(
          request.max_tokens_field + ": " + std::to_string(*request.max_tokens) + " + " +
              std::to_string(num_prompt_tokens) + " prompt tokens exceeds the model's context of " +
              std::to_string(max_model_len) + " tokens (at most " + std::to_string(room) + " here)",
          request.max_tokens_field);
    }
  }
  const int64_t fallback = request.endpoint == Endpoint::kCompletions ? 16 : room;
  const int32_t max_tokens =
      request.max_tokens ? *request.max_tokens
                         : static_cast<int32_t>(std::min<int64_t>({fallback, room, INT32_MAX}));
  if (request.min_tokens > max_tokens) {
    return bad_request("min_tokens: " + std::to_string(request.min_tokens) + " is more than " +
                           request.max_tokens_field + " (" + std::to_string(max_tokens) + ")",
                       "min_tokens");
  }
  return max_tokens;
}

uint64_t choice_seed(uint64_t seed, int choice) {
  if (choice == 0) return seed;
  uint64_t z = seed + static_cast<uint64_t>(choice) * 0x9E3779B97F4A7C15ull;  // splitmix64
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

engine::SamplingParams to_sampling_params(const OpenAiRequest& request, int32_t max_tokens,
                                          int choice) {
  engine::SamplingParams p;
  p.temperature = request.temperature;
  p.top_k = request.top_k;
  p.top_p = request.top_p;
  p.min_p = request.min_p;
  p.presence_penalty = request.presence_penalty;
  p.frequency_penalty = request.frequency_penalty;
  p.repetition_penalty = request.repetition_penalty;
  p.logit_bias = request.logit_bias;
  if (request.seed) p.seed = choice_seed(*request.seed, choice);
  p.max_tokens = max_tokens;
  p.stop = request.stop;
  p.stop_token_ids = request.stop_token_ids;
  p.allowed_token_ids = request.allowed_token_ids;
  p.ignore_eos = request.ignore_eos;
  p.include_stop_str_in_output = request.include_stop_str_in_output;
  p.skip_special_tokens = request.skip_special_tokens;
  p.min_tokens = request.min_tokens;
  p.logprobs = request.logprobs;
  p.top_logprobs = request.top_logprobs;
  if (request.echo && request.logprobs) p.prompt_logprobs = request.top_logprobs;
  p.structured = request.structured;
  return p;
}

}  // namespace packserve::server
