// generate_handler.cc: see generate_handler.h.
#include "packserve/server/generate_handler.h"

#include <httplib.h>

#include <algorithm>
#include <chrono>
#include <ctime>
#include <mutex>
#include <optional>
#include <utility>
#include <vector>

#include "packserve/common/log.h"
#include "packserve/server/choice_output.h"
#include "packserve/server/openai_response.h"
#include "packserve/server/prompt_tokens.h"
#include "packserve/server/sse.h"
#include "packserve/server/tool_request.h"

namespace packserve::server {
namespace {

using Clock = std::chrono::steady_clock;
constexpr std::chrono::milliseconds kPollInterval{100};

// What echo puts before a choice's completion (OpenAiRequest::echo): its prompt's text (a
// token-id prompt's tokens' texts) and, for its logprobs, the prompt's first token (whose
// logprob is null; the others come as RequestOutput::prompt_logprobs).
struct Echo {
  std::string text;
  int32_t first_token = 0;
};

struct Prepared {
  std::vector<engine::GenerateRequest> requests;  // one per choice, in choice order
  std::vector<Echo> echoes;                       // per choice, when echo
  int n = 1;                                      // choices per prompt
  ResponseContext ctx;
  OutputMode output;  // how the choices' text becomes reasoning, content and tool calls
  bool stream = false;
};

// Prompt `index` of `r` as token ids (prompt_tokens.h: the rule /tokenize shares).
ApiResult<std::vector<int32_t>> tokenize_prompt(const EngineApi& engine,
                                                const GenerateOptions& generate,
                                                const OpenAiRequest& r, std::size_t index) {
  if (r.endpoint == Endpoint::kChatCompletions) {
    tokenizer::ChatRenderOptions options = r.chat_options;
    // tool_choice none: the tools are shown (the model answers in text) unless the server
    // excludes them.
    if (r.tool_choice != ToolChoice::kNone || !generate.exclude_tools_when_tool_choice_none) {
      for (const Tool& tool : r.tools) options.tools.push_back(tool.definition);
    }
    return encode_chat_prompt(engine, r.messages, r.add_generation_prompt, options);
  }
  const std::string field = prompt_field(r, index);
  const Prompt& prompt = r.prompts[index];
  if (prompt.token_ids) {
    if (auto error = check_token_ids(engine, *prompt.token_ids, field)) return *error;
    return *prompt.token_ids;
  }
  return encode_text_prompt(engine, *prompt.text, /*add_special_tokens=*/true, field);
}

// bad_words as token sequences, as vLLM tokenizes them: each word without its leading
// whitespace, and after one space (how a tokenizer that folds the space into the word's first
// token writes it inside text), without special tokens; the second only when it differs.
ApiResult<std::vector<std::vector<int32_t>>> bad_words_token_ids(const EngineApi& engine,
                                                                 const OpenAiRequest& r) {
  std::vector<std::vector<int32_t>> sequences;
  for (std::size_t i = 0; i < r.bad_words.size(); ++i) {
    const std::string field = "bad_words[" + std::to_string(i) + "]";
    const std::string& word = r.bad_words[i];
    const std::string bare = word.substr(word.find_first_not_of(kBadWordSpace));
    for (const std::string& text : {bare, " " + bare}) {
      ApiResult<std::vector<int32_t>> ids =
          encode_text_prompt(engine, text, /*add_special_tokens=*/false, field);
      if (!ids.ok()) return ids.error();
      if (ids.value().size() > engine::kMaxBadWordsTokens) {
        return bad_request(
            field + ": longer than " + std::to_string(engine::kMaxBadWordsTokens) + " tokens",
            field);
      }
      if (ids.value().empty() ||
          std::find(sequences.begin(), sequences.end(), ids.value()) != sequences.end()) {
        continue;
      }
      sequences.push_back(std::move(ids.value()));
    }
  }
  return sequences;
}

ApiResult<Prepared> prepare(EngineApi& engine, const GenerateOptions& options, Endpoint endpoint,
                            std::string_view body) {
  ApiResult<OpenAiRequest> parsed = parse_openai_request(body, endpoint);
  if (!parsed.ok()) return parsed.error();
  const OpenAiRequest& r = parsed.value();
  if (auto error = check_model(r.model, options.served_model_name)) return *error;
  if (auto error = check_token_ids(engine, r.stop_token_ids, "stop_token_ids")) return *error;
  if (auto error = check_token_ids(engine, r.allowed_token_ids, "allowed_token_ids")) {
    return *error;
  }
  ApiResult<std::vector<std::vector<int32_t>>> bad_words = bad_words_token_ids(engine, r);
  if (!bad_words.ok()) return bad_words.error();
  Prepared p;
  p.output = output_mode(r, engine.chat_template_family(), options.split_reasoning);
  // tool_choice required: the calls in the model's own syntax (tool_request.h).
  std::optional<engine::StructuredOutput> calls_constraint;
  if (r.tool_choice == ToolChoice::kRequired) {
    ApiResult<engine::StructuredOutput> c =
        required_calls_constraint(r.tools, r.parallel_tool_calls, p.output.format);
    if (!c.ok()) return c.error();
    calls_constraint = std::move(c.value());
  } else if (r.tool_choice == ToolChoice::kAuto && !r.structured.active()) {
    calls_constraint = auto_calls_constraint(r.tools, r.parallel_tool_calls, p.output.format);
  }
  const std::size_t num_prompts = endpoint == Endpoint::kCompletions ? r.prompts.size() : 1;
  for (std::size_t i = 0; i < num_prompts; ++i) {
    ApiResult<std::vector<int32_t>> ids = tokenize_prompt(engine, options, r, i);
    if (!ids.ok()) return ids.error();
    ApiResult<bool> truncated = truncate_prompt(r, engine.max_model_len(), ids.value());
    if (!truncated.ok()) return truncated.error();
    ApiResult<int32_t> max_tokens =
        resolve_max_tokens(r, static_cast<int64_t>(ids.value().size()), engine.max_model_len(), i);
    if (!max_tokens.ok()) return max_tokens.error();
    Echo echo;
    if (r.echo) {
      echo.first_token = ids.value().front();
      if (r.prompts[i].text && !truncated.value()) {  // a cut prompt echoes what is left
        echo.text = *r.prompts[i].text;
      } else {
        for (const int32_t id : ids.value()) echo.text += engine.token_text(id);
      }
    }
    for (int k = 0; k < r.n; ++k) {
      const int choice = static_cast<int>(p.requests.size());
      if (r.echo) p.echoes.push_back(echo);
      engine::GenerateRequest g;
      g.prompt_token_ids = ids.value();
      g.sampling = to_sampling_params(r, max_tokens.value(), choice);
      g.priority = r.priority;
      g.sampling.bad_words_token_ids = bad_words.value();
      if (calls_constraint) g.sampling.structured = *calls_constraint;
      if (p.output.keep_special_tokens()) g.sampling.skip_special_tokens = false;
      p.requests.push_back(std::move(g));
    }
  }
  p.n = r.n;
  p.ctx.endpoint = endpoint;
  p.ctx.created_s = static_cast<int64_t>(std::time(nullptr));
  p.ctx.model = options.served_model_name;
  p.ctx.logprobs = r.logprobs;
  p.ctx.top_logprobs = r.top_logprobs;
  p.ctx.include_usage = r.include_usage;
  p.ctx.continuous_usage = r.continuous_usage;
  p.stream = r.stream;
  return p;
}

// The update's tokens' logprobs (when wanted), after its echoed prompt's when it carries them.
std::vector<TokenLogprob> logprobs_of(EngineApi& engine, const engine::RequestOutput& out,
                                      bool wanted, const Echo* echo) {
  std::vector<TokenLogprob> result;
  if (!wanted) return result;
  const auto add = [&](const engine::TokenOutput& t) {
    TokenLogprob lp{engine.token_text(t.token_id), t.logprob.value_or(0.0f), {}};
    for (const TopLogprob& alt : t.top_logprobs) {
      lp.top.emplace_back(engine.token_text(alt.token_id), alt.logprob);
    }
    result.push_back(std::move(lp));
  };
  if (echo != nullptr && !out.prompt_logprobs.empty()) {
    result.push_back(TokenLogprob{engine.token_text(echo->first_token), std::nullopt, {}});
    for (const engine::TokenOutput& t : out.prompt_logprobs) add(t);
  }
  for (const engine::TokenOutput& t : out.tokens) add(t);
  return result;
}

ApiError generation_failed(const engine::RequestOutput& out) {
  return ApiError{500, "server_error", "generation failed: " + out.error, std::nullopt,
                  std::string("generation_failed")};
}

// The engine requests of one HTTP request's choices, read as one stream of (choice, update).
// Not thread-safe: one reader at a time (the handler, or the stream's provider and then its
// releaser, which httplib calls in turn).
class Choices {
 public:
  // Submits every request in order; a refusal cancels those already submitted.
  static Result<std::unique_ptr<Choices>> submit(EngineApi& engine,
                                                 std::vector<engine::GenerateRequest> requests,
                                                 int n) {
    std::unique_ptr<Choices> c(new Choices());
    c->n_ = n;
    c->signal_ = std::make_shared<engine::StreamSignal>();
    for (engine::GenerateRequest& request : requests) {
      Result<std::shared_ptr<OutputStream>> stream = engine.submit(std::move(request));
      if (!stream.ok()) {
        for (const auto& submitted : c->streams_) engine.cancel(submitted->id());
        return stream.status();
      }
      stream.value()->attach(c->signal_);
      c->streams_.push_back(std::move(stream.value()));
    }
    c->last_.resize(c->streams_.size());
    c->finished_.assign(c->streams_.size(), false);
    return c;
  }

