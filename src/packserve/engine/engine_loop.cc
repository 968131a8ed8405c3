// engine_loop.cc: the engine thread. One iteration: take new submissions and cancellations ->
// Scheduler::step (schedule -> Executor: ScheduledBatch -> model::ForwardBatch -> forward ->
// sample -> commit) -> StepEvents -> RequestOutput updates pushed to each stream -> metrics.
// The thread sleeps on wake_cv while nothing is live.
#include <algorithm>
#include <string>
#include <tuple>

#include "packserve/common/log.h"
#include "packserve/engine/engine_internal.h"

namespace packserve::engine {

struct Engine::Impl::Executor : public sched::ModelExecutor {
  explicit Executor(Impl& impl_in) : impl(impl_in) {}
  // Scored rows of one sequence: its prompt rows' scores.
  struct ScoreJob {
    LiveRequest* request;
    int32_t first;  // position of its first scored row
    int32_t count;  // its scored rows
    int32_t top;    // alternatives asked per row
  };

  Result<sched::StepOutput> execute(const sched::ScheduledBatch& batch) override {
    ran = true;
    batch_ids.clear();
    {
      // After schedule(): admitted requests have left the waiting queue (a const query).
      std::lock_guard lock(impl.mutex);
      impl.waiting_snapshot = impl.scheduler->num_waiting() + impl.scheduler->num_staged();
    }
    fb.token_ids.clear();
    fb.qo_indptr.assign(1, 0);
    fb.kv_len.clear();
    fb.page_indptr.assign(1, 0);
    fb.page_ids.clear();
    fb.samples.clear();
    fb.draws.clear();
    fb.adjust_indptr.assign(1, 0);
    fb.adjusts.clear();
    fb.score_indptr.assign(1, 0);
    fb.score_targets.clear();
    fb.score_top.clear();
    fb.mask_index.clear();
    fb.extra_rows.clear();
    fb.extra_draws.clear();
    fb.page_copies = batch.page_copies;
    score_jobs.clear();
    rows.clear();
    argmax_rows.clear();
    extra_argmax_rows = 0;
    draw_rows.clear();
    extra_draw_rows = 0;
    masked_rows.clear();
    for (size_t i = 0; i < batch.sequences.size(); ++i) {
      const sched::ScheduledSequence& seq = batch.sequences[i];
      batch_ids.push_back(seq.id);
      fb.token_ids.insert(fb.token_ids.end(), seq.token_ids.begin(), seq.token_ids.end());
      fb.qo_indptr.push_back(static_cast<int32_t>(fb.token_ids.size()));
      fb.kv_len.push_back(seq.kv_len());
      fb.page_ids.insert(fb.page_ids.end(), seq.page_ids.begin(), seq.page_ids.end());
      fb.page_indptr.push_back(static_cast<int32_t>(fb.page_ids.size()));
      const auto it = impl.live.find(seq.id);
      LiveRequest* live = it != impl.live.end() ? it->second.get() : nullptr;
      uint8_t output = model::kNoOutput;
      if (seq.samples_token) {
        PS_CHECK(live != nullptr) << "req=" << seq.id << " scheduled but not live";
        LiveRequest& r = *live;
        // A greedy row without logprobs needs only the argmax and any other row only its
        // draw (with its logit bias, penalties and alternatives' logprobs), unless its logits
        // are captured; a structured output's mask goes with it (ForwardBatch::masks).
        output = model::kOutputLogits;
        if (!r.captures_logits_now()) {
          if (r.sampler.argmax_only()) {
            output = model::kOutputArgmax;
          } else if (impl.config.backend_sampling) {
            output = model::kOutputSample;
          }
        }
        const int32_t drafts = seq.num_draft_tokens;
        if (drafts > 0) {
          // Only requests without adjustments or constraints speculate (Engine::Impl::admit):
          // their drafts' rows return their argmax or draw too (verify_drafts).
          PS_CHECK((output == model::kOutputArgmax || output == model::kOutputSample) &&
                   r.constraint == nullptr && r.sampler.unadjusted())
              << "req=" << seq.id << " has drafts but cannot speculate";
          fb.extra_rows.resize(batch.sequences.size(), 0);
          fb.extra_rows[i] = drafts;
          (output == model::kOutputArgmax ? extra_argmax_rows : extra_draw_rows) +=
              static_cast<size_t>(drafts);
        }
        if (output != model::kOutputLogits && r.constraint != nullptr) {
          fb.mask_index.resize(batch.sequences.size(), -1);
          fb.mask_index[i] = static_cast<int32_t>(masked_rows.size());
          masked_rows.push_back(&r);
        }
        if (output == model::kOutputSample) {
          fb.draws.resize(batch.sequences.size());
          if (drafts > 0) {  // each row the draw of its token without drafts (verify_drafts)
            const size_t first = fb.extra_draws.size();
            fb.extra_draws.resize(first + static_cast<size_t>(drafts) + 1);
            r.sampler.peek_draws(std::span(fb.extra_draws).subspan(first));
            fb.draws[i] = fb.extra_draws.back();
            fb.extra_draws.pop_back();
          } else {
            fb.draws[i] = r.sampler.next_draw();
          }
          const std::span<const LogitAdjust> adjusts = r.sampler.adjustments();
          fb.adjusts.insert(fb.adjusts.end(), adjusts.begin(), adjusts.end());
        }
        (output == model::kOutputArgmax   ? argmax_rows
         : output == model::kOutputSample ? draw_rows
                                          : rows)
            .push_back({i, &r});
      }
      fb.samples.push_back(output);
      fb.adjust_indptr.push_back(static_cast<int32_t>(fb.adjusts.size()));
      add_scored_rows(seq, live);
    }
    if (fb.adjusts.empty()) fb.adjust_indptr.clear();
    if (fb.score_targets.empty()) {
      fb.score_indptr.clear();
      fb.score_top.clear();
    }
    // The masks are filled on the sampler threads while the backend runs the step
    // (ForwardBatch::fill_masks): masks holds only their size.
    fb.fill_masks = nullptr;
    if (masked_rows.empty()) {
      fb.masks.clear();
    } else {
      const auto words = static_cast<size_t>(model::mask_words(impl.vocab_size));
      fb.masks.resize(masked_rows.size() * words);  // (no fill beyond the last step's size)
      fb.fill_masks = [this, words](std::span<uint32_t> dest) {
        const auto start = std::chrono::steady_clock::now();
        impl.sampler_pool->run(static_cast<int64_t>(masked_rows.size()), [&](int64_t j) {
          const auto k = static_cast<size_t>(j);
          masked_rows[k]->constraint->fill_mask(dest.subspan(k * words, words));
        });
        times.mask_fill_ms +=
            std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start)
                .count();
        times.masked_rows += static_cast<int64_t>(masked_rows.size());
      };
    }
    const auto t0 = std::chrono::steady_clock::now();
    PS_RETURN_IF_ERROR(impl.backend->forward(fb, fwd));
    const auto t1 = std::chrono::steady_clock::now();
    const int64_t vocab = impl.vocab_size;
    if (static_cast<int64_t>(fwd.logits.size()) != static_cast<int64_t>(rows.size()) * vocab ||
        fwd.argmax.size() != argmax_rows.size() + extra_argmax_rows ||
        fwd.sampled.size() != draw_rows.size() + extra_draw_rows ||
        fwd.sampled_logprobs.size() != fwd.sampled.size() ||
        fwd.top_logprobs.size() != fwd.sampled.size()) {
      return internal_error(
          "backend " + std::string(impl.backend->name()) + " returned " +
          std::to_string(fwd.logits.size()) + " logits, " + std::to_string(fwd.argmax.size()) +
          " argmax ids and " + std::to_string(fwd.sampled.size()) + " sampled ids (" +
          std::to_string(fwd.sampled_logprobs.size()) + " logprobs, " +
          std::to_string(fwd.top_logprobs.size()) + " top_logprobs), expected " +
          std::to_string(rows.size()) + " rows x vocab_size " + std::to_string(vocab) + ", " +
          std::to_string(argmax_rows.size() + extra_argmax_rows) + " and " +
          std::to_string(draw_rows.size() + extra_draw_rows));
    }
    PS_RETURN_IF_ERROR(check_scores());
    for (size_t j = 0, row = 0; j < draw_rows.size(); ++j) {
      const LiveRequest& r = *draw_rows[j].request;
      const auto want = static_cast<size_t>(std::min<int64_t>(r.params.top_logprobs, vocab));
      const size_t rows_of_job =
          static_cast<size_t>(batch.sequences[draw_rows[j].sequence].num_draft_tokens) + 1;
      for (const size_t end = row + rows_of_job; row < end; ++row) {
        if (fwd.top_logprobs[row].size() != want) {
          return internal_error("backend " + std::string(impl.backend->name()) + " returned " +
                                std::to_string(fwd.top_logprobs[row].size()) +
                                " top_logprobs for sampled row " + std::to_string(row) +
                                ", expected " + std::to_string(want));
        }
      }
    }
    sched::StepOutput out;
    out.sampled_token_ids.assign(batch.sequences.size(), 0);
    verify_drafts(batch, out);
    // Argmax rows carry no logprob (their requests did not ask for one).
    std::vector<float>* no_logprobs = nullptr;
    for (const auto& [ids, logprobs, jobs, kind] :
         {std::tuple{&argmax_tokens, no_logprobs, &argmax_rows, "argmax"},
          std::tuple{&draw_tokens, &draw_logprobs, &draw_rows, "sampled"}}) {
      for (size_t j = 0; j < jobs->size(); ++j) {
        const int32_t token = (*ids)[j];
        if (token < 0 || token >= vocab) {
          return internal_error("backend " + std::string(impl.backend->name()) + " returned " +
                                kind + " id " + std::to_string(token) +
                                ", expected in [0, vocab_size = " + std::to_string(vocab) + ")");
        }
        LiveRequest& r = *(*jobs)[j].request;
        out.sampled_token_ids[(*jobs)[j].sequence] = token;
        r.step_logprob = logprobs ? (*logprobs)[j] : 0.0f;
        r.sampler.accept(token);
        if (r.constraint != nullptr) {
          // As on the host path below: a row whose mask allowed nothing drew a token the
          // matcher refuses.
          Status s = r.constraint->accept(token);
          if (!s.ok()) r.constraint_error = s;
        }
      }
    }
    for (size_t j = 0; j < draw_rows.size(); ++j) {
      draw_rows[j].request->step_top_logprobs = std::move(draw_top[j]);
    }
    for (size_t j = 0, i = 0; j < score_jobs.size(); ++j) {
      const ScoreJob& job = score_jobs[j];
      for (int32_t k = 0; k < job.count; ++k, ++i) {
        TokenOutput& t = job.request->prompt_scores[static_cast<size_t>(job.first + k)];
        t.token_id = fb.score_targets[i];
        t.logprob = fwd.scores[i].logprob;
        t.top_logprobs = std::move(fwd.scores[i].top);
      }
    }
    // Each row touches only its own request (its sampler and RNG): the rows run in parallel
    // and the tokens do not depend on the number of threads.
    impl.sampler_pool->run(static_cast<int64_t>(rows.size()), [&](int64_t row) {
      const SampleRow& job = rows[static_cast<size_t>(row)];
      std::span<const float> row_logits(fwd.logits.data() + row * vocab,
                                        static_cast<size_t>(vocab));
      LiveRequest& r = *job.request;
      if (r.captures_logits_now()) {
        r.captured_logits.assign(row_logits.begin(), row_logits.end());
      }
      if (r.constraint != nullptr) {
        r.constraint->fill_mask(r.mask);
        r.masked_logits.assign(row_logits.begin(), row_logits.end());
        model::mask_logits(r.masked_logits, r.mask);
        row_logits = r.masked_logits;
      }
      const SampledToken sampled = r.sampler.sample(row_logits);
      if (r.constraint != nullptr) {
        // A token the mask allows always passes; an all -inf row (no token continues the
        // match, or min_tokens bans the only ones that do) draws one it does not.
        Status s = r.constraint->accept(sampled.token_id);
        if (!s.ok()) r.constraint_error = s;
      }
      out.sampled_token_ids[job.sequence] = sampled.token_id;
      r.step_logprob = sampled.logprob;
      if (r.params.top_logprobs > 0) {
        r.step_top_logprobs = packserve::top_logprobs(row_logits, r.params.top_logprobs);
      }
    });
    const auto t2 = std::chrono::steady_clock::now();
    out.step_duration_ms = std::chrono::duration<double, std::milli>(t2 - t0).count();
    // The masks were filled inside the forward, while the device ran its step.
    times.forward_ms = std::chrono::duration<double, std::milli>(t1 - t0).count();
    times.sample_ms = std::chrono::duration<double, std::milli>(t2 - t1).count();
    return out;
  }

