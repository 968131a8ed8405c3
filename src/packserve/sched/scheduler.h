// scheduler.h: the iteration-level scheduler (seed 003: continuous batching, chunked prefill,
// token budget; seed 001 §3.4: staging queue + AIMD admission + prefill packing; issue 3).
//
// Owns: every live request (waiting, staged, running), the KV-cache manager, the AIMD
// controller (policy aimd) and the current step's ScheduledBatch / StepEvents.
//
// One step = schedule(now) -> the caller runs the batch -> commit(output). step() does all
// three with a ModelExecutor. Anatomy of schedule():
//   0. (aimd) ask the AimdController whether to release the staging queue; a released set is
//      packed into bins (prefill_packer.h, `packing`) and appended to the waiting queue, one
//      admission group per bin.
//   1. decode rows: every running request whose prompt is done gets its one row, oldest
//      admission first, while the token budget lasts.
//   2. prefill chunks of running requests still in prefill (or recompute), oldest first; a
//      chunk is min(remaining tokens, budget left, max_prefill_chunk_tokens).
//   3. admission: waiting requests in queue order (preempted ones at the front) while the
//      budget, max_num_running_requests and the KV pool allow; admission stops at the first
//      request that does not fit (head-of-line, which is what makes FCFS starvation-free).
//      No admission in a step that had to preempt: it is short of pages, and admitting would
//      only readmit the victim into pages the running requests need next (thrashing).
//      Under aimd one step admits from one admission group (bin) only.
//      Prefix wait: a waiting request whose next prefix_wait_min_tokens or more prompt tokens
//      (whole pages after its cached ones) are being computed by running requests right now
//      (the KV manager's pending pages) stays in the queue, keeping its place, and the
//      requests behind it are considered; it is admitted once those pages are published and
//      then adopts them instead of computing the same prefix a second time. The wait ends at
//      the latest when their owners commit them or end (preemption, cancel).
// Because decode rows are placed before any prefill, a long prompt never delays a decode row
// by more than the one step it shares (its chunk is bounded by the budget): chunked prefill.
//
// Out of pages (a running request's slots cannot be allocated): preempt the most recently
// admitted running request (it may already be in this step's batch; its row is withdrawn),
// free its pages, put it at the front of the waiting queue keeping its generated tokens, and
// retry; if the requester is itself the most recently admitted it is preempted. On
// readmission it recomputes prompt + generated tokens (often mostly from the prefix cache)
// and its next sampled token continues its output. A request that cannot fit even alone
// (ceil(known tokens / page_size) > num_pages at admission, or running alone and still out of
// pages, or failing admission while nothing runs) is
// finished with FinishReason::kKvExhausted instead of looping: a step never fails for lack of
// memory.
//
// Finished requests (stop token, max_output_tokens, cancel, kv_exhausted) leave at commit() /
// cancel() and their pages return at once.
//
// Failure contract: bad input (invalid request, duplicate live id, unknown id for cancel,
// now_ms going backwards, schedule() while a batch is pending, commit() without one, an
// output of the wrong size) -> kInvalidArgument with nothing changed.
// Invariants (check_invariants(); run after every step in debug builds or with
// check_invariants_every_step): the KV manager's invariants; every running request holds a
// page table covering its computed tokens; waiting/staged requests hold none; running count
// <= max_num_running_requests.
// Cost: schedule() and commit() are O(running requests + admitted requests + batch tokens of
// bookkeeping), never O(all requests): the waiting queue is only read up to the first
// request that does not fit (past the ones the prefix wait holds; each hashes its prompt's
// pages once, then probes O(shared pages) per step). Under kPriority an arrival or a preempted
// request is inserted at its place in the waiting queue, and an admission in the running list:
// O(entries of a later priority), one comparison when priorities are equal.
// Thread-safety: none; one thread owns the scheduler.
#pragma once