  engine::RequestId first_id() const { return streams_.front()->id(); }
  bool all_finished() const { return num_finished_ == streams_.size(); }

  // The next update of any unfinished choice (round robin among those with updates), waiting
  // up to `timeout`; nullopt on timeout or once every choice has finished.
  std::optional<std::pair<int, engine::RequestOutput>> next(std::chrono::milliseconds timeout) {
    const auto deadline = Clock::now() + timeout;
    for (;;) {
      if (all_finished()) return std::nullopt;
      const uint64_t seen = signal_->generation();
      for (std::size_t k = 0; k < streams_.size(); ++k) {
        const std::size_t i = (cursor_ + k) % streams_.size();
        if (finished_[i]) continue;
        std::optional<engine::RequestOutput> out = streams_[i]->next(std::chrono::milliseconds(0));
        if (!out) continue;
        cursor_ = i + 1;
        last_[i] =
            Usage{out->num_prompt_tokens, out->num_output_tokens, out->num_cached_prompt_tokens};
        if (out->finished) {
          finished_[i] = true;
          ++num_finished_;
        }
        return std::pair<int, engine::RequestOutput>(static_cast<int>(i), std::move(*out));
      }
      const auto now = Clock::now();
      if (now >= deadline) return std::nullopt;
      signal_->wait(seen, std::chrono::duration_cast<std::chrono::milliseconds>(deadline - now) +
                              std::chrono::milliseconds(1));
    }
  }