  // The argmax and draw sequences' tokens (argmax_tokens; draw_tokens, draw_logprobs and
  // draw_top; in their jobs' order) from the backend's rows. A sequence with speculative drafts
  // has its drafts' rows before its last row's (ForwardBatch::extra_rows): draft j is accepted
  // while the drafts before it were and it is the token of row j (the row before it): its
  // argmax, or its draw with the uniform that token would have had without drafts
  // (RequestSampler::peek_draws), so that a seed gives the same tokens with and without drafts.
  // For a draft proposed with certainty, as the prompt lookup's are, that is rejection sampling
  // (the draft kept with probability p(draft), else a token drawn from p without it). The token
  // is that of the row after the last accepted draft (out.num_accepted_drafts); a draw
  // request's accepted drafts keep their rows' logprobs (LiveRequest::step_draft_outputs). An
  // id outside the vocabulary matches no draft, so it becomes the token and fails the range
  // check after.
  void verify_drafts(const sched::ScheduledBatch& batch, sched::StepOutput& out) {
    const auto accepted_drafts = [&](const SampleRow& job, const std::vector<int32_t>& ids,
                                     size_t first) {
      const sched::ScheduledSequence& seq = batch.sequences[job.sequence];
      int32_t accepted = 0;
      while (accepted < seq.num_draft_tokens &&
             ids[first + static_cast<size_t>(accepted)] ==
                 seq.token_ids[static_cast<size_t>(accepted) + 1]) {
        job.request->sampler.accept(ids[first + static_cast<size_t>(accepted)]);
        ++accepted;
      }
      if (seq.num_draft_tokens > 0) {
        out.num_accepted_drafts.resize(batch.sequences.size(), 0);
        out.num_accepted_drafts[job.sequence] = accepted;
      }
      return accepted;
    };
    argmax_tokens.clear();
    for (size_t j = 0, a = 0; j < argmax_rows.size(); ++j) {
      const int32_t accepted = accepted_drafts(argmax_rows[j], fwd.argmax, a);
      argmax_tokens.push_back(fwd.argmax[a + static_cast<size_t>(accepted)]);
      a += static_cast<size_t>(batch.sequences[argmax_rows[j].sequence].num_draft_tokens) + 1;
    }
    draw_tokens.clear();
    draw_logprobs.clear();
    draw_top.clear();
    for (size_t j = 0, d = 0; j < draw_rows.size(); ++j) {
      LiveRequest& r = *draw_rows[j].request;
      const int32_t drafts = batch.sequences[draw_rows[j].sequence].num_draft_tokens;
      const int32_t accepted = accepted_drafts(draw_rows[j], fwd.sampled, d);
      r.step_draft_outputs.clear();
      for (size_t k = d; r.params.logprobs && k < d + static_cast<size_t>(accepted); ++k) {
        r.step_draft_outputs.push_back(
            TokenOutput{fwd.sampled[k], fwd.sampled_logprobs[k], std::move(fwd.top_logprobs[k])});
      }
      if (drafts > 0) r.sampler.skip_draws(accepted + 1);  // the uniforms of its tokens
      const size_t last = d + static_cast<size_t>(accepted);
      draw_tokens.push_back(fwd.sampled[last]);
      draw_logprobs.push_back(fwd.sampled_logprobs[last]);
      draw_top.push_back(std::move(fwd.top_logprobs[last]));
      d += static_cast<size_t>(drafts) + 1;
    }
  }

