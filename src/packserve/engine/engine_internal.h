// engine_internal.h: Engine::Impl, shared by engine.cc (public API: validation, submit,
// cancel, drain, stop, metrics), engine_loop.cc (the engine thread: scheduler steps, the
// executor adapter, events -> stream updates) and engine_metrics.cc (histograms).
//
// Locking: `mutex` guards the inbox (new submissions, cancellations), the lifecycle flags,
// num_live and waiting_snapshot; `metrics_mutex` guards `metrics`. The scheduler, the backend
// and `live` belong to the engine thread alone. Lock order: mutex, then metrics_mutex, then a
// RequestStream's own lock (push() never calls back).
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <unordered_map>
#include <unordered_set>
#include <utility>
#include <vector>

#include "packserve/common/rng.h"
#include "packserve/common/worker_pool.h"
#include "packserve/engine/engine.h"
#include "packserve/engine/sampler.h"
#include "packserve/engine/stop_strings.h"
#include "packserve/engine/structured_output.h"
#include "packserve/tokenizer/stream_decoder.h"

namespace packserve::engine {

// Fixed latency buckets (ms) of every engine histogram; +Inf is the implicit last bucket.
std::vector<double> latency_bucket_bounds_ms();
Histogram make_latency_histogram();
void observe(Histogram& histogram, double value_ms);

// A request the engine thread knows (added to the scheduler, not yet finished).
struct LiveRequest {
  LiveRequest(RequestId id_in, const GenerateRequest& request, std::shared_ptr<RequestStream> s,
              const tokenizer::Tokenizer& tok, uint64_t seed)
      : id(id_in),
        params(request.sampling),
        stream(std::move(s)),
        decoder(tok, tokenizer::DecodeOptions{.skip_special_tokens =
                                                  request.sampling.skip_special_tokens}),
        matcher(request.sampling.stop, request.sampling.include_stop_str_in_output),
        sampler(request.sampling, seed, request.prompt_token_ids),
        num_prompt_tokens(static_cast<int32_t>(request.prompt_token_ids.size())),
        return_last_prompt_logits(request.return_last_prompt_logits) {}

  RequestId id;
  SamplingParams params;
  std::shared_ptr<RequestStream> stream;
  tokenizer::StreamDecoder decoder;
  StopStringMatcher matcher;
  RequestSampler sampler;
  std::unordered_set<int32_t> stop_token_ids;  // EOS (unless ignore_eos) + params' ids
  int32_t num_prompt_tokens = 0;
  int32_t num_output_tokens = 0;
  double arrival_time_ms = 0.0;
  std::optional<double> first_token_time_ms;
  double last_token_time_ms = 0.0;
  bool return_last_prompt_logits = false;
  // Set by the executor adapter in the step that samples, read when its token event arrives.
  std::optional<float> step_logprob;
  std::vector<TopLogprob> step_top_logprobs;  // params.top_logprobs > 0
  // With logprobs: this step's accepted speculative drafts (their draw rows), in output order,
  // read by their token events before the step's own token takes the two above.
  std::deque<TokenOutput> step_draft_outputs;
  std::vector<float> captured_logits;
  // SamplingParams::prompt_logprobs >= 0: the prompt (the scored rows' targets) and
  // prompt_scores[p], the score of prompt token p + 1 from the row at position p.
  std::vector<int32_t> prompt;
  std::vector<TokenOutput> prompt_scores;
  // Whether this step's prompt rows are scored: until the first token, whose update hands the
  // scores out (a recompute after a preemption scores the same positions again).
  bool scores_prompt_now() const { return params.prompt_logprobs >= 0 && num_output_tokens == 0; }
  // Whether the step that samples the first token must keep its logits (captured_logits).
  bool captures_logits_now() const {
    return return_last_prompt_logits && num_output_tokens == 0 && captured_logits.empty();
  }
  // SamplingParams::structured: the output's matcher (its mask goes to the backend with an
  // argmax or draw row; a row whose logits come back is masked and drawn on the host), the
  // mask and masked row of such a host step, and what went wrong in the draw (no token can
  // continue the match), handled with the token's event.
  std::unique_ptr<grammar::Matcher> constraint;
  std::vector<uint32_t> mask;
  std::vector<float> masked_logits;
  std::optional<Status> constraint_error;
  // This step's update under construction.
  std::optional<RequestOutput> update;
};

struct Engine::Impl {
  explicit Impl(tokenizer::Tokenizer tokenizer) : tok(std::move(tokenizer)) {}

  // ---- fixed after create() ----
  EngineConfig config;
  std::unique_ptr<model::ForwardBackend> backend;
  tokenizer::Tokenizer tok;
  int64_t vocab_size = 0;
  int32_t max_model_len = 0;
  std::vector<int32_t> eos_token_ids;
  std::unique_ptr<GrammarCache> grammars;  // structured outputs (thread-safe)
  std::chrono::steady_clock::time_point start_time;

  // ---- guarded by mutex ----
  struct Pending {
    RequestId id;
    GenerateRequest request;
    std::shared_ptr<RequestStream> stream;
    uint64_t seed;
    std::shared_ptr<const grammar::Grammar> constraint;  // SamplingParams::structured
  };
  mutable std::mutex mutex;
  std::condition_variable wake_cv;  // the engine thread waits here when idle
  std::condition_variable idle_cv;  // drain() waits here for num_live == 0
  std::vector<Pending> inbox;
  std::vector<RequestId> cancels;
  bool cancel_all = false;       // drain() past its grace, or stop()
  bool draining = false;         // submit() refused
  bool stopping = false;         // the thread exits once nothing is live
  int64_t num_live = 0;          // submitted and not yet finished
  int64_t waiting_snapshot = 0;  // scheduler waiting + staged after the last step
  RequestId next_id = 1;
  Rng seed_rng{0};

  // ---- guarded by metrics_mutex ----
  mutable std::mutex metrics_mutex;
  EngineMetrics metrics;
  std::deque<std::pair<double, int64_t>> recent_tokens;  // (step end ms, tokens)

  // ---- engine thread only ----
  std::unique_ptr<sched::Scheduler> scheduler;
  std::unordered_map<RequestId, std::unique_ptr<LiveRequest>> live;
  std::unique_ptr<WorkerPool> sampler_pool;  // a step's rows are sampled in parallel
  std::thread thread;

  double now_ms() const {
    return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start_time)
        .count();
  }
  // ---- the engine thread (engine_loop.cc) ----
  struct Executor;  // sched::ModelExecutor over `backend`
  void run();
  void admit(Pending& pending, double now_ms);
  void process_events(const sched::StepEvents& events, double now_ms);
  // Pushes r's final update, records metrics, erases r from `live`.
  void finish(LiveRequest& r, std::string reason, double time_ms, std::string error);
  void fail_requests(const std::vector<RequestId>& ids, const Status& status, double now_ms);
  struct StepTimes {
    double step_ms = 0.0, forward_ms = 0.0, sample_ms = 0.0, mask_fill_ms = 0.0;
    int64_t masked_rows = 0;
  };
  void publish_metrics(int64_t step_tokens, double now_ms, const StepTimes& times);
};

}  // namespace packserve::engine
