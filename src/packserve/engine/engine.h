// engine.h: the serving engine (DESIGN.md "Data flow of one engine step"; issues 4 and 5).
//
// Owns one engine thread that loops: take new submissions and cancellations -> Scheduler
// step (schedule -> ForwardBatch -> ForwardBackend::forward -> sample -> commit) -> detokenize
// incrementally -> push RequestOutput updates into each request's stream. HTTP threads, the
// `generate` command and the in-process benchmark only call submit()/cancel()/metrics() and
// read their streams.
//
// Text: every update's text_delta holds only complete UTF-8 characters (StreamDecoder) and
// never part of a stop string: text that could still become a stop string is held back until
// it cannot; the matched stop string is not included (OpenAI semantics), finish_reason "stop".
// Failure contract: submit() validates everything (prompt ids in [0, vocab), prompt +
// max_tokens <= max_model_len, sampling params) and returns kInvalidArgument naming the field;
// kResourceExhausted when the waiting queue is full; kFailedPrecondition while draining or
// stopped. A backend error fails only the requests of that step (finish_reason "error", their
// pages returned); the engine goes on with the others.
// Thread-safety: every public method is thread-safe.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "packserve/attention/plan.h"
#include "packserve/common/sample_draw.h"
#include "packserve/common/status.h"
#include "packserve/kv/kv_cache.h"
#include "packserve/model/forward.h"
#include "packserve/sched/scheduler.h"
#include "packserve/tokenizer/tokenizer.h"