  // ForwardBatch::score_* entries of seq and a ScoreJob: its prompt rows (before the last
  // prompt token) when its request (`live`, null if not live) asks for prompt logprobs.
  void add_scored_rows(const sched::ScheduledSequence& seq, LiveRequest* live) {
    int32_t count = 0;
    uint8_t top = 0;
    if (live != nullptr && live->scores_prompt_now()) {
      LiveRequest& r = *live;
      const auto q_len = static_cast<int32_t>(seq.token_ids.size());
      const int32_t first = seq.kv_len() - q_len;  // the first row's position
      count = std::clamp(r.num_prompt_tokens - 1 - first, 0, q_len);
      top = static_cast<uint8_t>(r.params.prompt_logprobs);
      if (count > 0) {
        const auto from = r.prompt.begin() + first + 1;
        fb.score_targets.insert(fb.score_targets.end(), from, from + count);
        score_jobs.push_back({&r, first, count, top});
      }
    }
    fb.score_top.push_back(top);
    fb.score_indptr.push_back(static_cast<int32_t>(fb.score_targets.size()));
  }

  // The backend's scores: one per scored row, each with its request's alternatives.
  Status check_scores() const {
    const std::string name(impl.backend->name());
    if (fwd.scores.size() != fb.score_targets.size()) {
      return internal_error("backend " + name + " returned " + std::to_string(fwd.scores.size()) +
                            " scores, expected " + std::to_string(fb.score_targets.size()));
    }
    for (size_t j = 0, i = 0; j < score_jobs.size(); ++j) {
      const auto want = static_cast<size_t>(std::min<int64_t>(score_jobs[j].top, impl.vocab_size));
      for (int32_t k = 0; k < score_jobs[j].count; ++k, ++i) {
        if (fwd.scores[i].top.size() != want) {
          return internal_error("backend " + name + " returned " +
                                std::to_string(fwd.scores[i].top.size()) +
                                " alternatives for scored row " + std::to_string(i) +
                                ", expected " + std::to_string(want));
        }
      }
    }
    return ok_status();
  }