  void cancel_unfinished(EngineApi& engine) {
    for (std::size_t i = 0; i < streams_.size(); ++i) {
      if (!finished_[i]) engine.cancel(streams_[i]->id());
    }
  }

  // Choice i's latest update: its prompt's tokens and its own output tokens.
  Usage choice_usage(int i) const { return last_[static_cast<std::size_t>(i)]; }

  // Usage over the choices' latest updates: each prompt's tokens once (its n choices read the
  // same prompt), every choice's output tokens, and per prompt the fewest cached prompt tokens
  // of its choices (what the cache held before the request; the others then reuse the pages
  // that one computed).
  Usage usage() const {
    Usage u;
    for (std::size_t first = 0; first < last_.size(); first += static_cast<std::size_t>(n_)) {
      int64_t cached = last_[first].cached_prompt_tokens;
      for (std::size_t i = first; i < first + static_cast<std::size_t>(n_); ++i) {
        u.completion_tokens += last_[i].completion_tokens;
        cached = std::min(cached, last_[i].cached_prompt_tokens);
      }
      u.prompt_tokens += last_[first].prompt_tokens;
      u.cached_prompt_tokens += cached;
    }
    return u;
  }

 private:
  Choices() = default;
  int n_ = 1;
  std::shared_ptr<engine::StreamSignal> signal_;
  std::vector<std::shared_ptr<OutputStream>> streams_;
  std::vector<Usage> last_;  // per choice: from its latest update
  std::vector<bool> finished_;
  std::size_t num_finished_ = 0;
  std::size_t cursor_ = 0;
};

// State shared by one streaming response's provider calls and its releaser.
struct StreamState {
  std::shared_ptr<EngineApi> engine;
  std::unique_ptr<Choices> choices;
  ResponseContext ctx;
  int64_t heartbeat_ms = 2000;
  const std::atomic<bool>* stopping = nullptr;
  std::vector<bool> started;          // per choice: its first chunk was written
  std::vector<Echo> echoes;           // per choice, when echo
  std::vector<ChoiceOutput> outputs;  // per choice
  bool done = false;                  // [DONE] was written (or the response ended with an error)
  Clock::time_point last_write = Clock::now();
};

bool write(httplib::DataSink& sink, StreamState& s, const std::string& bytes) {
  s.last_write = Clock::now();
  return sink.write(bytes.data(), bytes.size());
}

// Ends the stream: [DONE] (after the usage chunk, when asked for).
bool finish_stream(StreamState& s, httplib::DataSink& sink) {
  s.done = true;
  if (s.ctx.include_usage && !write(sink, s, sse_data(usage_chunk(s.ctx, s.choices->usage())))) {
    return false;
  }
  if (!write(sink, s, std::string(kSseDone))) return false;
  sink.done();
  return true;
}

// One provider call: waits briefly for the engine, writes what came. false = stop streaming.
bool pump(StreamState& s, httplib::DataSink& sink) {
  if (s.done) return false;
  auto update = s.choices->next(kPollInterval);
  if (!update) {
    if (s.choices->all_finished()) return finish_stream(s, sink);
    if (s.stopping && s.stopping->load()) return false;
    const auto idle =
        std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - s.last_write);
    if (idle.count() >= s.heartbeat_ms) return write(sink, s, sse_comment("keep-alive"));
    return true;
  }
  const int index = update->first;
  const engine::RequestOutput& out = update->second;
  if (out.finished && out.finish_reason == "error") {
    s.done = true;
    s.choices->cancel_unfinished(*s.engine);
    if (!write(sink, s, sse_data(error_body(generation_failed(out))))) return false;
    if (!write(sink, s, std::string(kSseDone))) return false;
    sink.done();
    return true;
  }
  const Echo* echo = s.echoes.empty() ? nullptr : &s.echoes[static_cast<std::size_t>(index)];
  const auto lp = logprobs_of(*s.engine, out, s.ctx.logprobs, echo);
  const bool first = !s.started[index];
  const Usage usage = s.choices->choice_usage(index);
  ChoiceOutput& output = s.outputs[static_cast<std::size_t>(index)];
  // The echoed prompt's text leads the choice's first chunk.
  MessageDelta delta =
      output.feed(first && echo != nullptr ? echo->text + out.text_delta : out.text_delta);
  if (out.finished) merge_delta(delta, output.finish());
  if (!delta.content.empty() || !delta.reasoning.empty() || !delta.tool_calls.empty() ||
      !lp.empty() || (first && !out.finished)) {
    if (!write(sink, s,
               sse_data(stream_chunk(s.ctx, index, delta, std::nullopt, lp, first, usage)))) {
      return false;
    }
    s.started[index] = true;
  }
  if (!out.finished) return true;
  if (!write(sink, s,
             sse_data(stream_chunk(s.ctx, index, {}, output.finish_reason(out.finish_reason), {},
                                   !s.started[index], usage)))) {
    return false;
  }
  s.started[index] = true;
  return s.choices->all_finished() ? finish_stream(s, sink) : true;
}

void respond_streaming(const std::shared_ptr<EngineApi>& engine, const GenerateOptions& options,
                       std::unique_ptr<Choices> choices, const ResponseContext& ctx,
                       const OutputMode& output, std::vector<Echo> echoes, std::size_t num_choices,
                       httplib::Response& res) {
  auto state = std::make_shared<StreamState>();
  state->outputs.assign(num_choices, ChoiceOutput(output));
  state->echoes = std::move(echoes);
  state->engine = engine;
  state->choices = std::move(choices);
  state->ctx = ctx;
  state->heartbeat_ms = options.heartbeat_ms;
  state->stopping = options.stopping;
  state->started.assign(num_choices, false);
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
          PS_LOG_ERROR("server", "req={} stream failed: {}", state->choices->first_id(), e.what());
          return false;
        }
      },
      [state, open_streams](bool /*success*/) {
        if (!state->done) {
          PS_LOG_INFO("server", "req={} client gone or stream abandoned: cancelling",
                      state->choices->first_id());
          state->choices->cancel_unfinished(*state->engine);
        }
        if (open_streams) open_streams->closed();
      });
}

