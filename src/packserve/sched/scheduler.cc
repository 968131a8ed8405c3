// scheduler.cc: see scheduler.h for the step anatomy, preemption and the failure contract.
#include "packserve/sched/scheduler.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <utility>

#include "packserve/common/log.h"
#include "packserve/kv/block_hash.h"
#include "packserve/sched/ngram_proposer.h"
#include "packserve/sched/scheduler_state.h"

namespace packserve::sched {

Result<std::unique_ptr<Scheduler>> Scheduler::create(const SchedulerConfig& config,
                                                     const kv::KvCacheConfig& kv_config) {
  PS_RETURN_IF_ERROR(config.validate());
  PS_RETURN_IF_ERROR(kv_config.validate());
  return std::make_unique<Scheduler>(config, kv_config);
}

Scheduler::Scheduler(const SchedulerConfig& config, const kv::KvCacheConfig& kv_config)
    : config_(config), kv_(kv_config) {
  const Status valid = config.validate();
  PS_CHECK(valid.ok()) << valid.to_string();
  if (config_.policy == SchedulingPolicy::kAimd) {
    aimd_ = std::make_unique<AimdController>(config_.aimd);
  }
  PS_LOG_INFO("sched",
              "config policy={} packing={} max_num_batched_tokens={} max_num_running_requests={} "
              "max_prefill_chunk_tokens={} num_pages={} page_size={} prefix_caching={}",
              scheduling_policy_name(config_.policy), packing_algorithm_name(config_.packing),
              config_.max_num_batched_tokens, config_.max_num_running_requests,
              config_.max_prefill_chunk_tokens, kv_config.num_pages, kv_config.page_size,
              kv_config.enable_prefix_caching);
}

Scheduler::~Scheduler() = default;

// ---- requests in and out ----

Status Scheduler::add_request(Request request) {
  if (requests_.count(request.id) != 0) {
    return invalid_argument(fmt::format("req={}: id: already live", request.id));
  }
  if (request.prompt_token_ids.empty()) {
    return invalid_argument(
        fmt::format("req={}: prompt_token_ids: expected >= 1 token, got 0", request.id));
  }
  if (request.prompt_token_ids.size() >
      static_cast<size_t>(std::numeric_limits<int32_t>::max() / 4)) {
    return invalid_argument(fmt::format("req={}: prompt_token_ids: {} tokens is too many",
                                        request.id, request.prompt_token_ids.size()));
  }
  if (request.max_output_tokens < 1 ||
      static_cast<int64_t>(request.max_output_tokens) +
              static_cast<int64_t>(request.prompt_token_ids.size()) >
          std::numeric_limits<int32_t>::max() / 2) {
    return invalid_argument(fmt::format(
        "req={}: max_output_tokens: expected >= 1 and prompt + max_output_tokens <= {}, got {}",
        request.id, std::numeric_limits<int32_t>::max() / 2, request.max_output_tokens));
  }
  if (!std::isfinite(request.arrival_time_ms)) {
    return invalid_argument(fmt::format("req={}: arrival_time_ms: expected a finite time, got {}",
                                        request.id, request.arrival_time_ms));
  }
  if (request.priority != 0 && config_.policy != SchedulingPolicy::kPriority) {
    return invalid_argument(
        fmt::format("req={}: priority: {} needs the priority scheduling policy (this one is {})",
                    request.id, request.priority, scheduling_policy_name(config_.policy)));
  }
  if (const Status s = validate_speculation(request.speculation); !s.ok()) {
    return invalid_argument(fmt::format("req={}: speculation.{}", request.id, s.message()));
  }
  auto state = std::make_unique<RequestState>();
  state->speculation = request.speculation;
  state->id = request.id;
  state->serial = next_serial_++;
  state->arrival_time_ms = request.arrival_time_ms;
  state->num_prompt_tokens = static_cast<int32_t>(request.prompt_token_ids.size());
  state->compute_whole_prompt = request.compute_whole_prompt;
  state->priority = request.priority;
  state->tokens = std::move(request.prompt_token_ids);
  // Room for typical outputs without reallocating; long ones grow the vector geometrically.
  state->tokens.reserve(state->tokens.size() +
                        static_cast<size_t>(std::min(request.max_output_tokens, 1024)));
  state->stop_token_ids = std::move(request.stop_token_ids);
  state->max_output_tokens = request.max_output_tokens;
  const QueueEntry entry{state->id, state->serial, 0, state->priority};
  if (aimd_) {
    state->where = Where::kStaged;
    staged_.push_back(entry);
    ++num_staged_;
    last_arrival_ms_ = std::max(last_arrival_ms_, state->arrival_time_ms);
    aimd_->observe_arrival(last_arrival_ms_);
  } else {
    state->where = Where::kWaiting;
    enqueue_waiting(entry, /*front=*/false);
    ++num_waiting_;
  }
  requests_.emplace(request.id, std::move(state));
  return ok_status();
}

Status Scheduler::cancel(RequestId id, double now_ms) {
  const auto it = requests_.find(id);
  if (it == requests_.end() || it->second->where == Where::kFinished) {
    return invalid_argument(fmt::format("req={}: cancel of an unknown request", id));
  }
  RequestState& state = *it->second;
  if (state.batch_index >= 0) {
    // Its row in the pending batch is ignored by commit(); the engine may still compute it
    // into pages that are only reused after the step ends.
    batch_states_[static_cast<size_t>(state.batch_index)] = nullptr;
    state.batch_index = -1;
  }
  for (size_t i = 0; i < reissue_owner_.size();) {
    if (reissue_owner_[i] == id) {
      reissue_owner_.erase(reissue_owner_.begin() + static_cast<std::ptrdiff_t>(i));
      reissue_copies_.erase(reissue_copies_.begin() + static_cast<std::ptrdiff_t>(i));
    } else {
      ++i;
    }
  }
  finish(state, FinishReason::kCancelled, now_ms);
  cleanup_finished();
  run_invariant_check_if_enabled();
  return ok_status();
}

void Scheduler::finish(RequestState& state, FinishReason reason, double time_ms) {
  switch (state.where) {
    case Where::kRunning:
      if (kv_.contains(state.id)) {
        const Status freed = kv_.free_request(state.id);
        PS_CHECK(freed.ok()) << freed.to_string();
      }
      --num_running_live_;
      break;
    case Where::kWaiting:
      --num_waiting_;
      break;
    case Where::kStaged:
      --num_staged_;
      break;
    case Where::kFinished:
      PS_CHECK(false) << "req=" << state.id << " finished twice";
  }
  state.where = Where::kFinished;
  FinishedRequest done;
  done.id = state.id;
  done.reason = reason;
  done.arrival_time_ms = state.arrival_time_ms;
  done.first_token_time_ms = state.first_token_time_ms;
  done.finish_time_ms = time_ms;
  done.num_prompt_tokens = state.num_prompt_tokens;
  done.num_output_tokens = state.num_output_tokens;
  done.num_preemptions = state.num_preemptions;
  done.num_cached_prompt_tokens = state.num_cached_prompt_tokens;
  pending_events_.finished.push_back(done);
  ++stats_.num_finished;
  if (reason == FinishReason::kCancelled) ++stats_.num_cancelled;
  if (reason == FinishReason::kKvExhausted) {
    ++stats_.num_kv_exhausted;
    PS_LOG_WARN("sched", "req={} finished reason=kv_exhausted tokens={} num_pages={}", state.id,
                state.num_tokens(), kv_.config().num_pages);
  } else {
    PS_LOG_DEBUG("sched", "req={} finished reason={} output_tokens={} preemptions={}", state.id,
                 finish_reason_name(reason), state.num_output_tokens, state.num_preemptions);
  }
  graveyard_.push_back(state.id);
}

void Scheduler::cleanup_finished() {
  if (graveyard_.empty()) return;
  running_.erase(std::remove_if(running_.begin(), running_.end(),
                                [](const RequestState* s) { return s->where == Where::kFinished; }),
                 running_.end());
  for (const RequestId id : graveyard_) requests_.erase(id);
  graveyard_.clear();
}

Scheduler::RequestState* Scheduler::live_entry(const QueueEntry& entry) {
  const auto it = requests_.find(entry.id);
  if (it == requests_.end() || it->second->serial != entry.serial ||
      it->second->where == Where::kFinished) {
    return nullptr;
  }
  return it->second.get();
}

std::optional<double> Scheduler::staging_deadline_ms() const {
  if (!aimd_ || num_staged_ == 0) return std::nullopt;
  for (const QueueEntry& e : staged_) {
    const auto it = requests_.find(e.id);
    if (it != requests_.end() && it->second->serial == e.serial &&
        it->second->where == Where::kStaged) {
      return it->second->arrival_time_ms + config_.aimd.staging_timeout_ms;
    }
  }
  return std::nullopt;
}

// ---- schedule ----

Result<const ScheduledBatch*> Scheduler::schedule(double now_ms) {
  if (batch_pending_) {
    return invalid_argument("schedule: the previous batch is still pending; call commit() first");
  }
  if (!std::isfinite(now_ms) || (have_now_ && now_ms < last_now_ms_)) {
    return invalid_argument(
        fmt::format("schedule: now_ms = {} must be finite and >= the previous now_ms = {}", now_ms,
                    last_now_ms_));
  }
  have_now_ = true;
  last_now_ms_ = now_ms;
  batch_.step_index = stats_.num_steps++;
  batch_.start_time_ms = now_ms;
  batch_.sequences.clear();
  batch_states_.clear();
  batch_.page_copies.swap(reissue_copies_);
  copy_owner_.swap(reissue_owner_);
  reissue_copies_.clear();
  reissue_owner_.clear();
  budget_left_ = config_.max_num_batched_tokens;

  const int64_t preemptions_before = stats_.num_preemptions;
  if (aimd_) release_staged(now_ms);
  schedule_running(/*decode_pass=*/true);
  round_up_drafts();
  schedule_running(/*decode_pass=*/false);
  // A step that had to preempt is short of pages: admitting now would only readmit the victim
  // into the pages the running requests need next (thrashing).
  if (stats_.num_preemptions == preemptions_before) admit_waiting();
  finalize_batch();
  cleanup_finished();
  batch_pending_ = true;

  if (!batch_.empty()) ++stats_.num_nonempty_steps;
  stats_.num_decode_rows += batch_.num_decode_rows;
  stats_.num_prefill_tokens += batch_.num_prefill_tokens;
  if (spdlog::should_log(spdlog::level::debug)) {
    const kv::KvCacheStats kv = kv_.stats();
    PS_LOG_DEBUG("sched",
                 "step={} now_ms={:.3f} decode_rows={} prefill_tokens={} running={} waiting={} "
                 "staged={} pages_free={} pages_cached={} copies={}",
                 batch_.step_index, now_ms, batch_.num_decode_rows, batch_.num_prefill_tokens,
                 num_running_live_, num_waiting_, num_staged_, kv.pages_free, kv.pages_cached,
                 batch_.page_copies.size());
  }
  run_invariant_check_if_enabled();
  return &batch_;
}

void Scheduler::release_staged(double now_ms) {
  while (!staged_.empty() && live_entry(staged_.front()) == nullptr) staged_.pop_front();
  AdmissionInput input;
  input.now_ms = now_ms;
  input.num_staged = num_staged_;
  input.oldest_staged_wait_ms =
      staged_.empty() ? 0.0 : std::max(0.0, now_ms - live_entry(staged_.front())->arrival_time_ms);
  input.utilization = last_utilization_;
  const AdmissionDecision decision = aimd_->decide(input);
  if (decision.num_release <= 0) return;

  std::vector<RequestState*> released;
  std::vector<int64_t> lengths_tokens;
  while (!staged_.empty() && static_cast<int64_t>(released.size()) < decision.num_release) {
    RequestState* s = live_entry(staged_.front());
    staged_.pop_front();
    if (s == nullptr) continue;
    released.push_back(s);
    lengths_tokens.push_back(s->num_tokens());
  }
  PackLimits limits;
  limits.capacity_tokens =
      config_.prefill_bin_tokens > 0 ? config_.prefill_bin_tokens : config_.max_num_batched_tokens;
  limits.max_items_per_bin = config_.prefill_bin_max_requests;
  Result<PackResult> packed = pack_prefill(config_.packing, lengths_tokens, limits);
  PS_CHECK(packed.ok()) << packed.status().to_string();
  for (const PackedBin& bin : packed->bins) {
    const uint64_t group = next_group_++;
    for (const int32_t index : bin.item_indices) {
      RequestState* s = released[static_cast<size_t>(index)];
      s->where = Where::kWaiting;
      waiting_.push_back(QueueEntry{s->id, s->serial, group});
    }
  }
  const int64_t n = static_cast<int64_t>(released.size());
  num_staged_ -= n;
  num_waiting_ += n;
  ++stats_.num_aimd_releases;
  PS_LOG_DEBUG("sched", "aimd release requests={} bins={} reason={} threshold={}", n,
               packed->bins.size(), admission_reason_name(decision.reason), aimd_->threshold());
}

void Scheduler::add_sequence(RequestState& state, bool is_prefill, int32_t num_tokens,
                             int32_t num_drafts) {
  ScheduledSequence seq;
  seq.id = state.id;
  seq.is_prefill = is_prefill;
  seq.start_position = state.num_computed_tokens;
  seq.num_tokens = num_tokens + num_drafts;
  seq.num_draft_tokens = num_drafts;
  seq.samples_token = state.num_computed_tokens + num_tokens == state.num_tokens();
  state.batch_index = static_cast<int32_t>(batch_.sequences.size());
  batch_.sequences.push_back(seq);
  batch_states_.push_back(&state);
  budget_left_ -= seq.num_tokens;
}

void Scheduler::schedule_running(bool decode_pass) {
  const int32_t chunk_cap = config_.max_prefill_chunk_tokens > 0
                                ? config_.max_prefill_chunk_tokens
                                : std::numeric_limits<int32_t>::max();
  // running_ only shrinks from the back (preemption) while this loop runs.
  for (size_t i = 0; i < running_.size() && budget_left_ > 0; ++i) {
    RequestState& s = *running_[i];
    if (s.where != Where::kRunning || s.batch_index >= 0) continue;
    if (s.is_decode() != decode_pass) continue;
    const int32_t remaining = s.num_tokens() - s.num_computed_tokens;
    const int32_t k = decode_pass ? 1 : std::min({remaining, budget_left_, chunk_cap});
    if (!allocate_or_preempt(s, k)) continue;
    add_sequence(s, !decode_pass, k, decode_pass ? propose_drafts(s) : 0);
  }
}

// A row's drafts after its own slot: they leave one token of max_output_tokens for the
// verifier's choice after them and fit `budget` rows.
int32_t Scheduler::draft_cap(const RequestState& s, int32_t budget) const {
  return std::min({s.speculation.num_speculative_tokens,
                   s.max_output_tokens - s.num_output_tokens - 1, budget});
}

int32_t Scheduler::propose_drafts(RequestState& s) {
  // The drafts get slots without preempting.
  const int32_t cap = draft_cap(s, budget_left_ - 1);
  if (cap <= 0) return 0;
  propose_ngram_drafts(s.tokens, s.speculation.prompt_lookup_min, s.speculation.prompt_lookup_max,
                       cap, scratch_drafts_);
  if (scratch_drafts_.empty()) return 0;
  // A lookup that found fewer than cap tokens (its occurrence near the end) is padded with
  // its last draft: steps then have few distinct row counts (CUDA graph shapes, each captured
  // once), and a padded draft is verified like any other.
  scratch_drafts_.resize(static_cast<size_t>(cap), scratch_drafts_.back());
  const int32_t drafts = cap;
  if (!kv_.allocate_slots(s.id, 1 + drafts, &batch_.page_copies).ok()) return 0;
  copy_owner_.resize(batch_.page_copies.size(), s.id);
  s.spec_rows.assign(1, s.tokens.back());
  s.spec_rows.insert(s.spec_rows.end(), scratch_drafts_.begin(), scratch_drafts_.end());
  return drafts;
}

void Scheduler::round_up_drafts() {
  int32_t total = 0;
  for (const ScheduledSequence& seq : batch_.sequences) total += seq.num_draft_tokens;
  if (total == 0) return;
  const int32_t target = (total + kDraftRowsMultiple - 1) / kDraftRowsMultiple * kDraftRowsMultiple;
  for (size_t i = 0; i < batch_.sequences.size() && total < target; ++i) {
    ScheduledSequence& seq = batch_.sequences[i];
    RequestState* s = batch_states_[i];
    if (s == nullptr || seq.is_prefill || seq.num_draft_tokens > 0) continue;
    const int32_t add = std::min(draft_cap(*s, budget_left_), target - total);
    if (add <= 0 || !kv_.allocate_slots(s->id, 1 + add, &batch_.page_copies).ok()) continue;
    copy_owner_.resize(batch_.page_copies.size(), s->id);
    s->spec_rows.assign(static_cast<size_t>(1 + add), s->tokens.back());
    seq.num_tokens += add;
    seq.num_draft_tokens = add;
    budget_left_ -= add;
    total += add;
  }
}

Scheduler::RequestState* Scheduler::newest_live_running() {
  while (!running_.empty() && running_.back()->where != Where::kRunning) running_.pop_back();
  return running_.empty() ? nullptr : running_.back();
}

bool Scheduler::allocate_or_preempt(RequestState& state, int32_t num_new_tokens) {
  for (;;) {
    const Status allocated = kv_.allocate_slots(state.id, num_new_tokens, &batch_.page_copies);
    if (allocated.ok()) {
      copy_owner_.resize(batch_.page_copies.size(), state.id);
      return true;
    }
    PS_CHECK(allocated.code() == StatusCode::kResourceExhausted) << allocated.to_string();
    RequestState* victim = newest_live_running();
    PS_CHECK(victim != nullptr) << "req=" << state.id << " is running but running_ is empty";
    if (victim == &state) {
      if (num_running_live_ == 1) {
        // Alone and still out of pages: it can never fit in this pool.
        finish(state, FinishReason::kKvExhausted, batch_.start_time_ms);
      } else {
        preempt(state);
      }
      return false;
    }
    preempt(*victim);
  }
}

void Scheduler::withdraw_from_batch(RequestState& state) {
  if (state.batch_index < 0) return;
  ScheduledSequence& seq = batch_.sequences[static_cast<size_t>(state.batch_index)];
  budget_left_ += seq.num_tokens;
  seq.num_tokens = 0;  // dropped by finalize_batch()
  batch_states_[static_cast<size_t>(state.batch_index)] = nullptr;
  state.batch_index = -1;
  drop_copies_of(state.id);
}

void Scheduler::drop_copies_of(RequestId id) {
  size_t out = 0;
  for (size_t i = 0; i < batch_.page_copies.size(); ++i) {
    if (copy_owner_[i] == id) continue;
    batch_.page_copies[out] = batch_.page_copies[i];
    copy_owner_[out] = copy_owner_[i];
    ++out;
  }
  batch_.page_copies.resize(out);
  copy_owner_.resize(out);
}

void Scheduler::preempt(RequestState& victim) {
  PS_CHECK(!running_.empty() && running_.back() == &victim)
      << "req=" << victim.id << " preempted but is not the most recently admitted";
  withdraw_from_batch(victim);
  const Status freed = kv_.free_request(victim.id);
  PS_CHECK(freed.ok()) << freed.to_string();
  running_.pop_back();
  --num_running_live_;
  victim.where = Where::kWaiting;
  victim.num_computed_tokens = 0;
  ++victim.num_preemptions;
  enqueue_waiting(QueueEntry{victim.id, victim.serial, aimd_ ? next_group_++ : 0, victim.priority},
                  /*front=*/true);
  ++num_waiting_;
  pending_events_.preempted.push_back(victim.id);
  ++stats_.num_preemptions;
  PS_LOG_DEBUG("sched", "req={} preempted tokens={} output_tokens={} pages_allocatable={}",
               victim.id, victim.num_tokens(), victim.num_output_tokens,
               kv_.num_allocatable_pages());
}

void Scheduler::enqueue_waiting(const QueueEntry& entry, bool front) {
  if (config_.policy != SchedulingPolicy::kPriority) {
    if (front) {
      waiting_.push_front(entry);
    } else {
      waiting_.push_back(entry);
    }
    return;
  }
  // Before the first entry that comes later; most arrivals share a priority and land at the
  // back after one comparison. Stale entries keep their keys, so the order holds.
  const auto later = [&entry](const QueueEntry& e) {
    return e.priority > entry.priority || (e.priority == entry.priority && e.serial > entry.serial);
  };
  auto it = waiting_.end();
  while (it != waiting_.begin() && later(*std::prev(it))) --it;
  waiting_.insert(it, entry);
}

void Scheduler::add_running(RequestState* state) {
  auto it = running_.end();
  if (config_.policy == SchedulingPolicy::kPriority) {
    while (it != running_.begin() && (*std::prev(it))->priority > state->priority) --it;
  }
  running_.insert(it, state);
}

void Scheduler::admit_waiting() {
  const int32_t chunk_cap = config_.max_prefill_chunk_tokens > 0
                                ? config_.max_prefill_chunk_tokens
                                : std::numeric_limits<int32_t>::max();
  bool have_group = false;
  uint64_t group = 0;
  scratch_waits_.clear();
  while (budget_left_ > 0 && !waiting_.empty() &&
         num_running_live_ < config_.max_num_running_requests) {
    const QueueEntry entry = waiting_.front();
    RequestState* s = live_entry(entry);
    if (s == nullptr) {
      waiting_.pop_front();
      continue;
    }
    if (have_group && entry.group != group) break;
    if (kv_.pages_for_tokens(s->num_tokens()) > kv_.config().num_pages) {
      waiting_.pop_front();
      finish(*s, FinishReason::kKvExhausted, batch_.start_time_ms);
      continue;
    }
    if (waits_for_prefix(*s)) {
      // Put back at its place below; the requests behind it are considered.
      waiting_.pop_front();
      scratch_waits_.push_back(entry);
      ++stats_.num_prefix_waits;
      continue;
    }
    Result<kv::AdmitResult> admitted =
        kv_.add_request(s->id, s->tokens, std::min(budget_left_, chunk_cap), &batch_.page_copies,
                        s->adopts_cached());
    if (!admitted.ok()) {
      PS_CHECK(admitted.status().code() == StatusCode::kResourceExhausted)
          << admitted.status().to_string();
      if (num_running_live_ == 0) {
        // Nothing holds pages, so it cannot fit alone (e.g. a fully cached prompt as large as
        // the pool, whose recomputed last token needs one more page for its copy).
        waiting_.pop_front();
        finish(*s, FinishReason::kKvExhausted, batch_.start_time_ms);
        continue;
      }
      break;  // head-of-line: nobody behind it overtakes it
    }
    copy_owner_.resize(batch_.page_copies.size(), s->id);
    waiting_.pop_front();
    --num_waiting_;
    have_group = true;
    group = entry.group;
    s->where = Where::kRunning;
    s->num_computed_tokens = admitted->num_cached_tokens;
    if (!s->admitted_once) {
      s->admitted_once = true;
      s->num_cached_prompt_tokens = std::min(admitted->num_cached_tokens, s->num_prompt_tokens);
    }
    add_running(s);
    ++num_running_live_;
    ++stats_.num_admissions;
    PS_LOG_DEBUG("sched", "req={} admitted tokens={} cached_tokens={} queue_ms={:.3f}", s->id,
                 s->num_tokens(), admitted->num_cached_tokens,
                 batch_.start_time_ms - s->arrival_time_ms);
    add_sequence(*s, !s->is_decode(), admitted->num_new_tokens);
  }
  for (auto it = scratch_waits_.rbegin(); it != scratch_waits_.rend(); ++it) {
    waiting_.push_front(*it);
  }
}

bool Scheduler::waits_for_prefix(RequestState& state) {
  if (config_.prefix_wait_min_tokens == 0 || !kv_.has_pending_pages() || !state.adopts_cached()) {
    return false;
  }
  const int32_t page_size = kv_.config().page_size;
  if (state.page_keys.size() != static_cast<size_t>(state.num_tokens() / page_size)) {
    kv::full_page_keys(state.tokens, page_size, &state.page_keys);
  }
  const kv::PrefixProbe probe = kv_.probe_prefix(state.page_keys);
  return static_cast<int64_t>(probe.num_pending_pages) * page_size >=
         config_.prefix_wait_min_tokens;
}

void Scheduler::finalize_batch() {
  // Decode rows first, then prefill chunks, each in the order scheduled; withdrawn rows out.
  scratch_sequences_.clear();
  scratch_states_.clear();
  for (int pass = 0; pass < 2; ++pass) {
    const bool want_prefill = pass == 1;
    for (size_t i = 0; i < batch_.sequences.size(); ++i) {
      const ScheduledSequence& seq = batch_.sequences[i];
      if (seq.num_tokens == 0 || batch_states_[i] == nullptr) continue;
      if (seq.is_prefill != want_prefill) continue;
      scratch_sequences_.push_back(seq);
      scratch_states_.push_back(batch_states_[i]);
    }
  }
  batch_.sequences.swap(scratch_sequences_);
  batch_states_.swap(scratch_states_);
  batch_.num_batched_tokens = 0;
  batch_.num_decode_rows = 0;
  batch_.num_prefill_tokens = 0;
  for (size_t i = 0; i < batch_.sequences.size(); ++i) {
    ScheduledSequence& seq = batch_.sequences[i];
    RequestState& s = *batch_states_[i];
    s.batch_index = static_cast<int32_t>(i);
    seq.token_ids = seq.num_draft_tokens > 0 ? std::span<const TokenId>(s.spec_rows)
                                             : std::span<const TokenId>(s.tokens).subspan(
                                                   static_cast<size_t>(seq.start_position),
                                                   static_cast<size_t>(seq.num_tokens));
    Result<std::span<const PageId>> table = kv_.page_table(s.id);
    PS_CHECK(table.ok()) << table.status().to_string();
    seq.page_ids = table->first(static_cast<size_t>(kv_.pages_for_tokens(seq.kv_len())));
    batch_.num_batched_tokens += seq.num_tokens;
    if (seq.is_prefill) {
      batch_.num_prefill_tokens += seq.num_tokens;
    } else {
      ++batch_.num_decode_rows;
    }
  }
  PS_CHECK(batch_.num_batched_tokens <= config_.max_num_batched_tokens)
      << batch_.num_batched_tokens << " > " << config_.max_num_batched_tokens;
}

}  // namespace packserve::sched