  Impl& impl;
  bool ran = false;
  StepTimes times;                   // of the last execute()
  std::vector<RequestId> batch_ids;  // of the last execute()
  model::ForwardBatch fb;
  model::ForwardOutput fwd;
  struct SampleRow {
    size_t sequence;  // index in the batch
    LiveRequest* request;
  };
  std::vector<SampleRow> rows;         // this step's kOutputLogits rows, in logits order
  std::vector<SampleRow> argmax_rows;  // this step's kOutputArgmax rows, in argmax order
  size_t extra_argmax_rows = 0;        // their sequences' speculative drafts' rows
  std::vector<int32_t> argmax_tokens;  // their tokens (verify_drafts)
  std::vector<SampleRow> draw_rows;    // this step's kOutputSample rows, in sampled order
  size_t extra_draw_rows = 0;          // their sequences' speculative drafts' rows
  std::vector<int32_t> draw_tokens;    // their tokens, logprobs, alternatives (verify_drafts)
  std::vector<float> draw_logprobs;
  std::vector<std::vector<TopLogprob>> draw_top;
  std::vector<LiveRequest*> masked_rows;  // the argmax and draw rows' masks, in masks order
  std::vector<ScoreJob> score_jobs;       // this step's scored rows, in batch order
};

namespace {

// Fills the per-request fields every update carries.
void fill_common(const LiveRequest& r, RequestOutput& u) {
  u.id = r.id;
  u.num_prompt_tokens = r.num_prompt_tokens;
  u.num_output_tokens = r.num_output_tokens;
  u.arrival_time_ms = r.arrival_time_ms;
  u.first_token_time_ms = r.first_token_time_ms;
  u.last_token_time_ms = r.last_token_time_ms;
}

RequestOutput& update_of(LiveRequest& r) {
  if (!r.update.has_value()) r.update.emplace();
  return *r.update;
}

}  // namespace