#include <cstdint>
#include <deque>
#include <memory>
#include <optional>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "packserve/common/status.h"
#include "packserve/kv/kv_cache.h"
#include "packserve/sched/admission_aimd.h"
#include "packserve/sched/batch.h"
#include "packserve/sched/prefill_packer.h"
#include "packserve/sched/request.h"

namespace packserve::sched {

enum class SchedulingPolicy {
  kFcfs,  // new requests go straight to the waiting queue, admitted in arrival order
  kAimd,  // new requests wait in the staging queue until the AIMD controller releases them
  // vLLM's priority policy: as fcfs, but the waiting queue is ordered by (Request::priority,
  // arrival), running requests get their rows in (priority, admission) order, and the one
  // preempted when pages run out is the lowest-priority running request (the most recently
  // admitted of those). A waiting request never preempts a running one.
  kPriority,
};
std::string_view scheduling_policy_name(SchedulingPolicy policy);  // "fcfs" | "aimd" | "priority"
Result<SchedulingPolicy> parse_scheduling_policy(std::string_view name);

// Every field maps one-to-one to a `packserve simulate` flag of the same name (dashes for
// underscores).
struct SchedulerConfig {
  // Admission policy.
  SchedulingPolicy policy = SchedulingPolicy::kFcfs;
  // How an AIMD release is split into admission groups (bins of prefill_bin_tokens): none
  // (arrival order), ffd, dp. Ignored under fcfs.
  PackingAlgorithm packing = PackingAlgorithm::kNone;
  // Token budget: query rows (decode rows + prefill chunk tokens) per step. >= 1.
  int32_t max_num_batched_tokens = 8192;
  // Requests holding KV (in prefill or decode) at once. >= 1.
  int32_t max_num_running_requests = 256;
  // Largest prefill chunk of one request in one step, tokens; 0 = only the token budget
  // limits it. >= 0.
  int32_t max_prefill_chunk_tokens = 0;
  // AIMD packing bin capacity T_max, tokens; 0 = max_num_batched_tokens. >= 0.
  int32_t prefill_bin_tokens = 0;
  // AIMD packing bin size limit B_max, requests; 0 = unlimited. >= 0.
  int32_t prefill_bin_max_requests = 0;
  // Prefix wait (see above): a waiting request whose next this-many prompt tokens or more are
  // being computed by running requests waits for them; 0 = never wait. >= 0. Needs prefix
  // caching.
  int32_t prefix_wait_min_tokens = 256;
  // The AIMD controller (policy aimd only; validated only then).
  AimdConfig aimd;
  // Run check_invariants() after every schedule() and commit() and abort (PS_CHECK) on a
  // violation. Always on in builds without NDEBUG. O(num_pages) per step: tests and debugging.
  bool check_invariants_every_step = false;

  // Names the first bad field ("scheduler.max_num_batched_tokens: ..."), its value and the
  // expected range.
  Status validate() const;
};

struct SchedulerStats {
  int64_t num_steps = 0;  // schedule() calls
  int64_t num_nonempty_steps = 0;
  int64_t num_admissions = 0;  // includes readmissions after preemption
  int64_t num_preemptions = 0;
  int64_t num_finished = 0;  // all reasons, including cancelled
  int64_t num_cancelled = 0;
  int64_t num_kv_exhausted = 0;
  int64_t num_prefill_tokens = 0;     // scheduled prefill/recompute rows
  int64_t num_recomputed_tokens = 0;  // of those, tokens computed again after a preemption
  int64_t num_decode_rows = 0;
  int64_t num_output_tokens = 0;
  int64_t num_aimd_releases = 0;  // staging-queue releases (policy aimd)
  int64_t num_prefix_waits = 0;   // steps x waiting requests held back by the prefix wait
  // Speculative decoding (Request::speculation): drafts scheduled, and of those accepted.
  int64_t num_draft_tokens = 0;
  int64_t num_accepted_draft_tokens = 0;
};

class Scheduler {
 public:
  // Validates both configs.
  static Result<std::unique_ptr<Scheduler>> create(const SchedulerConfig& config,
                                                   const kv::KvCacheConfig& kv_config);
  // Both configs must be valid; checked with PS_CHECK.
  Scheduler(const SchedulerConfig& config, const kv::KvCacheConfig& kv_config);
  ~Scheduler();
  Scheduler(const Scheduler&) = delete;
  Scheduler& operator=(const Scheduler&) = delete;

