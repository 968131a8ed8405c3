// engine.cc: the Engine's public API (engine.h): validation, submit, cancel, metrics, drain,
// stop, and RequestStream. The engine thread itself is in engine_loop.cc.
#include <algorithm>
#include <cmath>
#include <limits>
#include <sstream>
#include <string>
#include <unordered_set>
#include <utility>

#include "packserve/common/log.h"
#include "packserve/engine/engine_internal.h"
#include "packserve/sched/ngram_proposer.h"
#include "packserve/tokenizer/utf8.h"

namespace packserve::engine {
namespace {

constexpr size_t kMaxStopStrings = 16;

std::string fmt_double(double v) {
  std::ostringstream os;
  os << v;
  return os.str();
}

}  // namespace

Status SamplingParams::validate() const {
  if (!std::isfinite(temperature) || temperature < 0.0) {
    return invalid_argument("temperature: expected a finite number >= 0, got " +
                            fmt_double(temperature));
  }
  if (top_k < 0) {
    return invalid_argument("top_k: expected an integer >= 0 (0 = off), got " +
                            std::to_string(top_k));
  }
  if (!std::isfinite(top_p) || top_p <= 0.0 || top_p > 1.0) {
    return invalid_argument("top_p: expected a number in (0, 1], got " + fmt_double(top_p));
  }
  if (!std::isfinite(min_p) || min_p < 0.0 || min_p > 1.0) {
    return invalid_argument("min_p: expected a number in [0, 1], got " + fmt_double(min_p));
  }
  if (top_logprobs < 0 || top_logprobs > kMaxTopLogprobs) {
    return invalid_argument("top_logprobs: expected an integer in [0, " +
                            std::to_string(kMaxTopLogprobs) + "], got " +
                            std::to_string(top_logprobs));
  }
  if (top_logprobs > 0 && !logprobs) {
    return invalid_argument(
        "top_logprobs: needs logprobs (the alternatives come with the "
        "sampled token's own log-probability)");
  }
  if (prompt_logprobs < -1 || prompt_logprobs > kMaxTopLogprobs) {
    return invalid_argument("prompt_logprobs: expected -1 (off) or an integer in [0, " +
                            std::to_string(kMaxTopLogprobs) + "], got " +
                            std::to_string(prompt_logprobs));
  }
  for (const auto& [name, value] : {std::pair{"presence_penalty", presence_penalty},
                                    {"frequency_penalty", frequency_penalty}}) {
    if (!std::isfinite(value) || value < -2.0 || value > 2.0) {
      return invalid_argument(std::string(name) + ": expected a number in [-2, 2], got " +
                              fmt_double(value));
    }
  }
  if (!std::isfinite(repetition_penalty) || repetition_penalty <= 0.0) {
    return invalid_argument("repetition_penalty: expected a finite number > 0 (1 = off), got " +
                            fmt_double(repetition_penalty));
  }
  if (logit_bias.size() > kMaxLogitBias) {
    return invalid_argument("logit_bias: expected at most " + std::to_string(kMaxLogitBias) +
                            " entries, got " + std::to_string(logit_bias.size()));
  }
  std::unordered_set<int32_t> biased;
  for (const auto& [token, bias] : logit_bias) {
    const std::string field = "logit_bias[" + std::to_string(token) + "]";
    if (token < 0) return invalid_argument(field + ": expected a token id >= 0");
    if (!biased.insert(token).second) return invalid_argument(field + ": given twice");
    if (!std::isfinite(bias) || bias < -100.0 || bias > 100.0) {
      return invalid_argument(field + ": expected a bias in [-100, 100], got " + fmt_double(bias));
    }
  }
  if (max_tokens < 1) {
    return invalid_argument("max_tokens: expected an integer >= 1, got " +
                            std::to_string(max_tokens));
  }
  if (min_tokens < 0 || min_tokens > max_tokens) {
    return invalid_argument("min_tokens: expected an integer in [0, max_tokens = " +
                            std::to_string(max_tokens) + "], got " + std::to_string(min_tokens));
  }
  if (stop.size() > kMaxStopStrings) {
    return invalid_argument("stop: expected at most " + std::to_string(kMaxStopStrings) +
                            " stop strings, got " + std::to_string(stop.size()));
  }
  for (size_t i = 0; i < stop.size(); ++i) {
    if (stop[i].empty()) {
      return invalid_argument("stop[" + std::to_string(i) + "]: expected a non-empty string");
    }
    if (!tokenizer::validate_utf8(stop[i]).ok()) {
      return invalid_argument("stop[" + std::to_string(i) + "]: expected valid UTF-8");
    }
  }
  if (structured.kind > StructuredOutput::Kind::kStructuralTag) {
    return invalid_argument(structured.field + ": unknown kind " +
                            std::to_string(static_cast<int>(structured.kind)));
  }
  if ((structured.kind == StructuredOutput::Kind::kJsonSchema ||
       structured.kind == StructuredOutput::Kind::kRegex ||
       structured.kind == StructuredOutput::Kind::kGrammar ||
       structured.kind == StructuredOutput::Kind::kStructuralTag) &&
      structured.spec.empty()) {
    const char* what = structured.kind == StructuredOutput::Kind::kRegex           ? "pattern"
                       : structured.kind == StructuredOutput::Kind::kGrammar       ? "grammar"
                       : structured.kind == StructuredOutput::Kind::kStructuralTag ? "tag"
                                                                                   : "schema";
    return invalid_argument(structured.field + ": expected a non-empty " + what);
  }
  if (structured.kind == StructuredOutput::Kind::kChoice && structured.choices.empty()) {
    return invalid_argument(structured.field + ": expected at least one choice");
  }
  for (size_t i = 0; i < stop_token_ids.size(); ++i) {
    if (stop_token_ids[i] < 0) {
      return invalid_argument("stop_token_ids[" + std::to_string(i) +
                              "]: expected a token id >= 0, got " +
                              std::to_string(stop_token_ids[i]));
    }
  }
  if (bad_words_token_ids.size() > kMaxBadWordsSequences) {
    return invalid_argument("bad_words_token_ids: expected at most " +
                            std::to_string(kMaxBadWordsSequences) + " sequences, got " +
                            std::to_string(bad_words_token_ids.size()));
  }
  for (size_t i = 0; i < bad_words_token_ids.size(); ++i) {
    const size_t n = bad_words_token_ids[i].size();
    if (n == 0 || n > kMaxBadWordsTokens) {
      return invalid_argument("bad_words_token_ids[" + std::to_string(i) + "]: expected 1 to " +
                              std::to_string(kMaxBadWordsTokens) + " token ids, got " +
                              std::to_string(n));
    }
  }
  return ok_status();
}

Status EngineConfig::validate() const {
  {
    Status s = scheduler.validate();
    if (!s.ok()) return s;
  }
  {
    Status s = kv.validate();
    if (!s.ok()) return invalid_argument("kv: " + s.message());
  }
  if (Status s = sched::validate_speculation(speculation); !s.ok()) {
    return invalid_argument("speculation." + s.message());
  }
  if (max_model_len < 0) {
    return invalid_argument("max_model_len: expected >= 0 (0 = the model's), got " +
                            std::to_string(max_model_len));
  }
  if (max_waiting_requests < 1) {
    return invalid_argument("max_waiting_requests: expected >= 1, got " +
                            std::to_string(max_waiting_requests));
  }
  if (num_sampler_threads < 0 || num_sampler_threads > 64) {
    return invalid_argument("num_sampler_threads: expected 0 (auto) to 64, got " +
                            std::to_string(num_sampler_threads));
  }
  return ok_status();
}

// ---- RequestStream ----

std::optional<RequestOutput> RequestStream::next(std::chrono::milliseconds timeout) {
  std::unique_lock lock(mutex_);
  if (closed_) return std::nullopt;
  if (!cv_.wait_for(lock, timeout, [&] { return !queue_.empty(); })) return std::nullopt;
  RequestOutput out = std::move(queue_.front());
  queue_.pop_front();
  if (out.finished) closed_ = true;
  return out;
}

void RequestStream::attach(std::shared_ptr<StreamSignal> signal) {
  std::lock_guard lock(mutex_);
  signal_ = std::move(signal);
}

void RequestStream::push(RequestOutput output) {
  std::shared_ptr<StreamSignal> signal;
  {
    std::lock_guard lock(mutex_);
    queue_.push_back(std::move(output));
    signal = signal_;
  }
  cv_.notify_all();
  if (signal) signal->notify();
}

uint64_t StreamSignal::generation() const {
  std::lock_guard lock(mutex_);
  return generation_;
}

uint64_t StreamSignal::wait(uint64_t seen, std::chrono::milliseconds timeout) {
  std::unique_lock lock(mutex_);
  cv_.wait_for(lock, timeout, [&] { return generation_ != seen; });
  return generation_;
}

void StreamSignal::notify() {
  {
    std::lock_guard lock(mutex_);
    ++generation_;
  }
  cv_.notify_all();
}

// ---- Engine ----

Result<std::unique_ptr<Engine>> Engine::create(const EngineConfig& config,
                                               std::unique_ptr<model::ForwardBackend> backend,
                                               tokenizer::Tokenizer tokenizer) {
  PS_RETURN_IF_ERROR(config.validate());
  if (!backend) return invalid_argument("backend: expected a ForwardBackend, got null");
  const model::ModelConfig& mc = backend->config();
  if (mc.vocab_size <= 0) {
    return invalid_argument("backend: model vocab_size must be > 0, got " +
                            std::to_string(mc.vocab_size));
  }
  if (mc.sliding_window > 0 && config.max_model_len > mc.sliding_window) {
    return invalid_argument(
        "max_model_len: " + std::to_string(config.max_model_len) +
        " > the model's sliding_window " + std::to_string(mc.sliding_window) +
        ": sliding-window attention is not implemented, so a model with a window is served "
        "within it (expected at most " +
        std::to_string(mc.sliding_window) + ", or 0)");
  }
  PS_ASSIGN_OR_RETURN(auto scheduler, sched::Scheduler::create(config.scheduler, config.kv));
  std::unique_ptr<Engine> engine(new Engine());
  engine->impl_ = std::make_unique<Impl>(std::move(tokenizer));
  Impl& impl = *engine->impl_;
  impl.config = config;
  impl.vocab_size = mc.vocab_size;
  int64_t model_len =
      config.max_model_len > 0 ? config.max_model_len : model::model_context_length(mc);
  if (model_len <= 0) model_len = std::numeric_limits<int32_t>::max();
  impl.max_model_len =
      static_cast<int32_t>(std::min<int64_t>(model_len, std::numeric_limits<int32_t>::max()));
  for (int64_t id : mc.eos_token_ids) impl.eos_token_ids.push_back(static_cast<int32_t>(id));
  impl.grammars = std::make_unique<GrammarCache>(impl.tok, impl.vocab_size, impl.eos_token_ids);
  impl.backend = std::move(backend);
  impl.scheduler = std::move(scheduler);
  impl.sampler_pool = std::make_unique<WorkerPool>(
      config.num_sampler_threads > 0 ? config.num_sampler_threads : default_worker_threads());
  impl.seed_rng = Rng(config.seed);
  impl.start_time = std::chrono::steady_clock::now();
  impl.metrics.ttft_ms = make_latency_histogram();
  impl.metrics.tpot_ms = make_latency_histogram();
  impl.metrics.e2e_ms = make_latency_histogram();
  const kv::KvCacheStats kv_stats = impl.scheduler->kv_cache().stats();
  impl.metrics.pages_total = kv_stats.pages_total;
  impl.metrics.pages_free = kv_stats.pages_free;
  PS_LOG_INFO("engine",
              "started backend={} vocab_size={} max_model_len={} num_pages={} page_size={} "
              "max_num_batched_tokens={} policy={} sampler_threads={}",
              impl.backend->name(), impl.vocab_size, impl.max_model_len, config.kv.num_pages,
              config.kv.page_size, config.scheduler.max_num_batched_tokens,
              sched::scheduling_policy_name(config.scheduler.policy),
              impl.sampler_pool->num_threads());
  impl.thread = std::thread([&impl] { impl.run(); });
  return engine;
}

Engine::~Engine() {
  if (impl_) stop();
}

Result<std::shared_ptr<RequestStream>> Engine::submit(GenerateRequest request) {
  Impl& impl = *impl_;
  auto reject = [&](Status s) -> Status {
    std::lock_guard lock(impl.metrics_mutex);
    ++impl.metrics.requests_rejected;
    return s;
  };
  Status valid = request.sampling.validate();
  if (!valid.ok()) return reject(valid);
  const auto& prompt = request.prompt_token_ids;
  if (prompt.empty())
    return reject(invalid_argument("prompt_token_ids: expected >= 1 token, got 0"));
  for (size_t i = 0; i < prompt.size(); ++i) {
    if (prompt[i] < 0 || prompt[i] >= impl.vocab_size) {
      return reject(invalid_argument(
          "prompt_token_ids[" + std::to_string(i) + "]: expected a token id in [0, " +
          std::to_string(impl.vocab_size) + "), got " + std::to_string(prompt[i])));
    }
  }
  for (size_t i = 0; i < request.sampling.stop_token_ids.size(); ++i) {
    const int32_t id = request.sampling.stop_token_ids[i];
    if (id >= impl.vocab_size) {
      return reject(invalid_argument(
          "stop_token_ids[" + std::to_string(i) + "]: expected a token id in [0, " +
          std::to_string(impl.vocab_size) + "), got " + std::to_string(id)));
    }
  }
  for (const auto& [id, bias] : request.sampling.logit_bias) {
    if (id >= impl.vocab_size) {
      return reject(invalid_argument("logit_bias[" + std::to_string(id) +
                                     "]: expected a token id in [0, " +
                                     std::to_string(impl.vocab_size) + ")"));
    }
  }
  if (request.priority != 0 && impl.config.scheduler.policy != sched::SchedulingPolicy::kPriority) {
    return reject(invalid_argument(
        "priority: " + std::to_string(request.priority) +
        " needs the priority scheduling policy (--policy priority); this engine schedules " +
        std::string(sched::scheduling_policy_name(impl.config.scheduler.policy))));
  }
  const int64_t total = static_cast<int64_t>(prompt.size()) + request.sampling.max_tokens;
  if (total > impl.max_model_len) {
    return reject(invalid_argument(
        "max_tokens: prompt (" + std::to_string(prompt.size()) + " tokens) + max_tokens (" +
        std::to_string(request.sampling.max_tokens) + ") = " + std::to_string(total) +
        " exceeds max_model_len " + std::to_string(impl.max_model_len)));
  }
  if (!std::isfinite(request.arrival_time_ms)) {
    return reject(invalid_argument("arrival_time_ms: expected a finite number"));
  }
  std::shared_ptr<const grammar::Grammar> constraint;
  if (request.sampling.structured.active()) {
    Result<std::shared_ptr<const grammar::Grammar>> g =
        impl.grammars->get(request.sampling.structured);
    if (!g.ok()) return reject(g.status());
    constraint = std::move(*g);
  }
  if (!request.sampling.allowed_token_ids.empty()) {
    Result<std::shared_ptr<const grammar::Grammar>> g =
        grammar::Grammar::restrict_tokens(std::move(constraint), impl.grammars->shared_vocabulary(),
                                          request.sampling.allowed_token_ids);
    if (!g.ok()) return reject(g.status());
    constraint = std::move(*g);
  }
  if (!request.sampling.bad_words_token_ids.empty()) {
    Result<std::shared_ptr<const grammar::Grammar>> g =
        grammar::Grammar::ban_sequences(std::move(constraint), impl.grammars->shared_vocabulary(),
                                        request.sampling.bad_words_token_ids);
    if (!g.ok()) return reject(g.status());
    constraint = std::move(*g);
  }
  std::shared_ptr<RequestStream> stream;
  {
    std::lock_guard lock(impl.mutex);
    if (impl.draining || impl.stopping) {
      return reject(failed_precondition("engine is draining: not accepting requests"));
    }
    const int64_t waiting = static_cast<int64_t>(impl.inbox.size()) + impl.waiting_snapshot;
    if (waiting >= impl.config.max_waiting_requests) {
      return reject(resource_exhausted("waiting queue is full (" + std::to_string(waiting) +
                                       " >= max_waiting_requests " +
                                       std::to_string(impl.config.max_waiting_requests) + ")"));
    }
    const RequestId id = impl.next_id++;
    const uint64_t seed =
        request.sampling.seed.has_value() ? *request.sampling.seed : impl.seed_rng.next_u64();
    stream = std::make_shared<RequestStream>(id);
    impl.inbox.push_back(
        Impl::Pending{id, std::move(request), stream, seed, std::move(constraint)});
    ++impl.num_live;
  }
  impl.wake_cv.notify_all();
  return stream;
}

void Engine::cancel(RequestId id) {
  {
    std::lock_guard lock(impl_->mutex);
    impl_->cancels.push_back(id);
  }
  impl_->wake_cv.notify_all();
}

EngineMetrics Engine::metrics() const {
  int64_t inbox_size = 0;
  {
    std::lock_guard lock(impl_->mutex);
    inbox_size = static_cast<int64_t>(impl_->inbox.size());
  }
  std::lock_guard lock(impl_->metrics_mutex);
  EngineMetrics m = impl_->metrics;
  m.num_waiting += inbox_size;
  return m;
}

const model::ModelConfig& Engine::model_config() const { return impl_->backend->config(); }
int32_t Engine::max_model_len() const { return impl_->max_model_len; }
const tokenizer::Tokenizer& Engine::tokenizer() const { return impl_->tok; }
double Engine::engine_now_ms() const { return impl_->now_ms(); }

void Engine::drain(std::chrono::milliseconds grace) {
  Impl& impl = *impl_;
  std::unique_lock lock(impl.mutex);
  impl.draining = true;
  if (!impl.idle_cv.wait_for(lock, grace, [&] { return impl.num_live == 0; })) {
    PS_LOG_WARN("engine", "drain grace of {} ms over: cancelling {} live requests", grace.count(),
                impl.num_live);
    impl.cancel_all = true;
    impl.wake_cv.notify_all();
    impl.idle_cv.wait(lock, [&] { return impl.num_live == 0; });
  }
}

void Engine::stop() {
  Impl& impl = *impl_;
  {
    std::lock_guard lock(impl.mutex);
    impl.draining = true;
    impl.stopping = true;
    impl.cancel_all = true;
  }
  impl.wake_cv.notify_all();
  if (impl.thread.joinable()) impl.thread.join();
}

}  // namespace packserve::engine
