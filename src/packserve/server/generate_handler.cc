// generate_handler.cc: see generate_handler.h.
#include "packserve/server/generate_handler.h"

#include <httplib.h>

#include <chrono>
#include <ctime>
#include <mutex>
#include <optional>
#include <utility>
#include <vector>

#include "packserve/common/log.h"
#include "packserve/server/openai_response.h"
#include "packserve/server/sse.h"

namespace packserve::server {
namespace {

using Clock = std::chrono::steady_clock;
constexpr std::chrono::milliseconds kPollInterval{100};

struct Prepared {
  engine::GenerateRequest request;
  ResponseContext ctx;
  bool stream = false;
};

ApiResult<std::vector<int32_t>> tokenize_prompt(EngineApi& engine, const OpenAiRequest& r) {
  if (r.prompt_token_ids) {
    const auto& ids = *r.prompt_token_ids;
    for (std::size_t i = 0; i < ids.size(); ++i) {
      if (ids[i] >= engine.vocab_size()) {
        const std::string f = "prompt[" + std::to_string(i) + "]";
        return bad_request(f + ": token id " + std::to_string(ids[i]) +
                               " is not below the vocabulary size " +
                               std::to_string(engine.vocab_size()),
                           f);
      }
    }
    return ids;
  }
  std::string text;
  std::string field = "prompt";
  if (r.endpoint == Endpoint::kChatCompletions) {
    field = "messages";
    Result<std::string> rendered = engine.render_chat(r.messages);
    if (!rendered.ok()) return bad_request("messages: " + rendered.status().message(), field);
    text = std::move(rendered.value());
  } else {
    text = *r.prompt_text;
  }
  Result<std::vector<int32_t>> ids =
      engine.encode(text, /*add_special_tokens=*/r.endpoint == Endpoint::kCompletions);
  if (!ids.ok()) return bad_request(field + ": " + ids.status().message(), field);
  return std::move(ids.value());
}

ApiResult<Prepared> prepare(EngineApi& engine, const GenerateOptions& options, Endpoint endpoint,
                            std::string_view body) {
  ApiResult<OpenAiRequest> parsed = parse_openai_request(body, endpoint);
  if (!parsed.ok()) return parsed.error();
  const OpenAiRequest& r = parsed.value();
  if (r.model != options.served_model_name) {
    return ApiError{404, "not_found_error",
                    "model: \"" + r.model + "\" is not served here; this server serves \"" +
                        options.served_model_name + "\"",
                    "model", "model_not_found"};
  }
  for (std::size_t i = 0; i < r.stop_token_ids.size(); ++i) {
    if (r.stop_token_ids[i] >= engine.vocab_size()) {
      const std::string f = "stop_token_ids[" + std::to_string(i) + "]";
      return bad_request(
          f + ": not below the vocabulary size " + std::to_string(engine.vocab_size()), f);
    }
  }
  ApiResult<std::vector<int32_t>> ids = tokenize_prompt(engine, r);
  if (!ids.ok()) return ids.error();
  ApiResult<int32_t> max_tokens =
      resolve_max_tokens(r, static_cast<int64_t>(ids.value().size()), engine.max_model_len());
  if (!max_tokens.ok()) return max_tokens.error();
  Prepared p;
  p.request.prompt_token_ids = std::move(ids.value());
  p.request.sampling = to_sampling_params(r, max_tokens.value());
  p.ctx.endpoint = endpoint;
  p.ctx.created_s = static_cast<int64_t>(std::time(nullptr));
  p.ctx.model = options.served_model_name;
  p.ctx.logprobs = r.logprobs;
  p.ctx.include_usage = r.include_usage;
  p.stream = r.stream;
  return p;
}

std::vector<TokenLogprob> logprobs_of(EngineApi& engine, const engine::RequestOutput& out,
                                      bool wanted) {
  std::vector<TokenLogprob> result;
  if (!wanted) return result;
  for (const engine::TokenOutput& t : out.tokens) {
    result.push_back(TokenLogprob{engine.token_text(t.token_id), t.logprob.value_or(0.0f)});
  }
  return result;
}

Usage usage_of(const engine::RequestOutput& out) {
  return Usage{out.num_prompt_tokens, out.num_output_tokens, out.num_cached_prompt_tokens};
}

ApiError generation_failed(const engine::RequestOutput& out) {
  return ApiError{500, "server_error", "generation failed: " + out.error, std::nullopt,
                  std::string("generation_failed")};
}

// State shared by one streaming response's provider calls and its releaser.
struct StreamState {
  std::shared_ptr<EngineApi> engine;
  std::shared_ptr<OutputStream> stream;
  ResponseContext ctx;
  int64_t heartbeat_ms = 2000;
  const std::atomic<bool>* stopping = nullptr;
  bool first = true;
  bool finished = false;  // the engine's finished update was seen
  Clock::time_point last_write = Clock::now();
};

bool write(httplib::DataSink& sink, StreamState& s, const std::string& bytes) {
  s.last_write = Clock::now();
  return sink.write(bytes.data(), bytes.size());
}

// One provider call: waits briefly for the engine, writes what came. false = stop streaming.
bool pump(StreamState& s, httplib::DataSink& sink) {
  if (s.finished) return false;
  std::optional<engine::RequestOutput> out = s.stream->next(kPollInterval);
  if (!out) {
    if (s.stopping && s.stopping->load()) return false;
    const auto idle =
        std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - s.last_write);
    if (idle.count() >= s.heartbeat_ms) return write(sink, s, sse_comment("keep-alive"));
    return true;
  }
  const auto lp = logprobs_of(*s.engine, *out, s.ctx.logprobs);
  if (!out->text_delta.empty() || !lp.empty() || (s.first && !out->finished)) {
    if (!write(sink, s,
               sse_data(stream_chunk(s.ctx, out->text_delta, std::nullopt, lp, s.first)))) {
      return false;
    }
    s.first = false;
  }
  if (!out->finished) return true;
  s.finished = true;
  if (out->finish_reason == "error") {
    if (!write(sink, s, sse_data(error_body(generation_failed(*out))))) return false;
  } else {
    if (!write(sink, s, sse_data(stream_chunk(s.ctx, "", out->finish_reason, {}, s.first)))) {
      return false;
    }
    if (s.ctx.include_usage && !write(sink, s, sse_data(usage_chunk(s.ctx, usage_of(*out))))) {
      return false;
    }
  }
  if (!write(sink, s, std::string(kSseDone))) return false;
  sink.done();
  return true;
}

void respond_streaming(const std::shared_ptr<EngineApi>& engine, const GenerateOptions& options,
                       std::shared_ptr<OutputStream> stream, const ResponseContext& ctx,
                       httplib::Response& res) {
  auto state = std::make_shared<StreamState>();
  state->engine = engine;
  state->stream = std::move(stream);
  state->ctx = ctx;
  state->heartbeat_ms = options.heartbeat_ms;
  state->stopping = options.stopping;
  OpenStreams* open_streams = options.open_streams;
  if (open_streams) open_streams->opened();
  res.set_header("Cache-Control", "no-cache");
  res.set_header("X-Accel-Buffering", "no");
  res.set_chunked_content_provider(
      "text/event-stream",
      [state](size_t /*offset*/, httplib::DataSink& sink) {
        try {
          return pump(*state, sink);
        } catch (const std::exception& e) {
          PS_LOG_ERROR("server", "req={} stream failed: {}", state->stream->id(), e.what());
          return false;
        }
      },
      [state, open_streams](bool /*success*/) {
        if (!state->finished) {
          PS_LOG_INFO("server", "req={} client gone or stream abandoned: cancelling",
                      state->stream->id());
          state->engine->cancel(state->stream->id());
        }
        if (open_streams) open_streams->closed();
      });
}

void respond_whole(EngineApi& engine, const GenerateOptions& options, OutputStream& stream,
                   const ResponseContext& ctx, httplib::Response& res) {
  std::string text;
  std::vector<TokenLogprob> logprobs;
  for (;;) {
    std::optional<engine::RequestOutput> out = stream.next(kPollInterval);
    if (!out) {
      if (options.stopping && options.stopping->load()) {
        engine.cancel(stream.id());
        set_error(res, ApiError{503, "service_unavailable_error", "the server is shutting down",
                                std::nullopt, std::string("shutting_down")});
        return;
      }
      continue;
    }
    text += out->text_delta;
    for (auto& t : logprobs_of(engine, *out, ctx.logprobs)) logprobs.push_back(std::move(t));
    if (!out->finished) continue;
    if (out->finish_reason == "error") {
      set_error(res, generation_failed(*out));
      return;
    }
    res.status = 200;
    res.set_content(completion_body(ctx, text, out->finish_reason, usage_of(*out), logprobs),
                    "application/json");
    return;
  }
}

}  // namespace

