// http_client.cc: see http_client.h.
#include "packserve/benchclient/http_client.h"

#include <httplib.h>

#include <charconv>
#include <nlohmann/json.hpp>

namespace packserve::benchclient {
namespace {

using nlohmann::json;

double ms_since(std::chrono::steady_clock::time_point origin) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - origin)
      .count();
}

std::string short_error_text(const std::string& body) {
  // OpenAI error object: {"error": {"message": ..., "type": ...}}.
  try {
    const json j = json::parse(body);
    if (j.is_object() && j.contains("error") && j["error"].is_object() &&
        j["error"].contains("message") && j["error"]["message"].is_string()) {
      return j["error"]["message"].get<std::string>();
    }
  } catch (const json::exception&) {
  }
  return body.substr(0, 200);
}

}  // namespace

Result<Endpoint> parse_url(std::string_view url) {
  constexpr std::string_view kScheme = "http://";
  if (url.substr(0, 8) == "https://") {
    return invalid_argument("--url: https is not supported, got '" + std::string(url) + "'");
  }
  if (url.substr(0, kScheme.size()) != kScheme) {
    return invalid_argument("--url: expected http://HOST[:PORT][/PREFIX], got '" +
                            std::string(url) + "'");
  }
  std::string_view rest = url.substr(kScheme.size());
  Endpoint e;
  const size_t slash = rest.find('/');
  std::string_view authority = rest.substr(0, slash);
  if (slash != std::string_view::npos) {
    std::string_view prefix = rest.substr(slash);
    while (!prefix.empty() && prefix.back() == '/') prefix.remove_suffix(1);
    e.base_path = std::string(prefix);
  }
  const size_t colon = authority.rfind(':');
  if (colon != std::string_view::npos && authority.find(']') == std::string_view::npos) {
    const std::string_view port = authority.substr(colon + 1);
    int value = 0;
    auto [ptr, ec] = std::from_chars(port.data(), port.data() + port.size(), value);
    if (ec != std::errc() || ptr != port.data() + port.size() || value < 1 || value > 65535) {
      return invalid_argument("--url: port: expected an integer in [1, 65535], got '" +
                              std::string(port) + "'");
    }
    e.port = value;
    authority = authority.substr(0, colon);
  }
  if (authority.empty()) {
    return invalid_argument("--url: expected a host after http://, got '" + std::string(url) + "'");
  }
  e.host = std::string(authority);
  return e;
}

std::string completion_body(const CompletionRequest& request) {
  json body = {{"model", request.model},
               {"prompt", request.prompt},
               {"max_tokens", request.max_tokens},
               {"stream", true},
               {"stream_options", {{"include_usage", true}}}};
  if (request.ignore_eos) body["ignore_eos"] = true;
  const RequestSampling& s = request.sampling;
  if (s.temperature) body["temperature"] = *s.temperature;
  if (s.top_k) body["top_k"] = *s.top_k;
  if (s.top_p) body["top_p"] = *s.top_p;
  if (s.presence_penalty) body["presence_penalty"] = *s.presence_penalty;
  if (s.frequency_penalty) body["frequency_penalty"] = *s.frequency_penalty;
  if (s.logprobs) body["logprobs"] = 0;
  return body.dump();
}

bool CompletionStreamReader::feed(std::string_view bytes, double now_ms) {
  for (const SseEvent& e : parser_.feed(bytes)) {
    if (!handle_event(e, now_ms)) return false;
  }
  return true;
}

bool CompletionStreamReader::handle_event(const SseEvent& event, double now_ms) {
  if (event.data == "[DONE]") {
    done_ = true;
    return true;
  }
  json j;
  try {
    j = json::parse(event.data);
  } catch (const json::exception&) {
    stream_error_ = "stream: an event is not JSON: " + event.data.substr(0, 80);
    return false;
  }
  if (!j.is_object()) {
    stream_error_ = "stream: an event is not a JSON object";
    return false;
  }
  if (j.contains("error")) {
    stream_error_ = "server error in stream: " + short_error_text(event.data);
    return false;
  }
  if (j.contains("usage") && j["usage"].is_object()) {
    const json& u = j["usage"];
    if (u.contains("completion_tokens") && u["completion_tokens"].is_number_integer()) {
      usage_completion_tokens_ = u["completion_tokens"].get<int32_t>();
    }
    if (u.contains("prompt_tokens") && u["prompt_tokens"].is_number_integer()) {
      record_.server_prompt_tokens = u["prompt_tokens"].get<int32_t>();
    }
  }
  if (j.contains("choices") && j["choices"].is_array() && !j["choices"].empty()) {
    const json& c = j["choices"][0];
    const bool has_text = c.contains("text") && c["text"].is_string();
    const bool has_reason = c.contains("finish_reason") && c["finish_reason"].is_string();
    if (has_reason) record_.finish_reason = c["finish_reason"].get<std::string>();
    // A chunk that only closes the stream (empty text with a finish_reason) carries no token.
    if (has_text && !(has_reason && c["text"].get_ref<const std::string&>().empty())) {
      record_.chunk_ms.push_back(now_ms);
      ++num_chunks_;
    }
  }
  return true;
}