  // Queues a new request (staging queue under aimd, waiting queue under fcfs). Call it when the
  // request arrives (arrival_time_ms <= the next schedule()'s now_ms): a queued request is
  // eligible at once, and aimd counts it as an arrival now. Allowed at any time, also between
  // schedule() and commit(). Errors (kInvalidArgument, nothing changed):
  // id already live, empty prompt, max_output_tokens < 1, non-finite arrival time, a priority
  // other than 0 under a policy other than kPriority.
  Status add_request(Request request);

  // Ends request `id` wherever it is (staged, waiting, running, in the pending batch): its
  // pages return now; a FinishedRequest with kCancelled appears in the next returned events.
  // If it is in the pending batch, commit() ignores its row. Errors: unknown id
  // (kInvalidArgument).
  Status cancel(RequestId id, double now_ms);

  // Forms the next batch at time now_ms (non-decreasing across calls). The batch may be empty
  // (nothing runnable); commit() must still follow. The pointer is valid until commit().
  // Errors: a batch is already pending, now_ms decreased (kInvalidArgument).
  Result<const ScheduledBatch*> schedule(double now_ms);

  // Applies the pending batch's results: marks KV computed (publishing full pages), appends
  // sampled tokens, finishes requests (stop token, max_output_tokens) and returns their pages.
  // Returns the events since the previous commit(), including cancellations and this step's
  // preemptions (valid until the next commit()).
  // Errors: no pending batch, sampled_token_ids.size() != sequences.size(), negative or
  // non-finite duration (kInvalidArgument, batch still pending).
  Result<const StepEvents*> commit(const StepOutput& output);

  // Drops the pending batch after the executor failed: nothing is marked computed; allocated
  // slots stay with their requests and the batch's page copies are issued again with the next
  // batch. Errors: no pending batch (kInvalidArgument).
  Status abort_step();

  // schedule(now_ms), then executor.execute() unless the batch is empty (duration 0), then
  // commit(). An executor error is returned after abort_step().
  Result<const StepEvents*> step(double now_ms, ModelExecutor& executor);

  // ---- queries ----
  bool has_unfinished_requests() const { return !requests_.empty(); }
  int64_t num_unfinished_requests() const { return static_cast<int64_t>(requests_.size()); }
  int64_t num_running() const { return num_running_live_; }
  int64_t num_waiting() const { return num_waiting_; }  // waiting queue, excluding staged
  int64_t num_staged() const { return num_staged_; }    // staging queue (aimd)
  bool batch_pending() const { return batch_pending_; }
  // Under aimd with staged requests: when the staging timeout of the oldest one fires, so an
  // event-driven caller with nothing else to do knows when to call schedule() again.
  std::optional<double> staging_deadline_ms() const;
  const SchedulerStats& stats() const { return stats_; }
  const SchedulerConfig& config() const { return config_; }
  const kv::KvCacheManager& kv_cache() const { return kv_; }
  const AimdController* aimd() const { return aimd_.get(); }

  // KV invariants plus the scheduler's own (see the header comment); kInternal naming the
  // first violation.
  Status check_invariants() const;