void OpenStreams::opened() {
  std::lock_guard<std::mutex> lock(mutex_);
  ++open_;
}

void OpenStreams::closed() {
  std::lock_guard<std::mutex> lock(mutex_);
  if (--open_ == 0) cv_.notify_all();
}

bool OpenStreams::wait_all_closed(std::chrono::milliseconds timeout) {
  std::unique_lock<std::mutex> lock(mutex_);
  return cv_.wait_for(lock, timeout, [&] { return open_ == 0; });
}

void set_error(httplib::Response& res, const ApiError& error) {
  res.status = error.status;
  res.set_content(error_body(error), "application/json");
}

ApiError engine_error(const Status& status) {
  switch (status.code()) {
    case StatusCode::kInvalidArgument: {
      std::optional<std::string> param;
      const std::string& m = status.message();
      if (auto colon = m.find(':');
          colon != std::string::npos && colon < 40 && m.find(' ') > colon) {
        param = m.substr(0, colon);
      }
      return bad_request(m, param);
    }
    case StatusCode::kResourceExhausted:
      return ApiError{429, "rate_limit_error", "the waiting queue is full: " + status.message(),
                      std::nullopt, std::string("queue_full")};
    case StatusCode::kFailedPrecondition:
      return ApiError{503, "service_unavailable_error",
                      "the engine is not accepting requests: " + status.message(), std::nullopt,
                      std::string("draining")};
    default:
      return ApiError{500, "server_error", status.to_string(), std::nullopt, std::nullopt};
  }
}