void Engine::Impl::admit(Pending& pending, double now_ms) {
  auto r =
      std::make_unique<LiveRequest>(pending.id, pending.request, pending.stream, tok, pending.seed);
  const double arrival = pending.request.arrival_time_ms;
  r->arrival_time_ms = arrival < 0.0 ? now_ms : std::min(arrival, now_ms);
  if (!r->params.ignore_eos) r->stop_token_ids.insert(eos_token_ids.begin(), eos_token_ids.end());
  r->stop_token_ids.insert(r->params.stop_token_ids.begin(), r->params.stop_token_ids.end());
  sched::Request request;
  request.id = pending.id;
  request.arrival_time_ms = r->arrival_time_ms;
  request.prompt_token_ids = std::move(pending.request.prompt_token_ids);
  request.max_output_tokens = r->params.max_tokens;
  request.priority = pending.request.priority;
  request.stop_token_ids.assign(r->stop_token_ids.begin(), r->stop_token_ids.end());
  if (r->params.prompt_logprobs >= 0) {
    request.compute_whole_prompt = true;
    r->prompt = request.prompt_token_ids;
    r->prompt_scores.resize(r->prompt.size() - 1);
  }
  std::sort(request.stop_token_ids.begin(), request.stop_token_ids.end());
  r->sampler.ban_until(r->params.min_tokens, request.stop_token_ids);
  {
    std::lock_guard lock(metrics_mutex);
    metrics.prompt_tokens_total += r->num_prompt_tokens;
  }
  if (pending.constraint != nullptr) {
    r->constraint = pending.constraint->matcher();
    r->mask.assign(static_cast<size_t>(pending.constraint->vocabulary().mask_words()), 0);
  }
  // Drafts are verified by their rows' argmax or draws (Executor::verify_drafts): the backend
  // draws them (ForwardBatch::extra_draws) unless the request is greedy without logprobs.
  if (r->sampler.unadjusted() && r->constraint == nullptr &&
      (r->sampler.argmax_only() || config.backend_sampling)) {
    request.speculation = config.speculation;
  }
  LiveRequest& ref = *r;
  live.emplace(pending.id, std::move(r));
  Status s = scheduler->add_request(std::move(request));
  if (!s.ok()) finish(ref, "error", now_ms, s.to_string());
}