 private:
  struct RequestState;
  struct QueueEntry {
    RequestId id = 0;
    uint64_t serial = 0;   // RequestState::serial; a mismatch marks a stale (ended) entry
    uint64_t group = 0;    // admission group (aimd bin); 0 under fcfs
    int32_t priority = 0;  // kPriority: the waiting queue is sorted by (priority, serial)
  };
  // kPriority: `entry` into the waiting queue at its place; any other policy: at the back
  // (front: at the front, as a preempted request goes).
  void enqueue_waiting(const QueueEntry& entry, bool front);
  // Appends `state` to running_ (kPriority: after the running requests of its priority or a
  // higher one, so that running_.back() is always the victim).
  void add_running(RequestState* state);

  void release_staged(double now_ms);
  void schedule_running(bool decode_pass);
  void admit_waiting();
  // The prefix wait's test for a waiting request (see the header comment).
  bool waits_for_prefix(RequestState& state);
  // Allocates slots for `state`, preempting newer running requests as needed. Returns false
  // when `state` itself was preempted or finished (kv_exhausted).
  bool allocate_or_preempt(RequestState& state, int32_t num_new_tokens);
  RequestState* newest_live_running();
  void preempt(RequestState& victim);
  void withdraw_from_batch(RequestState& state);
  void drop_copies_of(RequestId id);
  void finish(RequestState& state, FinishReason reason, double time_ms);
  // num_drafts: a decode row's speculative drafts, in state.spec_rows after its token.
  void add_sequence(RequestState& state, bool is_prefill, int32_t num_tokens,
                    int32_t num_drafts = 0);
  // A decode row's drafts (Request::speculation) once its own slot is allocated: proposes
  // them into state.spec_rows and allocates their slots; returns how many (0: none, or no
  // pages for them).
  int32_t propose_drafts(RequestState& state);
  int32_t draft_cap(const RequestState& state, int32_t budget) const;
  // After the decode pass: when any row has drafts, rows without them (whose lookup found
  // nothing) get copies of their last token as drafts, within their caps, until the step's
  // drafts are a multiple of kDraftRowsMultiple, so that steps have few distinct row counts
  // (CUDA graph shapes, each captured once) at the cost of fewer than that many rows.
  void round_up_drafts();
  static constexpr int32_t kDraftRowsMultiple = 8;
  void finalize_batch();
  void cleanup_finished();
  RequestState* live_entry(const QueueEntry& entry);
  void run_invariant_check_if_enabled() const;

  SchedulerConfig config_;
  kv::KvCacheManager kv_;
  std::unique_ptr<AimdController> aimd_;
  std::unordered_map<RequestId, std::unique_ptr<RequestState>> requests_;
  std::vector<RequestState*> running_;  // admission order, oldest first; may hold finished
                                        // entries until cleanup_finished()
  std::deque<QueueEntry> waiting_;      // may hold stale entries (skipped)
  std::deque<QueueEntry> staged_;       // likewise
  std::vector<RequestId> graveyard_;    // finished, erased by cleanup_finished()
  int64_t num_waiting_ = 0;
  int64_t num_staged_ = 0;
  int64_t num_running_live_ = 0;
  uint64_t next_serial_ = 1;
  uint64_t next_group_ = 1;
  double last_now_ms_ = 0.0;
  double last_arrival_ms_ = 0.0;
  bool have_now_ = false;
  bool batch_pending_ = false;
  int32_t budget_left_ = 0;  // token budget while schedule() runs
  ScheduledBatch batch_;
  std::vector<RequestState*> batch_states_;   // parallel to batch_.sequences; null = ignored
  std::vector<RequestId> copy_owner_;         // parallel to batch_.page_copies
  std::vector<kv::PageCopy> reissue_copies_;  // from an aborted step
  std::vector<RequestId> reissue_owner_;
  std::vector<ScheduledSequence> scratch_sequences_;
  std::vector<TokenId> scratch_drafts_;
  std::vector<RequestState*> scratch_states_;
  std::vector<QueueEntry> scratch_waits_;  // entries held back by the prefix wait this step
  StepEvents pending_events_;
  StepEvents returned_events_;
  double last_utilization_ = 0.0;
  SchedulerStats stats_;
};

}  // namespace packserve::sched