void CompletionStreamReader::finish(double now_ms, int http_status,
                                    const std::string& transport_error) {
  record_.end_ms = now_ms;
  record_.output_tokens = usage_completion_tokens_.value_or(num_chunks_);
  record_.success = false;
  if (http_status != 200 && http_status > 0) {
    record_.error = "http " + std::to_string(http_status);
  } else if (!stream_error_.empty()) {
    record_.error = stream_error_;
  } else if (!transport_error.empty()) {
    record_.error = transport_error;
  } else if (!done_) {
    record_.error = "stream ended without [DONE]";
  } else if (record_.finish_reason == "error" || record_.finish_reason == "kv_exhausted" ||
             record_.finish_reason == "cancelled") {
    record_.error = "finish_reason " + record_.finish_reason;
  } else if (record_.output_tokens < 1 || record_.chunk_ms.empty()) {
    record_.error = "no output tokens";
  } else {
    record_.success = true;
  }
}

void stream_completion(const Endpoint& endpoint, const CompletionRequest& request,
                       std::chrono::steady_clock::time_point origin,
                       std::chrono::seconds read_timeout, RequestRecord& record) {
  record.expected_output_tokens = request.max_tokens;
  httplib::Client client(endpoint.host, endpoint.port);
  client.set_connection_timeout(std::chrono::seconds(10));
  client.set_read_timeout(read_timeout);
  client.set_keep_alive(false);
  CompletionStreamReader reader(record);
  int status = 0;
  std::string error_body;
  httplib::Request req;
  req.method = "POST";
  req.path = endpoint.base_path + "/v1/completions";
  req.body = completion_body(request);
  req.set_header("Content-Type", "application/json");
  req.set_header("Accept", "text/event-stream");
  req.response_handler = [&](const httplib::Response& response) {
    status = response.status;
    return true;
  };
  req.content_receiver = [&](const char* data, size_t n, uint64_t, uint64_t) {
    if (status != 200) {
      error_body.append(data, n);
      return error_body.size() < (1u << 16);
    }
    return reader.feed(std::string_view(data, n), ms_since(origin));
  };
  httplib::Response response;
  httplib::Error error = httplib::Error::Success;
  record.send_ms = ms_since(origin);
  const bool ok = client.send(req, response, error);
  std::string transport;
  if (!ok && error != httplib::Error::Canceled)
    transport = "transport: " + httplib::to_string(error);
  reader.finish(ms_since(origin), status, transport);
  if (status != 200 && status > 0 && !error_body.empty()) {
    record.error += ": " + short_error_text(error_body);
  }
}

Result<HttpResponse> http_get(const Endpoint& endpoint, const std::string& path,
                              std::chrono::milliseconds timeout) {
  httplib::Client client(endpoint.host, endpoint.port);
  client.set_connection_timeout(timeout);
  client.set_read_timeout(timeout);
  auto res = client.Get(endpoint.base_path + path);
  if (!res) {
    return internal_error("GET http://" + endpoint.host + ":" + std::to_string(endpoint.port) +
                          endpoint.base_path + path + ": " + httplib::to_string(res.error()));
  }
  return HttpResponse{res->status, res->body};
}

std::optional<double> prometheus_value(std::string_view text,
                                       const std::vector<std::string>& names) {
  for (const std::string& name : names) {
    std::optional<double> sum;
    size_t pos = 0;
    while (pos < text.size()) {
      size_t eol = text.find('\n', pos);
      if (eol == std::string_view::npos) eol = text.size();
      std::string_view line = text.substr(pos, eol - pos);
      pos = eol + 1;
      if (line.empty() || line[0] == '#') continue;
      if (line.substr(0, name.size()) != name) continue;
      std::string_view rest = line.substr(name.size());
      if (!rest.empty() && rest[0] == '{') {
        const size_t close = rest.find('}');
        if (close == std::string_view::npos) continue;
        rest = rest.substr(close + 1);
      }
      if (rest.empty() || rest[0] != ' ') continue;  // a longer name with this prefix
      while (!rest.empty() && rest[0] == ' ') rest.remove_prefix(1);
      const size_t end = rest.find(' ');
      const std::string value(rest.substr(0, end));
      char* parsed_end = nullptr;
      const double v = std::strtod(value.c_str(), &parsed_end);
      if (parsed_end == value.c_str()) continue;
      sum = sum.value_or(0.0) + v;
    }
    if (sum) return sum;
  }
  return std::nullopt;
}

}  // namespace packserve::benchclient