void Engine::Impl::finish(LiveRequest& r, std::string reason, double time_ms, std::string error) {
  RequestOutput& u = update_of(r);
  if (reason != "error" && !r.matcher.stopped()) {
    u.text_delta += r.matcher.push(r.decoder.finish());
    u.text_delta += r.matcher.flush();
  }
  // A stop string wins over a length/EOS finish of the same step: its text was truncated.
  // So does a structured output's end.
  const bool ended = r.matcher.stopped() || (r.constraint != nullptr && r.constraint->finished());
  if (ended && reason == "length") reason = "stop";
  fill_common(r, u);
  u.finished = true;
  u.finish_reason = reason;
  u.error = std::move(error);
  const double e2e_ms = time_ms - r.arrival_time_ms;
  {
    std::lock_guard lock(metrics_mutex);
    if (reason == "stop")
      ++metrics.requests_finished_stop;
    else if (reason == "length")
      ++metrics.requests_finished_length;
    else if (reason == "cancelled")
      ++metrics.requests_cancelled;
    else if (reason == "kv_exhausted")
      ++metrics.requests_kv_exhausted;
    else
      ++metrics.requests_error;
    if (reason == "stop" || reason == "length") {
      observe(metrics.e2e_ms, e2e_ms);
      if (r.num_output_tokens >= 2 && r.first_token_time_ms.has_value()) {
        observe(metrics.tpot_ms, (r.last_token_time_ms - *r.first_token_time_ms) /
                                     static_cast<double>(r.num_output_tokens - 1));
      }
    }
  }
  PS_LOG_DEBUG("engine",
               "req={} finished reason={} prompt_tokens={} output_tokens={} e2e_ms={:.1f}", r.id,
               reason, r.num_prompt_tokens, r.num_output_tokens, e2e_ms);
  r.stream->push(std::move(u));
  const RequestId id = r.id;
  live.erase(id);  // r is gone from here on
  {
    std::lock_guard lock(mutex);
    --num_live;
  }
  idle_cv.notify_all();
}

void Engine::Impl::fail_requests(const std::vector<RequestId>& ids, const Status& status,
                                 double now_ms) {
  for (RequestId id : ids) {
    auto it = live.find(id);
    if (it == live.end()) continue;
    (void)scheduler->cancel(id, now_ms);  // its pages return now
    finish(*it->second, "error", now_ms, status.to_string());
  }
}