namespace packserve::engine {

using RequestId = sched::RequestId;

// Alternatives a token may report with SamplingParams::top_logprobs (vLLM's default cap).
inline constexpr int32_t kMaxTopLogprobs = packserve::kMaxTopLogprobs;
// Entries a request's SamplingParams::logit_bias may hold.
inline constexpr size_t kMaxLogitBias = 1024;
// Sequences a request's SamplingParams::bad_words_token_ids may hold, and tokens in each.
inline constexpr size_t kMaxBadWordsSequences = 128;
inline constexpr size_t kMaxBadWordsTokens = 64;

// Structured outputs (vLLM's structured_outputs, OpenAI's response_format): the output must
// match a constraint (grammar/grammar.h). Tokens that cannot continue a match get -inf before
// the draw (the logprobs are then those of the masked row, as vLLM's), EOS may be drawn only
// where the output is a complete match, and the request ends with "stop" where nothing may
// follow. The masks go to the backend with the rows (ForwardBatch::masks, model/forward.h).
struct StructuredOutput {
  enum class Kind : uint8_t {
    kNone,
    kJsonObject,
    kJsonSchema,
    kRegex,
    kChoice,
    kGrammar,
    kStructuralTag
  };
  Kind kind = Kind::kNone;
  // kJsonSchema: the schema as JSON text; kRegex: the pattern; kGrammar: GBNF / EBNF text
  // (grammar/ebnf.h); kStructuralTag: the tag as JSON text (grammar::Grammar::structural_tag:
  // free text whose triggers start structures of a begin, JSON of a schema and an end).
  std::string spec;
  std::vector<std::string> choices;  // kChoice: the output is exactly one of them (>= 1)
  // kRegex: when not empty, `spec` holds JSON schemas' regexes whose free-form values are
  // holes and this is the same regex with them spelt out
  // (grammar::Grammar::regex_with_json_values; the server's tool calls).
  std::string spelt_out;
  // kJsonSchema: the regex of the whitespace between JSON tokens (grammar/json_schema.h
  // JsonSchemaOptions::whitespace; unset: its default, "": none). kJsonObject: only "" (no
  // whitespace) or unset.
  std::optional<std::string> whitespace;
  // The request field it came from: its errors start with it ("response_format: ...").
  std::string field = "structured_output";
  bool active() const { return kind != Kind::kNone; }
};

struct SamplingParams {
  double temperature = 1.0;      // 0 = greedy; >= 0, finite
  int32_t top_k = 0;             // 0 = off; >= 0
  double top_p = 1.0;            // in (0, 1]
  double min_p = 0.0;            // in [0, 1]
  std::optional<uint64_t> seed;  // per-request RNG seed; unset = drawn from the engine's RNG
  int32_t max_tokens = 16;       // >= 1
  // vLLM's min_tokens, in [0, max_tokens]: until this many tokens are out, the stop tokens
  // (EOS unless ignore_eos, and stop_token_ids) cannot be drawn (their logits are -inf) and
  // stop strings are looked for only in the text of the tokens after them.
  int32_t min_tokens = 0;
  std::vector<std::string> stop;  // stop strings (non-empty strings), at most 16
  // vLLM's include_stop_str_in_output: the matched stop string ends the output text instead of
  // being cut from it.
  bool include_stop_str_in_output = false;
  std::vector<int32_t> stop_token_ids;  // in addition to the model's EOS ids
  // vLLM's allowed_token_ids: when not empty, only these tokens are drawn, within the
  // structured output's (grammar::Grammar::restrict_tokens; a masked row every step).
  std::vector<int32_t> allowed_token_ids;
  // vLLM's bad_words, as token sequences (the server tokenizes the words): a sequence's last
  // token is not drawn where the output so far ends with the rest of it (a one-token sequence:
  // never), within the structured output's (grammar::Grammar::ban_sequences; a masked row
  // every step). At most kMaxBadWordsSequences, each of 1 to kMaxBadWordsTokens ids.
  std::vector<std::vector<int32_t>> bad_words_token_ids;
  bool ignore_eos = false;
  bool logprobs = false;  // report the sampled token's log-probability
  // With logprobs: also the this-many most likely tokens' log-probabilities (0 to
  // kMaxTopLogprobs), those of the raw logits. The forward backend finds them beside its draw
  // (SampleDraw::top_logprobs, ForwardOutput::top_logprobs).
  int32_t top_logprobs = 0;
  // vLLM's prompt_logprobs: -1 = off; k in [0, kMaxTopLogprobs]: each prompt token's raw
  // log-probability given the tokens before it, with the k most likely tokens at its position
  // (RequestOutput::prompt_logprobs). Such a request computes its whole prompt: it adopts no
  // prefix-cache pages until its first output token (sched::Request::compute_whole_prompt).
  int32_t prompt_logprobs = -1;
  // Adjustments of the raw logits before temperature and the cuts, in vLLM's order: the
  // logit bias, then the penalties on tokens already seen (repetition, then frequency, then
  // presence). Logprobs stay those of the raw logits. The forward backend applies them to
  // the rows it draws (LogitAdjustments, sampler.h; ForwardBatch::adjusts).
  // OpenAI's logit_bias: (token id, bias in [-100, 100]) pairs, each id once, at most
  // kMaxLogitBias; the bias is added to the token's logit. (Ids are checked against the
  // vocabulary by Engine::submit.)
  std::vector<std::pair<int32_t, double>> logit_bias;
  // OpenAI's, on the tokens generated so far (not the prompt's), each in [-2, 2]:
  //   logit -= frequency_penalty * count + presence_penalty * (count > 0).
  double presence_penalty = 0.0;
  double frequency_penalty = 0.0;
  // transformers' / vLLM's, on every token of the prompt and of the output, > 0 (1 = off): a
  // positive logit is divided by it, any other multiplied.
  double repetition_penalty = 1.0;
  StructuredOutput structured;
  // vLLM's: leave tokens marked special out of the text (false: Mistral's [TOOL_CALLS] control
  // token must reach the server's tool-call parser). Stop tokens are never text.
  bool skip_special_tokens = true;
  bool adjusts_logits() const {
    return presence_penalty != 0.0 || frequency_penalty != 0.0 || repetition_penalty != 1.0 ||
           !logit_bias.empty();
  }
  // kInvalidArgument naming the field ("temperature: expected a finite number >= 0, got nan").
  Status validate() const;
};

struct GenerateRequest {
  std::vector<int32_t> prompt_token_ids;  // >= 1 token
  SamplingParams sampling;
  double arrival_time_ms = -1.0;  // < 0: now (the engine clock); later than now: now
  // Capture the f32 logits at the position after the last prompt token (the row the first
  // output token is sampled from; raw, before temperature) into
  // RequestOutput::last_prompt_logits of the update that carries the first token.
  bool return_last_prompt_logits = false;
  // vLLM's priority (lower runs first): only with EngineConfig::scheduler.policy kPriority
  // (sched::SchedulingPolicy); any other policy refuses a value other than 0.
  int32_t priority = 0;
};

struct TokenOutput {
  int32_t token_id = 0;
  std::optional<float> logprob;  // when SamplingParams::logprobs
  // The SamplingParams::top_logprobs most likely tokens at this position, most likely first
  // (common/sample_draw.h top_logprobs; the sampled token's logprob is the same float there).
  std::vector<TopLogprob> top_logprobs;
};

// One update of a request. The last update has finished = true.
struct RequestOutput {
  RequestId id = 0;
  std::vector<TokenOutput> tokens;  // new tokens since the previous update
  std::string text_delta;           // new text since the previous update
  bool finished = false;
  // "stop" (EOS, stop token or stop string), "length", "cancelled", "kv_exhausted", "error".
  std::string finish_reason;
  std::string error;  // finish_reason "error": what failed
  int32_t num_prompt_tokens = 0;
  int32_t num_output_tokens = 0;         // so far
  int32_t num_cached_prompt_tokens = 0;  // prefix-cache hit at first admission
  // Engine-clock times, ms (engine_now_ms()).
  double arrival_time_ms = 0.0;
  std::optional<double> first_token_time_ms;
  double last_token_time_ms = 0.0;
  // [vocab_size] when GenerateRequest::return_last_prompt_logits, in the first-token update.
  std::vector<float> last_prompt_logits;
  // [num_prompt_tokens - 1] when SamplingParams::prompt_logprobs >= 0, in the first-token
  // update: entry i is prompt token i + 1 with its logprob and top_logprobs (the first prompt
  // token has none).
  std::vector<TokenOutput> prompt_logprobs;
};

// Wakes a caller that reads several streams (the choices of one server request): every update
// pushed to a stream attached to it (RequestStream::attach) bumps its generation. A reader
// takes generation(), polls its streams without waiting, and waits for a new generation only
// when none had an update, so no update is missed.
class StreamSignal {
 public:
  uint64_t generation() const;
  // Waits up to `timeout` for the generation to differ from `seen`; returns the generation.
  uint64_t wait(uint64_t seen, std::chrono::milliseconds timeout);
  void notify();