void respond_whole(EngineApi& engine, const GenerateOptions& options, Choices& choices,
                   const ResponseContext& ctx, const OutputMode& mode,
                   const std::vector<Echo>& echoes, std::size_t num_choices,
                   httplib::Response& res) {
  std::vector<ChoiceText> texts(num_choices);
  std::vector<ChoiceOutput> outputs(num_choices, ChoiceOutput(mode));
  for (std::size_t i = 0; i < echoes.size(); ++i) texts[i].message.content = echoes[i].text;
  while (!choices.all_finished()) {
    auto update = choices.next(kPollInterval);
    if (!update) {
      if (options.stopping && options.stopping->load()) {
        choices.cancel_unfinished(engine);
        set_error(res, ApiError{503, "service_unavailable_error", "the server is shutting down",
                                std::nullopt, std::string("shutting_down")});
        return;
      }
      continue;
    }
    const engine::RequestOutput& out = update->second;
    ChoiceText& c = texts[update->first];
    ChoiceOutput& output = outputs[update->first];
    merge_delta(c.message, output.feed(out.text_delta));
    const Echo* echo = echoes.empty() ? nullptr : &echoes[update->first];
    for (auto& t : logprobs_of(engine, out, ctx.logprobs, echo)) c.logprobs.push_back(std::move(t));
    if (!out.finished) continue;
    if (out.finish_reason == "error") {
      choices.cancel_unfinished(engine);
      set_error(res, generation_failed(out));
      return;
    }
    merge_delta(c.message, output.finish());
    c.finish_reason = output.finish_reason(out.finish_reason);
  }
  res.status = 200;
  res.set_content(completion_body(ctx, texts, choices.usage()), "application/json");
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
  const std::size_t num_choices = p.requests.size();
  const std::size_t num_prompt_tokens = p.requests.front().prompt_token_ids.size();
  Result<std::unique_ptr<Choices>> submitted = Choices::submit(*engine, std::move(p.requests), p.n);
  if (!submitted.ok()) {
    PS_LOG_INFO("server", "submit refused: {}", submitted.status().to_string());
    set_error(res, engine_error(submitted.status()));
    return;
  }
  std::unique_ptr<Choices> choices = std::move(submitted.value());
  p.ctx.id = std::string(endpoint == Endpoint::kCompletions ? "cmpl-" : "chatcmpl-") +
             std::to_string(choices->first_id());
  PS_LOG_DEBUG("server", "req={} submitted choices={} prompt_tokens={}", choices->first_id(),
               num_choices, num_prompt_tokens);
  if (p.stream) {
    respond_streaming(engine, options, std::move(choices), p.ctx, p.output, std::move(p.echoes),
                      num_choices, res);
  } else {
    respond_whole(*engine, options, *choices, p.ctx, p.output, p.echoes, num_choices, res);
  }
}

}  // namespace packserve::server