void Engine::Impl::process_events(const sched::StepEvents& events, double now_ms) {
  std::vector<RequestId> stopped_by_string;  // and by a structured output's end
  std::vector<std::pair<RequestId, Status>> constraint_failed;
  for (const sched::TokenEvent& ev : events.tokens) {
    auto it = live.find(ev.id);
    if (it == live.end()) continue;
    LiveRequest& r = *it->second;
    // A stop string ends the output at the token that completed it: the step's later tokens
    // (speculative drafts accepted with it) are dropped.
    if (r.matcher.stopped()) continue;
    RequestOutput& u = update_of(r);
    ++r.num_output_tokens;
    if (!r.first_token_time_ms.has_value()) {
      r.first_token_time_ms = ev.time_ms;
      if (r.return_last_prompt_logits) u.last_prompt_logits = std::move(r.captured_logits);
      if (r.params.prompt_logprobs >= 0) u.prompt_logprobs = std::move(r.prompt_scores);
      std::lock_guard lock(metrics_mutex);
      observe(metrics.ttft_ms, ev.time_ms - r.arrival_time_ms);
    }
    r.last_token_time_ms = ev.time_ms;
    TokenOutput token;
    token.token_id = ev.token_id;
    if (!r.step_draft_outputs.empty()) {  // an accepted draft (Executor::verify_drafts)
      token = std::move(r.step_draft_outputs.front());
      r.step_draft_outputs.pop_front();
      PS_CHECK(token.token_id == ev.token_id) << "req=" << r.id << " draft order";
    } else {
      if (r.params.logprobs) token.logprob = r.step_logprob;
      r.step_logprob.reset();
      token.top_logprobs = std::move(r.step_top_logprobs);
      r.step_top_logprobs.clear();
    }
    u.tokens.push_back(token);
    if (r.constraint_error.has_value()) {
      constraint_failed.emplace_back(r.id, *r.constraint_error);
      continue;
    }
    // Stop tokens count as output tokens but add no text (as vLLM without
    // include_stop_str_in_output).
    if (r.matcher.stopped() || r.stop_token_ids.count(ev.token_id) != 0) continue;
    // The structured output's end (no byte may follow): its last token's text goes out.
    if (r.constraint != nullptr && r.constraint->finished()) stopped_by_string.push_back(r.id);
    Result<std::string> text = r.decoder.push(ev.token_id);
    if (!text.ok()) {
      // An id the model knows but the tokenizer does not (padded vocabularies): no text.
      PS_LOG_DEBUG("engine", "req={} token={} has no text: {}", r.id, ev.token_id,
                   text.status().message());
      continue;
    }
    u.text_delta += r.matcher.push(*text, r.num_output_tokens > r.params.min_tokens);
    if (r.matcher.stopped()) stopped_by_string.push_back(r.id);  // twice is harmless
  }
  for (const sched::FinishedRequest& f : events.finished) {
    auto it = live.find(f.id);
    if (it == live.end()) continue;  // already finished by the engine (stop string, error)
    LiveRequest& r = *it->second;
    if (f.reason == sched::FinishReason::kCancelled && r.matcher.stopped()) continue;
    if (r.constraint_error.has_value()) continue;  // failed below
    update_of(r);
    r.update->num_cached_prompt_tokens = f.num_cached_prompt_tokens;
    finish(r, std::string(sched::finish_reason_name(f.reason)), f.finish_time_ms, "");
  }
  for (RequestId id : stopped_by_string) {
    auto it = live.find(id);
    if (it == live.end()) continue;
    (void)scheduler->cancel(id, now_ms);  // pages back now; its kCancelled event is ignored
    finish(*it->second, "stop", it->second->last_token_time_ms, "");
  }
  for (const auto& [id, status] : constraint_failed) {
    auto it = live.find(id);
    if (it == live.end()) continue;
    (void)scheduler->cancel(id, now_ms);
    finish(*it->second, "error", now_ms,
           it->second->params.structured.field +
               ": no token can continue the output: " + status.message());
  }
  for (auto& [id, r] : live) {
    if (!r->update.has_value()) continue;
    fill_common(*r, *r->update);
    r->stream->push(std::move(*r->update));
    r->update.reset();
  }
}