 private:
  mutable std::mutex mutex_;
  std::condition_variable cv_;
  uint64_t generation_ = 0;
};

// The caller's end of one request: a thread-safe queue of updates.
class RequestStream {
 public:
  explicit RequestStream(RequestId id) : id_(id) {}
  RequestId id() const { return id_; }
  // Waits up to `timeout` for the next update; nullopt on timeout. After the finished update
  // was returned, returns nullopt at once.
  std::optional<RequestOutput> next(std::chrono::milliseconds timeout);
  // Every later push() also notifies `signal` (one signal at a time; null detaches).
  void attach(std::shared_ptr<StreamSignal> signal);
  // Engine side.
  void push(RequestOutput output);

 private:
  RequestId id_;
  std::mutex mutex_;
  std::condition_variable cv_;
  std::deque<RequestOutput> queue_;
  std::shared_ptr<StreamSignal> signal_;
  bool closed_ = false;  // the finished update was returned
};

struct EngineConfig {
  sched::SchedulerConfig scheduler;
  kv::KvCacheConfig kv;         // num_pages, page_size, prefix caching
  attention::PlanOptions plan;  // attention policy for every step
  int32_t max_model_len = 0;    // prompt + max_tokens limit; 0 = model_context_length (config.h)
  int32_t max_waiting_requests = 1024;  // submit() beyond this: kResourceExhausted
  uint64_t seed = 0;                    // engine RNG (requests without a seed)
  // Host threads that sample a step's rows in parallel (the caller's included) and fill
  // structured outputs' token masks; 0 = auto (min(8, hardware threads)). Tokens do not depend
  // on it (each request has its own RNG).
  int32_t num_sampler_threads = 0;
  // Rows of sampled requests (all but greedy without logprobs, which take the backend's
  // argmax; logits not captured) are drawn by the forward backend (ForwardBatch::samples =
  // kOutputSample): the CUDA backend then returns 8 bytes per row instead of the row's logits.
  // The tokens are the same either way (common/sample_draw.h).
  bool backend_sampling = true;
  // Speculative decoding by prompt lookup (sched::NgramSpeculation, vLLM's "ngram" method), for
  // the requests without logit bias, penalties, min_tokens or a structured output, greedy
  // without logprobs or (any other) while backend_sampling (the others decode a token per
  // step). Each decode step then carries up to speculation.num_speculative_tokens drafts found
  // in the request's own prompt and output; the backend returns their rows' argmax or draw in
  // the same forward (ForwardBatch::extra_rows), each row drawn with the uniform its token
  // would have had without drafts, and the drafts that match, plus the model's token after
  // them, are the step's output. For sampled requests that is rejection sampling of drafts
  // proposed with certainty (the output distribution is unchanged). The tokens are those of
  // decoding one at a time (a seed's too), up to float rounding of the rows' logits (a near tie
  // may break the other way). num_speculative_tokens = 0: off.
  sched::NgramSpeculation speculation;
  Status validate() const;
};

// Histogram with fixed upper bounds (Prometheus style, cumulative at export).
struct Histogram {
  std::vector<double> upper_bounds_ms;
  std::vector<int64_t> counts;  // per bucket, same size as upper_bounds_ms, plus +Inf last
  double sum_ms = 0.0;
  int64_t count = 0;
};

struct EngineMetrics {
  int64_t requests_finished_stop = 0, requests_finished_length = 0, requests_cancelled = 0,
          requests_error = 0, requests_kv_exhausted = 0, requests_rejected = 0;
  int64_t num_running = 0, num_waiting = 0;
  int64_t pages_in_use = 0, pages_cached = 0, pages_free = 0, pages_total = 0;
  // Tokens looked up in the prefix cache at admission (kv::KvCacheStats) and those served
  // from it.
  int64_t prefix_lookup_tokens = 0, prefix_hit_tokens = 0;
  // hits / lookups, 0 before any lookup.
  double prefix_hit_rate() const {
    return prefix_lookup_tokens == 0
               ? 0.0
               : static_cast<double>(prefix_hit_tokens) / static_cast<double>(prefix_lookup_tokens);
  }
  int64_t prompt_tokens_total = 0, generation_tokens_total = 0;
  double generation_tokens_per_s = 0.0;  // over the last ~10 s
  int64_t num_steps = 0, num_preemptions = 0;
  // Speculative decoding (EngineConfig::speculation): drafts verified, and of those accepted.
  int64_t spec_draft_tokens = 0, spec_accepted_tokens = 0;
  // Host time of the engine thread's steps, seconds in all: whole iterations (admit,
  // schedule, forward, sample, commit, detokenize and push outputs), and within them the
  // backend's forward() (structured outputs' masks, filled while the device runs, included)
  // and the sampling of the rows.
  double step_seconds = 0.0, forward_seconds = 0.0, sample_seconds = 0.0;
  // Structured outputs: rows whose token masks went to the backend with them, and the host
  // time of filling those masks (inside forward_seconds: the device runs meanwhile).
  int64_t masked_rows = 0;
  double mask_fill_seconds = 0.0;
  model::BackendStats backend;  // the backend's graph cache (CUDA), as of the last step
  Histogram ttft_ms, tpot_ms, e2e_ms;
};

class Engine {
 public:
  // Starts the engine thread. `tokenizer` decodes output text.
  static Result<std::unique_ptr<Engine>> create(const EngineConfig& config,
                                                std::unique_ptr<model::ForwardBackend> backend,
                                                tokenizer::Tokenizer tokenizer);
  ~Engine();  // stop(): cancels what is left, joins the thread
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  Result<std::shared_ptr<RequestStream>> submit(GenerateRequest request);
  // Cancels a live request: its stream gets a finished update with "cancelled" and its pages
  // return within one step. Unknown or already finished ids are ignored.
  void cancel(RequestId id);
  EngineMetrics metrics() const;
  const model::ModelConfig& model_config() const;
  int32_t max_model_len() const;  // EngineConfig::max_model_len, or the model's context length
  const tokenizer::Tokenizer& tokenizer() const;
  double engine_now_ms() const;  // the engine clock (steady, ms since create())

  // Stops accepting submissions; waits up to `grace` for live requests to finish, then
  // cancels the rest. Returns when none is live.
  void drain(std::chrono::milliseconds grace);
  void stop();

 private:
  Engine() = default;
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace packserve::engine