void handle_generate(const std::shared_ptr<EngineApi>& engine, const GenerateOptions& options,
                     Endpoint endpoint, const httplib::Request& req, httplib::Response& res) {
  ApiResult<Prepared> prepared = prepare(*engine, options, endpoint, req.body);
  if (!prepared.ok()) {
    set_error(res, prepared.error());
    return;
  }
  Prepared& p = prepared.value();
  const int32_t num_prompt_tokens = static_cast<int32_t>(p.request.prompt_token_ids.size());
  Result<std::shared_ptr<OutputStream>> submitted = engine->submit(std::move(p.request));
  if (!submitted.ok()) {
    PS_LOG_INFO("server", "submit refused: {}", submitted.status().to_string());
    set_error(res, engine_error(submitted.status()));
    return;
  }
  std::shared_ptr<OutputStream> out = std::move(submitted.value());
  p.ctx.id = std::string(endpoint == Endpoint::kCompletions ? "cmpl-" : "chatcmpl-") +
             std::to_string(out->id());
  PS_LOG_DEBUG("server", "req={} submitted prompt_tokens={}", out->id(), num_prompt_tokens);
  if (p.stream) {
    respond_streaming(engine, options, std::move(out), p.ctx, res);
  } else {
    respond_whole(*engine, options, *out, p.ctx, res);
  }
}

}  // namespace packserve::server