void Engine::Impl::publish_metrics(int64_t step_tokens, double now_ms, const StepTimes& times) {
  const kv::KvCacheStats kv_stats = scheduler->kv_cache().stats();
  const int64_t waiting = scheduler->num_waiting() + scheduler->num_staged();
  {
    std::lock_guard lock(mutex);
    waiting_snapshot = waiting;
  }
  std::lock_guard lock(metrics_mutex);
  metrics.num_running = scheduler->num_running();
  metrics.num_waiting = waiting;
  metrics.pages_in_use = kv_stats.pages_in_use;
  metrics.pages_cached = kv_stats.pages_cached;
  metrics.pages_free = kv_stats.pages_free;
  metrics.pages_total = kv_stats.pages_total;
  metrics.prefix_lookup_tokens = kv_stats.prefix_lookup_tokens;
  metrics.prefix_hit_tokens = kv_stats.prefix_hit_tokens;
  metrics.num_steps = scheduler->stats().num_steps;
  metrics.num_preemptions = scheduler->stats().num_preemptions;
  metrics.spec_draft_tokens = scheduler->stats().num_draft_tokens;
  metrics.spec_accepted_tokens = scheduler->stats().num_accepted_draft_tokens;
  metrics.generation_tokens_total += step_tokens;
  metrics.step_seconds += times.step_ms / 1000.0;
  metrics.forward_seconds += times.forward_ms / 1000.0;
  metrics.sample_seconds += times.sample_ms / 1000.0;
  metrics.masked_rows += times.masked_rows;
  metrics.mask_fill_seconds += times.mask_fill_ms / 1000.0;
  metrics.backend = backend->stats();
  constexpr double kWindowMs = 10000.0;
  if (step_tokens > 0) recent_tokens.emplace_back(now_ms, step_tokens);
  while (!recent_tokens.empty() && recent_tokens.front().first < now_ms - kWindowMs) {
    recent_tokens.pop_front();
  }
  int64_t sum = 0;
  for (const auto& [t, n] : recent_tokens) sum += n;
  const double window_ms = std::max(std::min(kWindowMs, now_ms), 1.0);
  metrics.generation_tokens_per_s = static_cast<double>(sum) * 1000.0 / window_ms;
}

void Engine::Impl::run() {
  Executor executor(*this);
  while (true) {
    std::vector<Pending> new_requests;
    std::vector<RequestId> new_cancels;
    bool cancel_everything = false;
    {
      std::unique_lock lock(mutex);
      wake_cv.wait(lock,
                   [&] { return !inbox.empty() || !cancels.empty() || stopping || !live.empty(); });
      new_requests.swap(inbox);
      new_cancels.swap(cancels);
      cancel_everything = cancel_all;
      if (stopping && new_requests.empty() && live.empty()) break;
    }
    double now = now_ms();
    for (Pending& p : new_requests) admit(p, now);
    if (!new_requests.empty()) {
      // Keep submit()'s queue-full check exact: they left the inbox for the scheduler.
      std::lock_guard lock(mutex);
      waiting_snapshot = scheduler->num_waiting() + scheduler->num_staged();
    }
    for (RequestId id : new_cancels) {
      if (live.count(id) != 0) (void)scheduler->cancel(id, now);
    }
    if (cancel_everything) {
      for (const auto& [id, r] : live) (void)scheduler->cancel(id, now);
    }
    if (live.empty()) continue;

    executor.ran = false;
    executor.batch_ids.clear();
    executor.times = {};
    Result<const sched::StepEvents*> events = scheduler->step(now, executor);
    const double end = now_ms();
    int64_t step_tokens = 0;
    if (!events.ok()) {
      PS_LOG_ERROR("engine", "step failed: {}", events.status().to_string());
      std::vector<RequestId> victims = executor.batch_ids;
      if (!executor.ran || victims.empty()) {
        // The scheduler itself failed: nothing can be trusted to progress; fail everything.
        for (const auto& [id, r] : live) victims.push_back(id);
      }
      // Their pages return now; the kCancelled events of the next commit find no live entry.
      fail_requests(victims, events.status(), end);
      executor.ran = true;  // do not sleep: the others go on at once
    } else {
      step_tokens = static_cast<int64_t>((*events)->tokens.size());
      process_events(**events, end);
    }
    executor.times.step_ms = now_ms() - now;
    publish_metrics(step_tokens, end, executor.times);
    if (!executor.ran && step_tokens == 0 && !live.empty()) {
      // Nothing runnable (aimd staging): sleep until the staging deadline or new work.
      double wait_ms = 2.0;
      if (auto deadline = scheduler->staging_deadline_ms()) {
        wait_ms = std::clamp(*deadline - now_ms(), 0.1, 50.0);
      }
      std::unique_lock lock(mutex);
      wake_cv.wait_for(lock, std::chrono::duration<double, std::milli>(wait_ms),
                       [&] { return !inbox.empty() || !cancels.empty() || cancel_all; });
    }
  }
  PS_LOG_INFO("engine", "engine thread stopped");
}

}  // namespace packserve::engine
