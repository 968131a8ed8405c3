// speculation_test.cc: speculative decoding by prompt lookup in the scheduler (request.h
// NgramSpeculation, ngram_proposer.h): the drafts proposed, the decode row that carries them,
// commit() of accepted drafts (tokens, KV computed, stop and length inside the drafts), its
// errors, and the caps (max_output_tokens, token budget, pages: no preemption for drafts).
#include <gtest/gtest.h>

#include <algorithm>
#include <vector>

#include "packserve/common/rng.h"
#include "packserve/sched/ngram_proposer.h"
#include "packserve/sched/scheduler.h"

namespace packserve::sched {
namespace {

using Tokens = std::vector<TokenId>;

Tokens drafts_of(const Tokens& tokens, int32_t lo, int32_t hi, int32_t max_drafts) {
  Tokens out = {-1};  // cleared by the proposer
  propose_ngram_drafts(tokens, lo, hi, max_drafts, out);
  return out;
}

TEST(NgramProposer, ProposesWhatFollowedTheLongestMostRecentSuffix) {
  // "1 2 3" recurs at 0..2 (followed by 9 8) and "3" alone at 5 (followed by 7).
  EXPECT_EQ(drafts_of({1, 2, 3, 9, 8, 3, 7, 1, 2, 3}, 1, 4, 2), (Tokens{9, 8}));
  // With suffixes of 1 only, the most recent "3" wins.
  EXPECT_EQ(drafts_of({1, 2, 3, 9, 8, 3, 7, 1, 2, 3}, 1, 1, 2), (Tokens{7, 1}));
  // A suffix shorter than the minimum proposes nothing.
  EXPECT_EQ(drafts_of({5, 3, 7, 1, 2, 3}, 2, 4, 3), Tokens{});
  // The drafts stop at the end of the tokens; an occurrence may overlap the suffix.
  EXPECT_EQ(drafts_of({1, 2, 1, 2, 1, 2}, 2, 4, 5), (Tokens{1, 2}));
  EXPECT_EQ(drafts_of({4, 4, 4, 4}, 1, 2, 3), Tokens{4});  // the most recent "4 4": 1..2
  // Nothing to look up, or nothing asked.
  EXPECT_EQ(drafts_of({7}, 1, 4, 3), Tokens{});
  EXPECT_EQ(drafts_of({}, 1, 4, 3), Tokens{});
  EXPECT_EQ(drafts_of({1, 2, 1, 2}, 1, 4, 0), Tokens{});
  EXPECT_EQ(drafts_of({1, 2, 3, 4}, 1, 4, 3), Tokens{});  // the last token never occurred
}

// The definition, by brute force: for n = hi down to lo, the most recent earlier occurrence
// of the last n tokens.
Tokens brute_force(const Tokens& t, int32_t lo, int32_t hi, int32_t max_drafts) {
  const auto size = static_cast<int64_t>(t.size());
  for (int64_t n = hi; n >= lo; --n) {
    if (n >= size) continue;
    for (int64_t start = size - n - 1; start >= 0; --start) {
      if (!std::equal(t.begin() + start, t.begin() + start + n, t.end() - n)) continue;
      const int64_t end = std::min(size, start + n + max_drafts);
      return Tokens(t.begin() + start + n, t.begin() + end);
    }
  }
  return {};
}

TEST(NgramProposer, MatchesBruteForceOnRandomTokens) {
  Rng rng(17);
  for (int trial = 0; trial < 3000; ++trial) {
    Tokens t(static_cast<size_t>(rng.uniform_int(0, 40)));
    const int64_t alphabet = rng.uniform_int(1, 4);
    for (TokenId& x : t) x = static_cast<TokenId>(rng.uniform_int(0, alphabet - 1));
    const auto lo = static_cast<int32_t>(rng.uniform_int(1, 4));
    const auto hi = static_cast<int32_t>(rng.uniform_int(lo, 6));
    const auto k = static_cast<int32_t>(rng.uniform_int(0, 6));
    ASSERT_EQ(drafts_of(t, lo, hi, k), brute_force(t, lo, hi, k))
        << "trial " << trial << " lo " << lo << " hi " << hi << " k " << k;
  }
}

TEST(NgramProposer, ValidateNamesTheField) {
  EXPECT_TRUE(validate_speculation({}).ok());
  EXPECT_TRUE(validate_speculation({kMaxSpeculativeTokens, 1, kMaxSpeculativeNgram}).ok());
  const Status many = validate_speculation({kMaxSpeculativeTokens + 1, 2, 4});
  EXPECT_EQ(many.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(many.message().rfind("num_speculative_tokens: ", 0), 0u) << many.message();
  for (const NgramSpeculation& bad : {NgramSpeculation{2, 0, 4}, NgramSpeculation{2, 5, 4},
                                      NgramSpeculation{2, 1, kMaxSpeculativeNgram + 1}}) {
    const Status s = validate_speculation(bad);
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
    EXPECT_EQ(s.message().rfind("prompt_lookup_min, prompt_lookup_max: ", 0), 0u) << s.message();
  }
}

kv::KvCacheConfig pages(int32_t num_pages) {
  kv::KvCacheConfig c;
  c.num_pages = num_pages;
  c.page_size = 4;
  return c;
}

std::unique_ptr<Scheduler> make_scheduler(int32_t budget, int32_t num_pages) {
  SchedulerConfig c;
  c.max_num_batched_tokens = budget;
  c.max_num_running_requests = 8;
  c.check_invariants_every_step = true;
  auto s = Scheduler::create(c, pages(num_pages));
  EXPECT_TRUE(s.ok()) << s.status().to_string();
  return std::move(s).value();
}

Request speculating(RequestId id, Tokens prompt, int32_t max_output, int32_t drafts = 3,
                    int32_t lookup_min = 2) {
  Request r;
  r.id = id;
  r.prompt_token_ids = std::move(prompt);
  r.max_output_tokens = max_output;
  r.speculation = {drafts, lookup_min, 4};
  return r;
}

// One step: schedule, then commit `sampled` (a token per sequence) and `accepted` (the
// accepted drafts of each, or empty).
const StepEvents* step(Scheduler& s, double now, const Tokens& sampled,
                       const std::vector<int32_t>& accepted = {}) {
  auto batch = s.schedule(now);
  EXPECT_TRUE(batch.ok()) << batch.status().to_string();
  StepOutput out;
  out.sampled_token_ids = sampled;
  out.num_accepted_drafts = accepted;
  out.step_duration_ms = 1.0;
  auto events = s.commit(out);
  EXPECT_TRUE(events.ok()) << events.status().to_string();
  return events.ok() ? *events : nullptr;
}

Tokens event_tokens(const StepEvents& e, RequestId id) {
  Tokens t;
  for (const TokenEvent& ev : e.tokens) {
    if (ev.id == id) t.push_back(ev.token_id);
  }
  return t;
}

TEST(Speculation, DraftsRideTheDecodeRowAndAcceptedOnesBecomeOutput) {
  auto s = make_scheduler(64, 16);
  ASSERT_TRUE(s->add_request(speculating(1, {1, 2, 3, 4, 1, 2, 3}, 10)).ok());
  // Prefill: no drafts; samples 4.
  auto batch = s->schedule(0.0);
  ASSERT_TRUE(batch.ok());
  ASSERT_EQ((*batch)->sequences.size(), 1u);
  EXPECT_EQ((*batch)->sequences[0].num_draft_tokens, 0);
  ASSERT_TRUE(s->commit(StepOutput{{4}, {}, 1.0}).ok());
  // Tokens 1 2 3 4 1 2 3 4: the suffix "1 2 3 4" recurs at 0, so the drafts are 1 2 3.
  batch = s->schedule(1.0);
  ASSERT_TRUE(batch.ok());
  ASSERT_EQ((*batch)->sequences.size(), 1u);
  const ScheduledSequence seq = (*batch)->sequences[0];
  EXPECT_FALSE(seq.is_prefill);
  EXPECT_TRUE(seq.samples_token);
  EXPECT_EQ(seq.start_position, 7);
  EXPECT_EQ(seq.num_tokens, 4);
  EXPECT_EQ(seq.num_draft_tokens, 3);
  EXPECT_EQ(Tokens(seq.token_ids.begin(), seq.token_ids.end()), (Tokens{4, 1, 2, 3}));
  EXPECT_EQ(seq.page_ids.size(), 3u);  // slots for positions 0..10
  EXPECT_EQ((*batch)->num_batched_tokens, 4);
  EXPECT_EQ((*batch)->num_decode_rows, 1);
  // Two drafts accepted, then the model chose 9 instead of the third.
  auto events = s->commit(StepOutput{{9}, {2}, 1.0});
  ASSERT_TRUE(events.ok());
  EXPECT_EQ(event_tokens(**events, 1), (Tokens{1, 2, 9}));
  ASSERT_EQ((*events)->tokens.size(), 3u);
  for (int i = 0; i < 3; ++i) EXPECT_EQ((*events)->tokens[i].output_index, 1 + i);
  EXPECT_EQ(*s->kv_cache().num_computed_tokens(1), 10);  // 7 + the row's token + 2 drafts
  EXPECT_EQ(s->stats().num_draft_tokens, 3);
  EXPECT_EQ(s->stats().num_accepted_draft_tokens, 2);
  EXPECT_EQ(s->stats().num_output_tokens, 4);
  // Next: 9 never occurred, so a plain decode row at position 10 (the rejected draft's slot).
  batch = s->schedule(2.0);
  ASSERT_TRUE(batch.ok());
  ASSERT_EQ((*batch)->sequences.size(), 1u);
  EXPECT_EQ((*batch)->sequences[0].num_draft_tokens, 0);
  EXPECT_EQ((*batch)->sequences[0].start_position, 10);
  EXPECT_EQ((*batch)->sequences[0].token_ids[0], 9);
  ASSERT_TRUE(s->commit(StepOutput{{1}, {}, 1.0}).ok());
  EXPECT_TRUE(s->check_invariants().ok());
}

TEST(Speculation, StopTokenOrLengthInsideTheDraftsEndsTheRequestThere) {
  auto s = make_scheduler(64, 16);
  Request r = speculating(1, {5, 6, 7, 8, 5, 6, 7}, 20);
  r.stop_token_ids = {6};
  ASSERT_TRUE(s->add_request(r).ok());
  step(*s, 0.0, {8});  // tokens ... 5 6 7 8: drafts 5 6 7
  const StepEvents* e = step(*s, 1.0, {1}, {3});
  ASSERT_NE(e, nullptr);
  EXPECT_EQ(event_tokens(*e, 1), (Tokens{5, 6}));  // 6 is a stop token: 7 and 1 are dropped
  ASSERT_EQ(e->finished.size(), 1u);
  EXPECT_EQ(e->finished[0].reason, FinishReason::kStop);
  EXPECT_EQ(e->finished[0].num_output_tokens, 3);
  EXPECT_EQ(s->kv_cache().num_requests(), 0);

  // max_output_tokens 3: after the first token, 2 remain, so 1 draft at most.
  ASSERT_TRUE(s->add_request(speculating(2, {1, 2, 3, 1, 2}, 3)).ok());
  auto batch = s->schedule(2.0);
  ASSERT_TRUE(batch.ok());
  ASSERT_TRUE(s->commit(StepOutput{{3}, {}, 1.0}).ok());  // tokens 1 2 3 1 2 3: drafts 1 2
  batch = s->schedule(3.0);
  ASSERT_TRUE(batch.ok());
  EXPECT_EQ((*batch)->sequences[0].num_draft_tokens, 1);
  auto events = s->commit(StepOutput{{2}, {1}, 1.0});
  ASSERT_TRUE(events.ok());
  EXPECT_EQ(event_tokens(**events, 2), (Tokens{1, 2}));
  ASSERT_EQ((*events)->finished.size(), 1u);
  EXPECT_EQ((*events)->finished[0].reason, FinishReason::kLength);
  EXPECT_EQ((*events)->finished[0].num_output_tokens, 3);
  EXPECT_TRUE(s->check_invariants().ok());
}

TEST(Speculation, DraftsFitTheBudgetAndNeverPreempt) {
  // Budget 5: the first decode row takes 1 + 2 drafts, the second 1 + the one draft left.
  {
    auto s = make_scheduler(5, 16);
    ASSERT_TRUE(s->add_request(speculating(1, {1, 2, 1}, 8, 2, 1)).ok());
    ASSERT_TRUE(s->add_request(speculating(2, {3, 4}, 8, 3, 1)).ok());
    step(*s, 0.0, {2, 3});  // 1 2 1 2 and 3 4 3
    auto batch = s->schedule(1.0);
    ASSERT_TRUE(batch.ok());
    ASSERT_EQ((*batch)->sequences.size(), 2u);
    const ScheduledSequence& a = (*batch)->sequences[0];
    const ScheduledSequence& b = (*batch)->sequences[1];
    EXPECT_EQ(Tokens(a.token_ids.begin(), a.token_ids.end()), (Tokens{2, 1, 2}));
    EXPECT_EQ(Tokens(b.token_ids.begin(), b.token_ids.end()), (Tokens{3, 4}));  // not 4 3
    EXPECT_EQ(b.num_draft_tokens, 1);
    EXPECT_EQ((*batch)->num_batched_tokens, 5);
    ASSERT_TRUE(s->commit(StepOutput{{1, 3}, {0, 1}, 1.0}).ok());
  }
  // A lookup that finds fewer tokens than asked is padded with its last draft: "1 2" after
  // "1 2 1 2" (the tokens end), 3 drafts asked.
  {
    auto s = make_scheduler(64, 16);
    ASSERT_TRUE(s->add_request(speculating(1, {1, 2, 1}, 8, 3, 1)).ok());
    step(*s, 0.0, {2});
    auto batch = s->schedule(1.0);
    ASSERT_TRUE(batch.ok());
    const ScheduledSequence& a = (*batch)->sequences[0];
    EXPECT_EQ(Tokens(a.token_ids.begin(), a.token_ids.end()), (Tokens{2, 1, 2, 2}));
    EXPECT_EQ(a.num_draft_tokens, 3);
    ASSERT_TRUE(s->commit(StepOutput{{1}, {2}, 1.0}).ok());
  }
  // Pages: 2 pages of 4 hold the 8 tokens of two requests' prompts + first output (4 each);
  // a draft would need a new page, which only preempting the other could give.
  {
    auto s = make_scheduler(64, 2);
    ASSERT_TRUE(s->add_request(speculating(1, {1, 2, 1}, 8)).ok());
    ASSERT_TRUE(s->add_request(speculating(2, {1, 2, 1}, 8)).ok());
    step(*s, 0.0, {2, 2});  // both: 1 2 1 2, one page each
    auto batch = s->schedule(1.0);
    ASSERT_TRUE(batch.ok());
    ASSERT_EQ((*batch)->sequences.size(), 2u);
    for (const ScheduledSequence& q : (*batch)->sequences) EXPECT_EQ(q.num_draft_tokens, 0);
    EXPECT_EQ(s->stats().num_preemptions, 0);
    ASSERT_TRUE(s->commit(StepOutput{{1, 1}, {}, 1.0}).ok());
  }
}

// When any decode row has drafts, rows whose lookup found nothing get copies of their last
// token as drafts until the step's drafts are a multiple of 8 (few distinct row counts);
// requests that do not speculate get none.
TEST(Speculation, StepDraftsAreRoundedUpToAMultipleOfEight) {
  auto s = make_scheduler(64, 16);
  ASSERT_TRUE(s->add_request(speculating(1, {1, 2, 1}, 20, 3, 1)).ok());
  ASSERT_TRUE(s->add_request(speculating(2, {5, 6}, 20, 3, 1)).ok());
  Request plain = speculating(3, {3, 4}, 20, 0, 1);
  ASSERT_TRUE(s->add_request(plain).ok());
  ASSERT_TRUE(s->add_request(speculating(4, {8}, 20, 3, 1)).ok());
  step(*s, 0.0, {2, 7, 9, 9});  // 1 2 1 2 | 5 6 7 | 3 4 9 | 8 9
  auto batch = s->schedule(1.0);
  ASSERT_TRUE(batch.ok());
  ASSERT_EQ((*batch)->sequences.size(), 4u);
  std::vector<Tokens> rows;
  for (const ScheduledSequence& q : (*batch)->sequences) {
    rows.emplace_back(q.token_ids.begin(), q.token_ids.end());
  }
  EXPECT_EQ(rows[0], (Tokens{2, 1, 2, 2}));  // found "1 2", padded to 3
  EXPECT_EQ(rows[1], (Tokens{7, 7, 7, 7}));  // 3 of the 5 missing
  EXPECT_EQ(rows[2], (Tokens{9}));           // does not speculate
  EXPECT_EQ(rows[3], (Tokens{9, 9, 9}));     // the last 2
  EXPECT_EQ((*batch)->num_batched_tokens, 4 + 8);
  const auto events = s->commit(StepOutput{{3, 1, 4, 5}, {0, 0, 0, 2}, 1.0});
  ASSERT_TRUE(events.ok());
  EXPECT_EQ(event_tokens(**events, 4), (Tokens{9, 9, 5}));
  EXPECT_EQ(*s->kv_cache().num_computed_tokens(4), 4);  // 8 9 9 9
  EXPECT_TRUE(s->check_invariants().ok());
}

TEST(Speculation, BadAcceptedCountsAreRejectedWithTheBatchPending) {
  auto s = make_scheduler(64, 16);
  ASSERT_TRUE(s->add_request(speculating(1, {1, 2, 3, 1, 2}, 10)).ok());
  step(*s, 0.0, {3});
  auto batch = s->schedule(1.0);
  ASSERT_TRUE(batch.ok());
  ASSERT_EQ((*batch)->sequences[0].num_draft_tokens, 3);  // 1 2 3 after "1 2 3"
  for (const std::vector<int32_t>& bad :
       {std::vector<int32_t>{4}, std::vector<int32_t>{-1}, std::vector<int32_t>{0, 0}}) {
    const auto r = s->commit(StepOutput{{7}, bad, 1.0});
    EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(r.status().message().find("num_accepted_drafts"), std::string::npos)
        << r.status().message();
    EXPECT_TRUE(s->batch_pending());
  }
  ASSERT_TRUE(s->commit(StepOutput{{7}, {3}, 1.0}).ok());
  EXPECT_EQ(*s->kv_cache().num_computed_tokens(1), 9);

  Request bad = speculating(2, {1}, 4, kMaxSpeculativeTokens + 1);
  const Status refused = s->add_request(bad);
  EXPECT_EQ(refused.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(refused.message().find("speculation.num_speculative_tokens"), std::string::npos)
      << refused.message();
  EXPECT_EQ(s->num_unfinished_requests(), 1);
}

}  // namespace
}  // namespace packserve::sched
