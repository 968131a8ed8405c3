// engine_test.cc: the Engine over FakeBackend (engine_test_util.h): outputs against the fake
// model run on plain vectors, streaming text, stop handling, cancellation, errors, metrics.
#include "packserve/engine/engine.h"

#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <limits>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <regex>
#include <thread>

#include "packserve/engine/engine_test_util.h"
#include "packserve/engine/sampler.h"
#include "packserve/tokenizer/utf8.h"

namespace packserve::engine {
namespace {

using testing::collect;
using testing::Collected;
using testing::FakeBackend;
using testing::kEosId;
using testing::NextTokenFn;

constexpr int64_t kVocab = 308;  // the test tokenizer's ids 0..307

struct EngineSetup {
  int32_t num_pages = 64;
  int32_t page_size = 4;
  int32_t max_num_batched_tokens = 32;
  int32_t max_waiting_requests = 1024;
  bool prefix_caching = true;
  sched::SchedulingPolicy policy = sched::SchedulingPolicy::kFcfs;
  int32_t num_sampler_threads = 0;
  bool backend_sampling = true;
  std::optional<model::RopeScaling> rope_scaling;  // of the fake model (max positions 4096)
  int32_t max_model_len = 0;
  sched::NgramSpeculation speculation;
};

struct TestEngine {
  FakeBackend* backend = nullptr;  // owned by the engine
  std::unique_ptr<Engine> engine;
};

TestEngine make_engine(NextTokenFn next, const EngineSetup& s = {}) {
  EngineConfig config;
  config.kv.num_pages = s.num_pages;
  config.kv.page_size = s.page_size;
  config.kv.enable_prefix_caching = s.prefix_caching;
  config.scheduler.max_num_batched_tokens = s.max_num_batched_tokens;
  config.scheduler.check_invariants_every_step = true;
  config.max_waiting_requests = s.max_waiting_requests;
  config.scheduler.policy = s.policy;
  config.num_sampler_threads = s.num_sampler_threads;
  config.backend_sampling = s.backend_sampling;
  config.max_model_len = s.max_model_len;
  config.speculation = s.speculation;
  auto backend = std::make_unique<FakeBackend>(kVocab, s.num_pages, s.page_size, std::move(next));
  backend->set_rope_scaling(s.rope_scaling);
  TestEngine t;
  t.backend = backend.get();
  auto created = Engine::create(config, std::move(backend), testing::make_test_tokenizer());
  EXPECT_TRUE(created.ok()) << created.status().to_string();
  t.engine = std::move(created).value();
  return t;
}

GenerateRequest greedy_request(std::vector<int32_t> prompt, int32_t max_tokens) {
  GenerateRequest r;
  r.prompt_token_ids = std::move(prompt);
  r.sampling.temperature = 0.0;
  r.sampling.max_tokens = max_tokens;
  return r;
}

std::vector<int32_t> ids_of(const std::string& text) {
  std::vector<int32_t> ids;
  for (unsigned char c : text) ids.push_back(c);  // the test vocabulary: id == byte value
  return ids;
}

// The fake model's logits after `context` (hash_next_token's row).
std::vector<float> model_row(const std::vector<int32_t>& context) {
  std::vector<float> row(kVocab);
  testing::fake_logits(context, testing::hash_next_token(context), kVocab, row.data());
  return row;
}

// float64 reference of the raw log-softmax of `row` at `token`.
double log_softmax64(const std::vector<float>& row, int32_t token) {
  double m = -1e300, z = 0;
  for (float x : row) m = std::max(m, static_cast<double>(x));
  for (float x : row) z += std::exp(x - m);
  return row[static_cast<size_t>(token)] - m - std::log(z);
}

std::string text_of(const std::vector<int32_t>& ids) {
  std::string s;
  for (int32_t id : ids) s += static_cast<char>(id);
  return s;
}

// Waits until `pred(metrics)` holds (metrics are published after each step).
bool wait_metrics(Engine& engine, const std::function<bool(const EngineMetrics&)>& pred) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (std::chrono::steady_clock::now() < deadline) {
    if (pred(engine.metrics())) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  return false;
}

// Script model: a one-token prompt selects the output bytes; after the script, EOS.
NextTokenFn script_model(std::map<int32_t, std::vector<int32_t>> scripts) {
  return [scripts](const std::vector<int32_t>& context) {
    const auto& script = scripts.at(context[0]);
    const size_t i = context.size() - 1;
    return i < script.size() ? script[i] : kEosId;
  };
}

TEST(EngineTest, GreedyOutputsEqualTheReference) {
  auto t = make_engine(testing::hash_next_token);
  std::vector<std::vector<int32_t>> prompts = {ids_of("hello"), ids_of("hello world, again"),
                                               ids_of("x"), ids_of("hello wor")};
  std::vector<std::shared_ptr<RequestStream>> streams;
  std::vector<Collected> last_collected;
  for (const auto& p : prompts) {
    if (streams.size() == 3) {
      // After the first three finish, so "hello wor" finds "hello..."'s first page published.
      for (auto& s : streams) last_collected.push_back(collect(*s));
    }
    auto s = t.engine->submit(greedy_request(p, 12));
    ASSERT_TRUE(s.ok()) << s.status().to_string();
    streams.push_back(*s);
  }
  for (size_t i = 0; i < prompts.size(); ++i) {
    const Collected c = i < 3 ? last_collected[i] : collect(*streams[i]);
    ASSERT_TRUE(c.finished);
    const auto expected = testing::reference_greedy(testing::hash_next_token, prompts[i], 12, {});
    EXPECT_EQ(c.token_ids, expected) << "prompt " << i;
    EXPECT_EQ(c.text, text_of(expected));
    EXPECT_EQ(c.last.finish_reason, "length");
    EXPECT_EQ(c.last.num_output_tokens, 12);
    EXPECT_EQ(c.last.num_prompt_tokens, static_cast<int32_t>(prompts[i].size()));
    ASSERT_TRUE(c.last.first_token_time_ms.has_value());
    EXPECT_GE(*c.last.first_token_time_ms, c.last.arrival_time_ms);
    EXPECT_GE(c.last.last_token_time_ms, *c.last.first_token_time_ms);
  }
  EXPECT_TRUE(wait_metrics(*t.engine, [](const EngineMetrics& m) { return m.pages_in_use == 0; }));
  const EngineMetrics m = t.engine->metrics();
  EXPECT_EQ(m.requests_finished_length, 4);
  EXPECT_EQ(m.generation_tokens_total, 48);
  // Greedy without logprobs: every token came from the backend's argmax, no logits row.
  EXPECT_EQ(t.backend->num_argmax_rows.load(), 48);
  EXPECT_EQ(m.ttft_ms.count, 4);
  EXPECT_EQ(m.e2e_ms.count, 4);
  EXPECT_EQ(m.tpot_ms.count, 4);
  EXPECT_GT(m.prefix_hit_rate(), 0.0);  // "hello wor" shares a full page with "hello..."
  EXPECT_EQ(m.pages_total, 64);
  // Step time accounting: the forward and the sampling are parts of the steps.
  EXPECT_GT(m.forward_seconds, 0.0);
  EXPECT_GT(m.sample_seconds, 0.0);
  EXPECT_GE(m.step_seconds, m.forward_seconds + m.sample_seconds);
  // The backend's counters as of the last step (FakeBackend::stats counts its forwards).
  const model::BackendStats b = t.backend->stats();
  EXPECT_GT(b.graph_replays, 0);
  EXPECT_EQ(m.backend.graph_replays, b.graph_replays);
  EXPECT_EQ(m.backend.capture_seconds, b.capture_seconds);
}

// The default max_model_len is the model's context length (model_context_length: yarn's
// original positions x factor), an explicit one wins; prompt + max_tokens beyond it is refused.
TEST(EngineTest, DefaultMaxModelLenIsTheModelsContextLength) {
  EXPECT_EQ(make_engine(testing::hash_next_token).engine->max_model_len(), 4096);
  EngineSetup s;
  model::RopeScaling yarn;  // only the type, factor and original context matter here
  yarn.type = model::RopeType::kYarn;
  yarn.factor = 4.0;
  yarn.original_max_position_embeddings = 2000;
  s.rope_scaling = yarn;
  TestEngine t = make_engine(testing::hash_next_token, s);
  EXPECT_EQ(t.engine->max_model_len(), 8000);
  auto refused = t.engine->submit(greedy_request(ids_of("hello"), 7996));
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(refused.status().message().find("8000"), std::string::npos)
      << refused.status().to_string();
  s.max_model_len = 100;
  EXPECT_EQ(make_engine(testing::hash_next_token, s).engine->max_model_len(), 100);
}

// A model whose sliding window is shorter than its positions (Mistral-7B-v0.1: 4096 of 32768)
// is served within the window, where full causal attention is the same computation: the
// default max_model_len is the window, a shorter explicit one wins, a longer one is refused
// naming the field, and a request past the window is refused.
TEST(EngineTest, SlidingWindowModelIsServedWithinItsWindow) {
  const auto create = [](int64_t window, int32_t max_model_len) {
    EngineConfig config;
    config.kv.num_pages = 64;
    config.kv.page_size = 4;
    config.max_model_len = max_model_len;
    auto backend = std::make_unique<FakeBackend>(kVocab, 64, 4, testing::hash_next_token);
    backend->set_sliding_window(window);
    return Engine::create(config, std::move(backend), testing::make_test_tokenizer());
  };
  auto windowed = create(1000, 0);
  ASSERT_TRUE(windowed.ok()) << windowed.status().to_string();
  EXPECT_EQ((*windowed)->max_model_len(), 1000);
  auto refused = (*windowed)->submit(greedy_request(ids_of("hello"), 996));
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.status().message().find("1000"), std::string::npos)
      << refused.status().to_string();
  auto fits = (*windowed)->submit(greedy_request(ids_of("hello"), 3));
  ASSERT_TRUE(fits.ok());
  EXPECT_EQ(collect(**fits).token_ids.size(), 3u);
  (*windowed)->stop();
  auto shorter = create(1000, 600);
  ASSERT_TRUE(shorter.ok());
  EXPECT_EQ((*shorter)->max_model_len(), 600);
  auto longer = create(1000, 1001);
  ASSERT_FALSE(longer.ok());
  EXPECT_EQ(longer.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(longer.status().message().find("max_model_len: 1001 > the model's sliding_window 1000"),
            std::string::npos)
      << longer.status().to_string();
}

TEST(EngineTest, ConcurrentSubmitsFromSeveralThreads) {
  EngineSetup s;
  s.num_pages = 48;  // tight enough that some steps preempt
  s.max_num_batched_tokens = 24;
  auto t = make_engine(testing::hash_next_token, s);
  constexpr int kThreads = 4, kPerThread = 12;
  std::vector<std::thread> threads;
  std::atomic<int> mismatches{0}, done{0};
  for (int th = 0; th < kThreads; ++th) {
    threads.emplace_back([&, th] {
      std::vector<std::pair<std::vector<int32_t>, std::shared_ptr<RequestStream>>> mine;
      for (int i = 0; i < kPerThread; ++i) {
        std::vector<int32_t> prompt = ids_of("req " + std::to_string(th) + "/" + std::to_string(i));
        if (i % 3 == 0) prompt = ids_of("shared prefix of many " + std::to_string(i));
        auto stream = t.engine->submit(greedy_request(prompt, 5 + i % 7));
        if (!stream.ok()) {
          ++mismatches;
          continue;
        }
        mine.emplace_back(prompt, *stream);
      }
      for (auto& [prompt, stream] : mine) {
        const Collected c = collect(*stream);
        const auto expected = testing::reference_greedy(testing::hash_next_token, prompt,
                                                        c.last.num_output_tokens, {});
        if (!c.finished || c.token_ids != expected || c.last.finish_reason != "length") {
          ++mismatches;
        }
        ++done;
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(mismatches.load(), 0);
  EXPECT_EQ(done.load(), kThreads * kPerThread);
  EXPECT_TRUE(wait_metrics(*t.engine, [](const EngineMetrics& m) {
    return m.pages_in_use == 0 && m.num_running == 0 && m.num_waiting == 0;
  }));
  EXPECT_EQ(t.engine->metrics().requests_finished_length, kThreads * kPerThread);
}

TEST(EngineTest, CancelMidStreamReturnsPages) {
  auto t = make_engine(testing::hash_next_token);
  t.backend->step_sleep_ms = 2;
  auto s = t.engine->submit(greedy_request(ids_of("a long one"), 2000));
  ASSERT_TRUE(s.ok());
  auto first = (*s)->next(std::chrono::seconds(10));
  ASSERT_TRUE(first.has_value());
  EXPECT_FALSE(first->finished);
  EXPECT_TRUE(wait_metrics(*t.engine, [](const EngineMetrics& m) { return m.pages_in_use > 0; }));
  t.engine->cancel((*s)->id());
  const Collected c = collect(**s);
  ASSERT_TRUE(c.finished);
  EXPECT_EQ(c.last.finish_reason, "cancelled");
  EXPECT_TRUE(wait_metrics(*t.engine, [](const EngineMetrics& m) { return m.pages_in_use == 0; }));
  EXPECT_EQ(t.engine->metrics().requests_cancelled, 1);
  t.engine->cancel(12345);       // unknown: ignored
  t.engine->cancel((*s)->id());  // finished: ignored
}

TEST(EngineTest, StopStringAcrossTokenBoundariesIsExcluded) {
  auto t = make_engine(
      script_model({{'A', ids_of("hi ENX then END world")}, {'B', ids_of("no stop here")}}));
  GenerateRequest r = greedy_request({'A'}, 40);
  r.sampling.stop = {"END", "zzz"};
  auto a = t.engine->submit(r);
  r.prompt_token_ids = {'B'};
  auto b = t.engine->submit(r);
  ASSERT_TRUE(a.ok() && b.ok());
  const Collected ca = collect(**a);
  EXPECT_EQ(ca.text, "hi ENX then ");
  EXPECT_EQ(ca.last.finish_reason, "stop");
  // The tokens up to the one completing the stop string were produced.
  EXPECT_EQ(ca.token_ids, ids_of("hi ENX then END"));
  for (const std::string& d : ca.deltas)
    EXPECT_EQ(d.find('E', d.find("EN") + 3), std::string::npos);
  const Collected cb = collect(**b);
  EXPECT_EQ(cb.text, "no stop here");  // EOS ends it; EOS adds no text
  EXPECT_EQ(cb.last.finish_reason, "stop");
  EXPECT_EQ(cb.token_ids.back(), kEosId);
  EXPECT_TRUE(wait_metrics(*t.engine, [](const EngineMetrics& m) { return m.pages_in_use == 0; }));
  EXPECT_EQ(t.engine->metrics().requests_finished_stop, 2);
}

TEST(EngineTest, IncludeStopStrInOutputKeepsTheMatch) {
  auto t = make_engine(script_model({{'A', ids_of("hi ENX then END world")}}));
  GenerateRequest r = greedy_request({'A'}, 40);
  r.sampling.stop = {"END", "zzz"};
  r.sampling.include_stop_str_in_output = true;
  auto a = t.engine->submit(r);
  ASSERT_TRUE(a.ok());
  const Collected ca = collect(**a);
  EXPECT_EQ(ca.text, "hi ENX then END");
  EXPECT_EQ(ca.last.finish_reason, "stop");
  EXPECT_EQ(ca.token_ids, ids_of("hi ENX then END"));
}

TEST(EngineTest, Utf8IsNeverSplitAcrossUpdates) {
  const std::string text = "e\xC3\xA9\xE2\x82\xAC\xF0\x9F\x98\x80!";  // e é € 😀 !
  auto t = make_engine(script_model({{'U', ids_of(text)}}));
  auto s = t.engine->submit(greedy_request({'U'}, 30));
  ASSERT_TRUE(s.ok());
  const Collected c = collect(**s);
  EXPECT_EQ(c.text, text);
  for (const std::string& d : c.deltas) EXPECT_TRUE(tokenizer::validate_utf8(d).ok()) << d;
  EXPECT_GT(c.num_updates, 3);  // streamed, not one final blob
}

TEST(EngineTest, MaxTokensAndIgnoreEos) {
  auto t = make_engine(script_model({{'E', ids_of("ab")}}));
  auto a = t.engine->submit(greedy_request({'E'}, 30));
  GenerateRequest r = greedy_request({'E'}, 5);
  r.sampling.ignore_eos = true;
  auto b = t.engine->submit(r);
  ASSERT_TRUE(a.ok() && b.ok());
  const Collected ca = collect(**a);
  EXPECT_EQ(ca.token_ids, (std::vector<int32_t>{'a', 'b', kEosId}));
  EXPECT_EQ(ca.text, "ab");
  EXPECT_EQ(ca.last.finish_reason, "stop");
  const Collected cb = collect(**b);
  EXPECT_EQ(cb.token_ids.size(), 5u);
  EXPECT_EQ(cb.last.finish_reason, "length");
  // stop_token_ids: 'b' stops it (and counts as an output token, without text).
  r = greedy_request({'E'}, 30);
  r.sampling.stop_token_ids = {'b'};
  auto c = t.engine->submit(r);
  ASSERT_TRUE(c.ok());
  const Collected cc = collect(**c);
  EXPECT_EQ(cc.token_ids, (std::vector<int32_t>{'a', 'b'}));
  EXPECT_EQ(cc.text, "a");
  EXPECT_EQ(cc.last.finish_reason, "stop");
}

// skip_special_tokens (default true) leaves special tokens out of the text; false keeps them
// (Mistral's [TOOL_CALLS] for the server's parser). The EOS that stops a request is never text.
TEST(EngineTest, SpecialTokensAreTextOnlyWhenAsked) {
  constexpr int32_t kSpecialBos = 302;  // "<s>", special in the test tokenizer
  auto t = make_engine(script_model({{'E', {'a', kSpecialBos, 'b'}}}));
  auto skipped = t.engine->submit(greedy_request({'E'}, 30));
  GenerateRequest r = greedy_request({'E'}, 30);
  r.sampling.skip_special_tokens = false;
  auto kept = t.engine->submit(r);
  ASSERT_TRUE(skipped.ok() && kept.ok());
  const Collected cs = collect(**skipped);
  const Collected ck = collect(**kept);
  EXPECT_EQ(cs.token_ids, (std::vector<int32_t>{'a', kSpecialBos, 'b', kEosId}));
  EXPECT_EQ(ck.token_ids, cs.token_ids);
  EXPECT_EQ(cs.text, "ab");
  EXPECT_EQ(ck.text, "a<s>b");
}

TEST(EngineTest, QueueFullIsResourceExhausted) {
  EngineSetup s;
  s.max_waiting_requests = 2;
  auto t = make_engine(testing::hash_next_token, s);
  t.backend->block();
  auto first = t.engine->submit(greedy_request(ids_of("one"), 3));
  ASSERT_TRUE(first.ok());
  t.backend->wait_entered(1);  // the engine thread is inside forward(): nothing more is taken
  auto second = t.engine->submit(greedy_request(ids_of("two"), 3));
  auto third = t.engine->submit(greedy_request(ids_of("three"), 3));
  auto fourth = t.engine->submit(greedy_request(ids_of("four"), 3));
  EXPECT_TRUE(second.ok());
  EXPECT_TRUE(third.ok());
  ASSERT_FALSE(fourth.ok());
  EXPECT_EQ(fourth.status().code(), StatusCode::kResourceExhausted);
  EXPECT_NE(fourth.status().message().find("max_waiting_requests"), std::string::npos);
  t.backend->unblock();
  EXPECT_TRUE(collect(**first).finished);
  EXPECT_TRUE(collect(**second).finished);
  EXPECT_TRUE(collect(**third).finished);
  EXPECT_EQ(t.engine->metrics().requests_rejected, 1);
}

void expect_invalid(Engine& engine, GenerateRequest r, const std::string& field) {
  auto s = engine.submit(std::move(r));
  ASSERT_FALSE(s.ok()) << field;
  EXPECT_EQ(s.status().code(), StatusCode::kInvalidArgument) << field;
  EXPECT_EQ(s.status().message().rfind(field, 0), 0u) << s.status().message();
}

TEST(EngineTest, InvalidRequestsNameTheField) {
  auto t = make_engine(testing::hash_next_token);
  Engine& e = *t.engine;
  expect_invalid(e, greedy_request({}, 3), "prompt_token_ids");
  expect_invalid(e, greedy_request({1, 2, 308}, 3), "prompt_token_ids[2]");
  expect_invalid(e, greedy_request({1, -1}, 3), "prompt_token_ids[1]");
  expect_invalid(e, greedy_request({1}, 0), "max_tokens");
  expect_invalid(e, greedy_request({1, 2}, 4095), "max_tokens");  // 2 + 4095 > 4096
  GenerateRequest r = greedy_request({1}, 3);
  r.sampling.temperature = std::nan("");
  expect_invalid(e, r, "temperature");
  r.sampling.temperature = -0.5;
  expect_invalid(e, r, "temperature");
  r = greedy_request({1}, 3);
  r.sampling.top_p = 0.0;
  expect_invalid(e, r, "top_p");
  r.sampling.top_p = 1.5;
  expect_invalid(e, r, "top_p");
  r = greedy_request({1}, 3);
  r.sampling.top_k = -1;
  expect_invalid(e, r, "top_k");
  r = greedy_request({1}, 3);
  r.sampling.min_p = 2.0;
  expect_invalid(e, r, "min_p");
  r = greedy_request({1}, 3);
  r.sampling.stop = {"ok", ""};
  expect_invalid(e, r, "stop[1]");
  r.sampling.stop = {"\xC3"};
  expect_invalid(e, r, "stop[0]");
  r = greedy_request({1}, 3);
  r.sampling.stop_token_ids = {5, 400};
  expect_invalid(e, r, "stop_token_ids[1]");
  r = greedy_request({1}, 3);
  r.sampling.top_logprobs = 2;  // without logprobs
  expect_invalid(e, r, "top_logprobs");
  r.sampling.logprobs = true;
  r.sampling.top_logprobs = kMaxTopLogprobs + 1;
  expect_invalid(e, r, "top_logprobs");
  r = greedy_request({1}, 3);
  r.sampling.prompt_logprobs = kMaxTopLogprobs + 1;
  expect_invalid(e, r, "prompt_logprobs");
  r.sampling.prompt_logprobs = -2;
  expect_invalid(e, r, "prompt_logprobs");
  r = greedy_request({1}, 3);
  r.sampling.min_tokens = 4;
  expect_invalid(e, r, "min_tokens");
  r.sampling.min_tokens = -1;
  expect_invalid(e, r, "min_tokens");
  r = greedy_request({1}, 3);
  r.sampling.presence_penalty = 2.5;
  expect_invalid(e, r, "presence_penalty");
  r.sampling.presence_penalty = 0.0;
  r.sampling.frequency_penalty = std::nan("");
  expect_invalid(e, r, "frequency_penalty");
  r.sampling.frequency_penalty = 0.0;
  r.sampling.repetition_penalty = 0.0;
  expect_invalid(e, r, "repetition_penalty");
  r.sampling.repetition_penalty = std::numeric_limits<double>::infinity();
  expect_invalid(e, r, "repetition_penalty");
  r = greedy_request({1}, 3);
  r.sampling.logit_bias = {{5, 1.0}, {400, 2.0}};
  expect_invalid(e, r, "logit_bias[400]");
  r.sampling.logit_bias = {{5, 100.5}};
  expect_invalid(e, r, "logit_bias[5]");
  r.sampling.logit_bias = {{5, 1.0}, {5, 2.0}};
  expect_invalid(e, r, "logit_bias[5]");
  r.sampling.logit_bias.assign(kMaxLogitBias + 1, {1, 0.0});
  expect_invalid(e, r, "logit_bias");
  EXPECT_EQ(e.metrics().requests_rejected, 28);
  // Nothing was admitted.
  EXPECT_EQ(e.metrics().num_waiting, 0);
  e.drain(std::chrono::milliseconds(100));
  auto late = e.submit(greedy_request({1}, 3));
  ASSERT_FALSE(late.ok());
  EXPECT_EQ(late.status().code(), StatusCode::kFailedPrecondition);
}

TEST(EngineTest, BackendErrorFailsOnlyThatStepsRequests) {
  auto t = make_engine(testing::hash_next_token);
  t.backend->fail_on_token = '~';
  auto poison = t.engine->submit(greedy_request(ids_of("~bad"), 5));
  ASSERT_TRUE(poison.ok());
  const Collected cp = collect(**poison);
  ASSERT_TRUE(cp.finished);
  EXPECT_EQ(cp.last.finish_reason, "error");
  EXPECT_NE(cp.last.error.find("poison"), std::string::npos);
  // The engine goes on.
  auto good = t.engine->submit(greedy_request(ids_of("good"), 6));
  ASSERT_TRUE(good.ok());
  const Collected cg = collect(**good);
  EXPECT_EQ(cg.last.finish_reason, "length");
  EXPECT_EQ(cg.token_ids,
            testing::reference_greedy(testing::hash_next_token, ids_of("good"), 6, {}));
  EXPECT_TRUE(wait_metrics(*t.engine, [](const EngineMetrics& m) { return m.pages_in_use == 0; }));
  EXPECT_EQ(t.engine->metrics().requests_error, 1);
}

// A backend's argmax or sampled id outside the vocabulary, or too few alternatives, fails the
// step's requests with the cause; later requests run.
TEST(EngineTest, ArgmaxOrSampledIdOutsideTheVocabularyFailsTheStep) {
  auto t = make_engine(testing::hash_next_token);
  t.backend->bad_argmax = true;
  // Runs the request to its end, which is an error naming `cause`.
  const auto fails_with = [&](const GenerateRequest& request, const std::string& cause) {
    auto s = t.engine->submit(request);
    EXPECT_TRUE(s.ok());
    if (!s.ok()) return Collected{};
    Collected c = collect(**s);
    EXPECT_EQ(c.last.finish_reason, "error");
    EXPECT_NE(c.last.error.find(cause), std::string::npos) << c.last.error;
    return c;
  };
  const Collected cb = fails_with(greedy_request(ids_of("argmax"), 5),
                                  "returned argmax id 308, expected in [0, vocab_size = 308)");
  ASSERT_TRUE(cb.finished);
  EXPECT_TRUE(cb.token_ids.empty());
  // A sampled id out of range as well.
  GenerateRequest warm = greedy_request(ids_of("sampled"), 5);
  warm.sampling.temperature = 1.0;
  fails_with(warm, "returned sampled id -1, expected in [0, vocab_size = 308)");
  // Too few alternatives for a top_logprobs row.
  GenerateRequest top = warm;
  top.sampling.logprobs = true;
  top.sampling.top_logprobs = 3;
  fails_with(top, "returned 2 top_logprobs for sampled row 0, expected 3");
  t.backend->bad_argmax = false;
  auto good = t.engine->submit(greedy_request(ids_of("good"), 3));
  ASSERT_TRUE(good.ok());
  EXPECT_EQ(collect(**good).token_ids,
            testing::reference_greedy(testing::hash_next_token, ids_of("good"), 3, {}));
  EXPECT_TRUE(wait_metrics(*t.engine, [](const EngineMetrics& m) { return m.pages_in_use == 0; }));
}

TEST(EngineTest, BadSamplerThreadsIsAClearError) {
  for (int32_t threads : {-1, 65}) {
    EngineConfig config;
    config.kv.num_pages = 16;
    config.kv.page_size = 4;
    config.num_sampler_threads = threads;
    auto created = Engine::create(
        config, std::make_unique<FakeBackend>(kVocab, 16, 4, testing::hash_next_token),
        testing::make_test_tokenizer());
    ASSERT_FALSE(created.ok());
    EXPECT_EQ(created.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(created.status().message().find("num_sampler_threads"), std::string::npos)
        << created.status().message();
  }
}

// Submits n other requests (prompt "other <37 i>", 3 + i tokens) with sampling set by
// set(params, i): company for a request under test.
std::vector<std::shared_ptr<RequestStream>> submit_others(
    Engine& engine, int n, const std::function<void(SamplingParams&, int)>& set) {
  std::vector<std::shared_ptr<RequestStream>> others;
  for (int i = 0; i < n; ++i) {
    GenerateRequest o = greedy_request(ids_of("other " + std::to_string(i * 37)), 3 + i);
    set(o.sampling, i);
    others.push_back(*engine.submit(o));
  }
  return others;
}

TEST(EngineTest, SameSeedSameTokensAcrossBatchCompositions) {
  auto run = [](int num_others, int32_t sampler_threads) {
    EngineSetup setup;
    setup.num_sampler_threads = sampler_threads;
    auto t = make_engine(testing::hash_next_token, setup);
    const auto others =
        submit_others(*t.engine, num_others, [](SamplingParams& p, int) { p.temperature = 1.0; });
    GenerateRequest r = greedy_request(ids_of("seeded"), 40);
    r.sampling.temperature = 1.0;
    r.sampling.seed = 42;
    r.sampling.logprobs = true;
    auto s = t.engine->submit(r);
    EXPECT_TRUE(s.ok());
    Collected c = collect(**s);
    for (auto& o : others) collect(*o);
    return c;
  };
  const Collected alone = run(0, 1);
  // The rows of a step are sampled on several threads: still the same tokens.
  for (int32_t threads : {1, 4}) {
    const Collected crowded = run(7, threads);
    EXPECT_EQ(alone.token_ids, crowded.token_ids) << threads << " sampler threads";
    EXPECT_EQ(alone.logprobs, crowded.logprobs) << threads << " sampler threads";
  }
  // Temperature 1 departs from greedy somewhere in 40 tokens (p(peak) ~ 0.9 each).
  EXPECT_NE(alone.token_ids,
            testing::reference_greedy(testing::hash_next_token, ids_of("seeded"), 40, {}));
}

// Rows drawn by the backend (kOutputSample) give the same tokens and logprobs as the host
// sampler on the logits: same seed, same draws, whatever the batch; min-p, top-k, top-p and
// greedy with logprobs included.
TEST(EngineTest, BackendSamplingGivesTheHostSamplersTokens) {
  auto run = [](bool backend_sampling, int num_others) {
    EngineSetup setup;
    setup.backend_sampling = backend_sampling;
    auto t = make_engine(testing::hash_next_token, setup);
    const auto others = submit_others(*t.engine, num_others, [](SamplingParams& p, int i) {
      p.temperature = 0.5 + 0.25 * i;
      if (i % 3 == 1) p.top_p = 0.8;
    });
    std::vector<Collected> seeded;
    std::vector<std::shared_ptr<RequestStream>> streams;
    for (int mode = 0; mode < 5; ++mode) {
      GenerateRequest r = greedy_request(ids_of("seeded"), 40);
      r.sampling.temperature = mode == 4 ? 0.0 : 2.0;
      r.sampling.min_p = mode == 1 ? 0.2 : 0.0;
      r.sampling.top_k = mode == 2 ? 5 : 0;
      r.sampling.top_p = mode == 3 ? 0.7 : 1.0;
      r.sampling.logprobs = mode >= 2;
      r.sampling.seed = 42;
      streams.push_back(*t.engine->submit(r));
    }
    for (auto& s : streams) seeded.push_back(collect(*s));
    for (auto& o : others) collect(*o);
    return std::pair{seeded, t.backend->num_sample_rows.load()};
  };
  const auto [host, host_rows] = run(false, 0);
  EXPECT_EQ(host_rows, 0);
  for (int others : {0, 6}) {
    const auto [backend, backend_rows] = run(true, others);
    ASSERT_EQ(backend.size(), 5u);
    for (size_t mode = 0; mode < 5; ++mode) {
      EXPECT_EQ(backend[mode].token_ids, host[mode].token_ids) << others << " others";
      EXPECT_EQ(backend[mode].logprobs, host[mode].logprobs) << others << " others";
    }
    EXPECT_GE(backend_rows, 200);  // every token of the five seeded requests
  }
  EXPECT_EQ(host[0].token_ids.size(), 40u);
  EXPECT_EQ(host[2].logprobs.size(), 40u);
  for (size_t mode = 2; mode < 4; ++mode) EXPECT_NE(host[mode].token_ids, host[0].token_ids);
  // Temperature 2 departs from greedy, and min-p 0.2 changes the draws.
  EXPECT_NE(host[0].token_ids,
            testing::reference_greedy(testing::hash_next_token, ids_of("seeded"), 40, {}));
  EXPECT_NE(host[0].token_ids, host[1].token_ids);
}

TEST(EngineTest, LogprobsAndCapturedLogitsMatchTheModel) {
  auto t = make_engine(testing::hash_next_token);
  GenerateRequest r = greedy_request(ids_of("logits"), 4);
  r.sampling.logprobs = true;
  r.return_last_prompt_logits = true;
  auto s = t.engine->submit(r);
  ASSERT_TRUE(s.ok());
  const Collected c = collect(**s);
  ASSERT_EQ(c.logprobs.size(), 4u);
  std::vector<int32_t> context = ids_of("logits");
  EXPECT_EQ(c.last_prompt_logits, model_row(context));
  for (size_t i = 0; i < 4; ++i) {
    EXPECT_NEAR(c.logprobs[i], log_softmax64(model_row(context), c.token_ids[i]), 1e-6);
    context.push_back(c.token_ids[i]);
  }
  EXPECT_EQ(t.backend->num_argmax_rows.load(), 0);  // logprobs need the logits rows
}

// top_logprobs: each token carries the k most likely tokens of its row with their raw
// logprobs (float64 reference), the sampled one's equal to its own logprob; the backend finds
// them beside its draw (or the host from the row's logits without backend sampling), and the
// tokens are those of the same request without alternatives.
TEST(EngineTest, TopLogprobsAreTheRowsMostLikelyTokens) {
  for (const double temperature : {0.0, 0.8})
    for (const bool backend_sampling : {true, false}) {
      SCOPED_TRACE("temperature " + std::to_string(temperature) +
                   (backend_sampling ? ", backend draws" : ", host draws"));
      EngineSetup setup;
      setup.backend_sampling = backend_sampling;
      auto t = make_engine(testing::hash_next_token, setup);
      GenerateRequest r = greedy_request(ids_of("alternatives"), 6);
      r.sampling.temperature = temperature;
      r.sampling.seed = 11;
      r.sampling.logprobs = true;
      GenerateRequest plain = r;
      r.sampling.top_logprobs = 5;
      auto s = t.engine->submit(r);
      ASSERT_TRUE(s.ok());
      const Collected c = collect(**s);
      ASSERT_EQ(c.token_ids.size(), 6u);
      ASSERT_EQ(c.top_logprobs.size(), 6u);
      EXPECT_EQ(t.backend->num_sample_rows.load(), backend_sampling ? 6 : 0);
      EXPECT_EQ(t.backend->num_argmax_rows.load(), 0);
      auto p = t.engine->submit(plain);
      ASSERT_TRUE(p.ok());
      const Collected without = collect(**p);
      EXPECT_EQ(without.token_ids, c.token_ids);
      EXPECT_EQ(without.logprobs, c.logprobs);
      for (const auto& top : without.top_logprobs) EXPECT_TRUE(top.empty());
      std::vector<int32_t> context = ids_of("alternatives");
      for (size_t i = 0; i < 6; ++i) {
        const std::vector<float> row = model_row(context);
        std::vector<int32_t> order(kVocab);
        for (int32_t v = 0; v < kVocab; ++v) order[static_cast<size_t>(v)] = v;
        std::stable_sort(order.begin(), order.end(), [&](int32_t a, int32_t b) {
          return row[static_cast<size_t>(a)] > row[static_cast<size_t>(b)];
        });
        const auto& top = c.top_logprobs[i];
        ASSERT_EQ(top.size(), 5u);
        for (size_t j = 0; j < 5; ++j) {
          EXPECT_EQ(top[j].token_id, order[j]) << "token " << i << " alternative " << j;
          EXPECT_NEAR(top[j].logprob, log_softmax64(row, order[j]), 1e-6);
          if (top[j].token_id == c.token_ids[i]) {
            EXPECT_EQ(top[j].logprob, c.logprobs[i]);
          }
        }
        if (temperature == 0.0) {
          EXPECT_EQ(top[0].token_id, c.token_ids[i]);
        }
        context.push_back(c.token_ids[i]);
      }
    }
}

// Every prompt token after the first has its score in c.prompt_logprobs: its raw logprob given
// the tokens before it and the k most likely tokens there (float64 reference of the fake
// model's rows).
void expect_prompt_scores(const Collected& c, const std::vector<int32_t>& prompt, int32_t k) {
  EXPECT_EQ(c.num_prompt_logprobs_updates, 1);
  ASSERT_EQ(c.prompt_logprobs.size(), prompt.size() - 1);
  for (size_t i = 0; i + 1 < prompt.size(); ++i) {
    const TokenOutput& got = c.prompt_logprobs[i];
    const std::vector<int32_t> seen(prompt.begin(), prompt.begin() + i + 1);
    const std::vector<float> row = model_row(seen);
    EXPECT_EQ(got.token_id, prompt[i + 1]) << i;
    ASSERT_TRUE(got.logprob.has_value()) << i;
    EXPECT_NEAR(*got.logprob, log_softmax64(row, prompt[i + 1]), 1e-6) << i;
    ASSERT_EQ(got.top_logprobs.size(), static_cast<size_t>(k)) << i;
    for (size_t j = 0; j < got.top_logprobs.size(); ++j) {
      const int32_t id = got.top_logprobs[j].token_id;
      EXPECT_NEAR(got.top_logprobs[j].logprob, log_softmax64(row, id), 1e-6);
      if (j > 0) {
        EXPECT_GE(got.top_logprobs[j - 1].logprob, got.top_logprobs[j].logprob);
      }
    }
    if (k > 0) {
      EXPECT_EQ(got.top_logprobs[0].token_id, testing::hash_next_token(seen)) << i;
    }
  }
}

// prompt_logprobs: the first update carries every prompt token's score (expect_prompt_scores)
// across prefill chunks of 8 tokens; the prompt is computed whole even though a finished
// request left it in the prefix cache, and the output is the plain one's.
TEST(EngineTest, PromptLogprobsScoreEveryPromptTokenOnce) {
  for (const int32_t k : {0, 3}) {
    SCOPED_TRACE("prompt_logprobs " + std::to_string(k));
    EngineSetup setup;
    setup.max_num_batched_tokens = 8;
    auto t = make_engine(testing::hash_next_token, setup);
    const std::vector<int32_t> prompt = ids_of("score each prompt token!");
    const GenerateRequest plain = greedy_request(prompt, 4);
    auto p = t.engine->submit(plain);
    ASSERT_TRUE(p.ok());
    const Collected without = collect(**p);
    EXPECT_TRUE(without.prompt_logprobs.empty());
    const auto idle = [](const EngineMetrics& m) { return m.num_running == 0; };
    ASSERT_TRUE(wait_metrics(*t.engine, idle));
    const EngineMetrics before = t.engine->metrics();
    EXPECT_EQ(before.prefix_lookup_tokens, static_cast<int64_t>(prompt.size()));
    GenerateRequest r = plain;
    r.sampling.prompt_logprobs = k;
    auto s = t.engine->submit(r);
    ASSERT_TRUE(s.ok());
    const Collected c = collect(**s);
    EXPECT_EQ(c.token_ids, without.token_ids);
    EXPECT_EQ(c.last.num_cached_prompt_tokens, 0);
    ASSERT_TRUE(wait_metrics(*t.engine, idle));
    // Not looked up in the prefix cache: the hit counters stay.
    EXPECT_EQ(t.engine->metrics().prefix_lookup_tokens, before.prefix_lookup_tokens);
    EXPECT_EQ(t.engine->metrics().prefix_hit_tokens, before.prefix_hit_tokens);
    expect_prompt_scores(c, prompt, k);
  }
}

// A scored request preempted in the middle of its prefill (a request admitted before it grows
// into the last free pages) computes and scores its prompt again on readmission: one update
// with every prompt token's score, and the plain request's output.
TEST(EngineTest, PromptLogprobsSurvivePreemptionMidPrefill) {
  EngineSetup setup;
  setup.num_pages = 12;  // 48 slots: the two requests need 44 + 44
  setup.max_num_batched_tokens = 4;
  auto t = make_engine(testing::hash_next_token, setup);
  t.backend->step_sleep_ms = 1;  // the first request is still running when the second arrives
  std::vector<int32_t> grower_prompt = ids_of("grow");
  grower_prompt.resize(4, 7);
  GenerateRequest grower = greedy_request(grower_prompt, 40);
  grower.sampling.ignore_eos = true;
  std::vector<int32_t> prompt = ids_of("a forty-token prompt, scored row by row...");
  prompt.resize(40, 11);
  GenerateRequest scored = greedy_request(prompt, 4);
  scored.sampling.ignore_eos = true;
  scored.sampling.prompt_logprobs = 2;
  auto g = t.engine->submit(grower);
  ASSERT_TRUE(g.ok());
  auto s = t.engine->submit(scored);
  ASSERT_TRUE(s.ok());
  const Collected c = collect(**s);
  const Collected grown = collect(**g);
  EXPECT_GE(t.engine->metrics().num_preemptions, 1);
  // Some prompt rows were scored twice: the preemption came before the first output token.
  EXPECT_GT(t.backend->num_scored_rows.load(), static_cast<int64_t>(prompt.size()) - 1);
  EXPECT_EQ(grown.token_ids,
            testing::reference_greedy(testing::hash_next_token, grower_prompt, 40, {}));
  EXPECT_EQ(c.token_ids, testing::reference_greedy(testing::hash_next_token, prompt, 4, {}));
  expect_prompt_scores(c, prompt, 2);
  EXPECT_TRUE(wait_metrics(
      *t.engine, [](const EngineMetrics& m) { return m.pages_in_use == 0 && m.num_running == 0; }));
}

// min_tokens: the first min_tokens greedy tokens are the argmax of the fake model's row with
// the stop tokens (a stop_token_id that is the first greedy token, and EOS) at -inf, the later
// ones of the raw row, and a stop token then ends the request; on the backend's draws and on
// the host's. A stop string is looked for only in the text after the first min_tokens tokens.
TEST(EngineTest, MinTokensHoldsOffStopTokensAndStrings) {
  for (const bool backend_sampling : {true, false}) {
    SCOPED_TRACE(backend_sampling ? "backend draws" : "host draws");
    EngineSetup setup;
    setup.backend_sampling = backend_sampling;
    auto t = make_engine(testing::hash_next_token, setup);
    const std::vector<int32_t> prompt = ids_of("at least");
    const int32_t first = testing::hash_next_token(prompt);
    GenerateRequest r = greedy_request(prompt, 12);
    r.sampling.stop_token_ids = {first};
    auto s = t.engine->submit(r);
    ASSERT_TRUE(s.ok());
    const Collected stopped = collect(**s);
    EXPECT_EQ(stopped.token_ids, std::vector<int32_t>{first});
    EXPECT_EQ(stopped.last.finish_reason, "stop");
    r.sampling.min_tokens = 3;
    s = t.engine->submit(r);
    ASSERT_TRUE(s.ok());
    const Collected c = collect(**s);
    std::vector<int32_t> context = prompt, want;
    for (int32_t i = 0; i < 12; ++i) {
      std::vector<float> row = model_row(context);
      if (i < 3) row[first] = row[testing::kEosId] = -INFINITY;
      const int32_t token = argmax_lowest(row);
      want.push_back(token);
      context.push_back(token);
      if (token == first || token == testing::kEosId) break;
    }
    EXPECT_EQ(c.token_ids, want);
    EXPECT_NE(want[0], first);
    EXPECT_EQ(c.last.finish_reason, want.size() < 12 ? "stop" : "length");

    // The stop string is the first plain greedy token's text: not matched there.
    const std::vector<int32_t> plain =
        testing::reference_greedy(testing::hash_next_token, prompt, 12, {testing::kEosId});
    GenerateRequest str = greedy_request(prompt, 12);
    str.sampling.stop = {std::string(1, static_cast<char>(plain[0]))};
    str.sampling.min_tokens = 2;
    s = t.engine->submit(str);
    ASSERT_TRUE(s.ok());
    const Collected by_string = collect(**s);
    std::string text;
    size_t end = 2;
    while (end < plain.size() && plain[end] != plain[0]) ++end;
    for (size_t i = 0; i < end; ++i) text += static_cast<char>(plain[i]);
    EXPECT_EQ(by_string.text, text);
    EXPECT_EQ(by_string.last.finish_reason, end < plain.size() ? "stop" : "length");
  }
}

// Penalties: every greedy token is the argmax (lowest id on ties) of the fake model's row with
// the float64 reference's penalties (repetition on the prompt's and the output's tokens, the
// other two on the output's); the logprobs stay the raw row's; the rows are the backend's
// draws with the adjustments (ForwardBatch::adjusts), or logits drawn on the host without
// backend sampling; and the tokens differ from plain greedy's.
TEST(EngineTest, PenaltiesSteerGreedyTokens) {
  for (const bool backend_sampling : {true, false}) {
    SCOPED_TRACE(backend_sampling ? "backend draws" : "host draws");
    EngineSetup setup;
    setup.backend_sampling = backend_sampling;
    auto t = make_engine(testing::hash_next_token, setup);
    const std::vector<int32_t> prompt = ids_of("penalties");
    GenerateRequest r = greedy_request(prompt, 16);
    r.sampling.ignore_eos = true;
    r.sampling.logprobs = true;
    r.sampling.presence_penalty = 2.0;
    r.sampling.frequency_penalty = 2.0;
    r.sampling.repetition_penalty = 1.5;
    auto s = t.engine->submit(r);
    ASSERT_TRUE(s.ok());
    const Collected c = collect(**s);
    ASSERT_EQ(c.token_ids.size(), 16u);
    EXPECT_EQ(t.backend->num_argmax_rows.load(), 0);
    EXPECT_EQ(t.backend->num_sample_rows.load(), backend_sampling ? 16 : 0);
    std::vector<int32_t> context = prompt, output;
    for (size_t i = 0; i < 16; ++i) {
      const std::vector<float> row = model_row(context);
      const int32_t want = argmax_lowest(testing::adjusted64(row, r.sampling, prompt, output));
      EXPECT_EQ(c.token_ids[i], want) << i;
      EXPECT_NEAR(c.logprobs[i], log_softmax64(row, want), 1e-6) << i;
      context.push_back(want);
      output.push_back(want);
    }
    EXPECT_NE(c.token_ids, testing::reference_greedy(testing::hash_next_token, prompt, 16, {}));
  }
}

// logit_bias: +100 on 'z' makes every greedy token 'z' (the fake model's best is 8.0 above the
// rest), drawn by the backend; the logprobs stay the raw row's.
TEST(EngineTest, LogitBiasForcesAToken) {
  auto t = make_engine(testing::hash_next_token);
  GenerateRequest r = greedy_request(ids_of("bias"), 6);
  r.sampling.ignore_eos = true;
  r.sampling.logprobs = true;
  r.sampling.logit_bias = {{'z', 100.0}};
  auto s = t.engine->submit(r);
  ASSERT_TRUE(s.ok());
  const Collected c = collect(**s);
  EXPECT_EQ(c.token_ids, std::vector<int32_t>(6, 'z'));
  EXPECT_EQ(t.backend->num_argmax_rows.load(), 0);
  EXPECT_EQ(t.backend->num_sample_rows.load(), 6);
  std::vector<int32_t> context = ids_of("bias");
  for (size_t i = 0; i < c.logprobs.size(); ++i) {
    EXPECT_NEAR(c.logprobs[i], log_softmax64(model_row(context), 'z'), 1e-6) << i;
    context.push_back('z');
  }
}

TEST(EngineTest, GreedyCapturesLogitsOnceThenTakesTheArgmax) {
  auto t = make_engine(testing::hash_next_token);
  GenerateRequest r = greedy_request(ids_of("capture"), 5);
  r.return_last_prompt_logits = true;
  auto s = t.engine->submit(r);
  ASSERT_TRUE(s.ok());
  const Collected c = collect(**s);
  const std::vector<int32_t> context = ids_of("capture");
  EXPECT_EQ(c.last_prompt_logits, model_row(context));
  EXPECT_EQ(c.token_ids, testing::reference_greedy(testing::hash_next_token, context, 5, {}));
  EXPECT_EQ(t.backend->num_argmax_rows.load(), 4);  // the first token sampled from the logits
}

// Submits every greedy request at once; each must end with hash_next_token's reference tokens.
void expect_reference_runs(Engine& engine, std::vector<GenerateRequest> requests) {
  std::vector<std::pair<GenerateRequest, std::shared_ptr<RequestStream>>> runs;
  for (GenerateRequest& r : requests) {
    GenerateRequest copy = r;
    auto stream = engine.submit(std::move(r));
    ASSERT_TRUE(stream.ok()) << stream.status().to_string();
    runs.emplace_back(std::move(copy), *stream);
  }
  for (auto& [r, stream] : runs) {
    const Collected c = collect(*stream);
    ASSERT_TRUE(c.finished);
    EXPECT_EQ(c.token_ids, testing::reference_greedy(testing::hash_next_token, r.prompt_token_ids,
                                                     r.sampling.max_tokens, {}));
  }
}

// A model that mostly repeats itself: the token 3 back, except at every 7th position.
int32_t mostly_periodic(const std::vector<int32_t>& context) {
  const size_t n = context.size();
  return n < 3 || n % 7 == 0 ? static_cast<int32_t>('a' + n % 26) : context[n - 3];
}

// Prompt lookup drafts are verified by their rows' argmax: greedy outputs stay the reference's,
// in fewer steps; requests with logit bias, penalties or min_tokens get no drafts.
TEST(EngineTest, SpeculativeDraftsKeepGreedyOutputsInFewerSteps) {
  EngineSetup setup;
  setup.speculation = {4, 2, 3};
  auto t = make_engine(mostly_periodic, setup);
  const std::vector<std::vector<int32_t>> prompts = {ids_of("abcabcab"), ids_of("xyz"),
                                                     ids_of("hello hello hel")};
  std::vector<std::shared_ptr<RequestStream>> streams;
  for (const auto& p : prompts) {
    auto s = t.engine->submit(greedy_request(p, 40));
    ASSERT_TRUE(s.ok()) << s.status().to_string();
    streams.push_back(*s);
  }
  for (size_t i = 0; i < prompts.size(); ++i) {
    const Collected c = collect(*streams[i]);
    ASSERT_TRUE(c.finished);
    const auto expected = testing::reference_greedy(mostly_periodic, prompts[i], 40, {kEosId});
    EXPECT_EQ(c.token_ids, expected) << "prompt " << i;
    EXPECT_EQ(c.text, text_of(expected));
    EXPECT_EQ(c.last.finish_reason, "length");
    EXPECT_EQ(c.last.num_output_tokens, 40);
  }
  const auto idle = [](const EngineMetrics& m) {
    return m.num_running == 0 && m.pages_in_use == 0;
  };
  ASSERT_TRUE(wait_metrics(*t.engine, idle));
  const EngineMetrics m = t.engine->metrics();
  EXPECT_EQ(m.generation_tokens_total, 120);
  // Every 7th position breaks the period: some drafts are rejected, most are not.
  EXPECT_GT(m.spec_accepted_tokens, 40);
  EXPECT_LT(m.spec_accepted_tokens, m.spec_draft_tokens);
  EXPECT_EQ(t.backend->num_draft_rows.load(), m.spec_draft_tokens);
  EXPECT_EQ(t.backend->num_scored_rows.load(), 0);
  // Each step's decode row gives its accepted drafts plus one token.
  EXPECT_EQ(t.backend->num_argmax_rows.load(), 120 - m.spec_accepted_tokens);

  EngineConfig bad;
  bad.speculation.num_speculative_tokens = sched::kMaxSpeculativeTokens + 1;
  EXPECT_EQ(bad.validate().message().rfind("speculation.num_speculative_tokens: ", 0), 0u)
      << bad.validate().message();

  // Biased, penalized and min_tokens requests decode a token per step: no drafts.
  GenerateRequest biased = greedy_request(prompts[0], 20);
  biased.sampling.temperature = 1.0;
  biased.sampling.seed = 5;
  biased.sampling.logit_bias = {{'a', 0.5}};
  GenerateRequest penalized = greedy_request(prompts[0], 20);
  penalized.sampling.repetition_penalty = 1.5;
  GenerateRequest at_least = greedy_request(prompts[0], 20);
  at_least.sampling.min_tokens = 5;
  for (const GenerateRequest& r : {biased, penalized, at_least}) {
    auto s = t.engine->submit(r);
    ASSERT_TRUE(s.ok());
    EXPECT_EQ(collect(**s).token_ids.size(), 20u);
  }
  ASSERT_TRUE(wait_metrics(*t.engine, idle));
  EXPECT_EQ(t.engine->metrics().spec_draft_tokens, m.spec_draft_tokens);
}

// Every token of `got` has `per_token` alternatives, the same as `want`'s (ids and logprobs).
void expect_same_alternatives(const Collected& got, const Collected& want, size_t per_token) {
  ASSERT_EQ(got.top_logprobs.size(), want.top_logprobs.size());
  for (size_t k = 0; k < got.top_logprobs.size(); ++k) {
    const auto& a = got.top_logprobs[k];
    const auto& b = want.top_logprobs[k];
    ASSERT_EQ(a.size(), per_token) << "token " << k;
    ASSERT_EQ(a.size(), b.size()) << "token " << k;
    for (size_t j = 0; j < a.size(); ++j) {
      EXPECT_EQ(a[j].token_id, b[j].token_id) << "token " << k;
      EXPECT_EQ(a[j].logprob, b[j].logprob) << "token " << k;
    }
  }
}

// A greedy request with logprobs speculates when the backend draws (its drafts' rows are
// draw rows, Executor::verify_drafts): its tokens, logprobs and alternatives are exactly those
// of the run without drafts. Host draws (backend_sampling off) take no drafts.
TEST(EngineTest, SpeculativeDraftsKeepGreedyLogprobs) {
  const std::vector<std::vector<int32_t>> prompts = {ids_of("abcabcab"), ids_of("xyz"),
                                                     ids_of("hello hello hel")};
  const auto run = [&](bool backend_sampling, bool speculate) {
    EngineSetup setup;
    setup.backend_sampling = backend_sampling;
    if (speculate) setup.speculation = {4, 2, 3};
    auto t = make_engine(mostly_periodic, setup);
    std::vector<std::shared_ptr<RequestStream>> streams;
    for (size_t i = 0; i < prompts.size() * 2; ++i) {
      GenerateRequest r = greedy_request(prompts[i % prompts.size()], 30);
      r.sampling.logprobs = true;
      r.sampling.top_logprobs = i < prompts.size() ? 0 : 2;
      auto s = t.engine->submit(r);
      EXPECT_TRUE(s.ok()) << s.status().to_string();
      if (s.ok()) streams.push_back(*s);
    }
    std::vector<Collected> out;
    for (const auto& s : streams) out.push_back(collect(*s));
    EXPECT_TRUE(wait_metrics(*t.engine, [](const EngineMetrics& m) {
      return m.num_running == 0 && m.pages_in_use == 0;
    }));
    const EngineMetrics m = t.engine->metrics();
    EXPECT_EQ(m.spec_draft_tokens > 0, backend_sampling && speculate);
    if (backend_sampling && speculate) {
      EXPECT_GT(m.spec_accepted_tokens, 30);
      EXPECT_LT(m.spec_accepted_tokens, m.spec_draft_tokens);
      EXPECT_EQ(t.backend->num_draft_rows.load(), m.spec_draft_tokens);
      EXPECT_EQ(t.backend->num_scored_rows.load(), 0);
      EXPECT_EQ(t.backend->num_sample_rows.load(), 180 - m.spec_accepted_tokens);
    }
    return out;
  };
  for (const bool backend_sampling : {true, false}) {
    SCOPED_TRACE(backend_sampling ? "backend draws" : "host draws");
    const std::vector<Collected> plain = run(backend_sampling, false);
    const std::vector<Collected> drafted = run(backend_sampling, true);
    ASSERT_EQ(plain.size(), 6u);
    ASSERT_EQ(drafted.size(), 6u);
    for (size_t i = 0; i < plain.size(); ++i) {
      SCOPED_TRACE("request " + std::to_string(i));
      const auto expected =
          testing::reference_greedy(mostly_periodic, prompts[i % prompts.size()], 30, {kEosId});
      EXPECT_EQ(plain[i].token_ids, expected);
      EXPECT_EQ(drafted[i].token_ids, expected);
      EXPECT_EQ(drafted[i].logprobs, plain[i].logprobs);
      ASSERT_EQ(drafted[i].logprobs.size(), 30u);
      expect_same_alternatives(drafted[i], plain[i], i < prompts.size() ? 0u : 2u);
    }
  }
}

// Sampled requests speculate too (rejection sampling of the prompt lookup's drafts,
// Executor::verify_drafts): each row draws with the uniform its token would have had without
// drafts, so a seed gives exactly the tokens, logprobs and alternatives of the run without
// drafts, in fewer steps, with some drafts rejected (the fake model gives its next token
// p = 0.94 at temperature 1). Unseeded requests speculate and finish too.
TEST(EngineTest, SpeculativeDraftsKeepSeededSamples) {
  const std::vector<std::vector<int32_t>> prompts = {ids_of("abcabcab"), ids_of("xyz"),
                                                     ids_of("hello hello hel")};
  const auto run = [&](bool speculate, int64_t* steps) {
    EngineSetup setup;
    if (speculate) setup.speculation = {4, 2, 3};
    auto t = make_engine(mostly_periodic, setup);
    std::vector<std::shared_ptr<RequestStream>> streams;
    for (size_t i = 0; i < prompts.size() * 2; ++i) {
      GenerateRequest r = greedy_request(prompts[i % prompts.size()], 30);
      r.sampling.temperature = 1.0;
      r.sampling.top_p = i % 2 == 0 ? 1.0 : 0.999;
      r.sampling.top_k = i % 3 == 0 ? 0 : 50;
      r.sampling.seed = 11 + i;
      r.sampling.logprobs = i >= prompts.size();
      r.sampling.top_logprobs = i >= prompts.size() ? 2 : 0;
      r.sampling.ignore_eos = true;  // a draw may be the EOS id
      auto s = t.engine->submit(r);
      EXPECT_TRUE(s.ok()) << s.status().to_string();
      if (s.ok()) streams.push_back(*s);
    }
    GenerateRequest unseeded = greedy_request(prompts[0], 30);
    unseeded.sampling.temperature = 1.0;
    unseeded.sampling.ignore_eos = true;
    auto u = t.engine->submit(unseeded);
    EXPECT_TRUE(u.ok());
    std::vector<Collected> out;
    for (const auto& s : streams) out.push_back(collect(*s));
    if (u.ok()) {
      const Collected c = collect(**u);
      EXPECT_TRUE(c.finished);
      EXPECT_EQ(c.token_ids.size(), 30u);
    }
    EXPECT_TRUE(wait_metrics(*t.engine, [](const EngineMetrics& m) {
      return m.num_running == 0 && m.pages_in_use == 0;
    }));
    const EngineMetrics m = t.engine->metrics();
    EXPECT_EQ(m.spec_draft_tokens > 0, speculate);
    if (speculate) {
      EXPECT_GT(m.spec_accepted_tokens, 30);
      EXPECT_LT(m.spec_accepted_tokens, m.spec_draft_tokens);
      EXPECT_EQ(t.backend->num_draft_rows.load(), m.spec_draft_tokens);
      EXPECT_EQ(t.backend->num_sample_rows.load(), 210 - m.spec_accepted_tokens);
    }
    *steps = t.backend->num_sample_rows.load();
    return out;
  };
  int64_t plain_steps = 0, drafted_steps = 0;
  const std::vector<Collected> plain = run(false, &plain_steps);
  const std::vector<Collected> drafted = run(true, &drafted_steps);
  EXPECT_EQ(plain_steps, 210);
  EXPECT_LT(drafted_steps, 150);
  ASSERT_EQ(plain.size(), 6u);
  ASSERT_EQ(drafted.size(), 6u);
  int off_reference = 0;  // tokens other than the model's most likely
  for (size_t i = 0; i < plain.size(); ++i) {
    SCOPED_TRACE("request " + std::to_string(i));
    ASSERT_EQ(plain[i].token_ids.size(), 30u);
    EXPECT_EQ(drafted[i].token_ids, plain[i].token_ids);
    EXPECT_EQ(drafted[i].logprobs, plain[i].logprobs);
    expect_same_alternatives(drafted[i], plain[i], i < prompts.size() ? 0u : 2u);
    std::vector<int32_t> context = prompts[i % prompts.size()];
    for (const int32_t token : plain[i].token_ids) {
      off_reference += token != mostly_periodic(context) ? 1 : 0;
      context.push_back(token);
    }
  }
  EXPECT_GT(off_reference, 0);  // the draws are draws: some tokens are not the argmax
}

// Drafts through preemption (a pool too small for everyone: recompute from prompt + output),
// prefix-cache adoption of shared prompt pages and copy-on-write: every output is still the
// reference's, and every page comes back.
TEST(EngineTest, SpeculativeDraftsSurvivePreemptionAndSharedPrefixes) {
  EngineSetup setup;
  setup.num_pages = 40;
  setup.max_num_batched_tokens = 24;
  setup.speculation = {4, 1, 3};
  auto t = make_engine(mostly_periodic, setup);
  t.backend->block();  // every request is queued before the second step
  std::vector<std::pair<std::vector<int32_t>, std::shared_ptr<RequestStream>>> runs;
  for (int i = 0; i < 24; ++i) {
    std::vector<int32_t> prompt = ids_of("shared prompt, abcabc " + std::to_string(i % 3));
    if (i % 4 == 1) prompt = ids_of("own " + std::to_string(i));
    auto s = t.engine->submit(greedy_request(prompt, 20 + i % 5 * 5));
    ASSERT_TRUE(s.ok()) << s.status().to_string();
    runs.emplace_back(prompt, *s);
  }
  t.backend->unblock();
  for (auto& [prompt, stream] : runs) {
    const Collected c = collect(*stream);
    ASSERT_TRUE(c.finished);
    EXPECT_EQ(c.token_ids, testing::reference_greedy(mostly_periodic, prompt,
                                                     c.last.num_output_tokens, {kEosId}));
    EXPECT_EQ(c.last.finish_reason, "length");
  }
  ASSERT_TRUE(wait_metrics(*t.engine, [](const EngineMetrics& m) {
    return m.pages_in_use == 0 && m.num_running == 0 && m.num_waiting == 0;
  }));
  const EngineMetrics m = t.engine->metrics();
  EXPECT_GT(m.num_preemptions, 0);
  EXPECT_GT(m.prefix_hit_rate(), 0.0);
  EXPECT_GT(m.spec_accepted_tokens, 0);
  EXPECT_EQ(m.requests_finished_length, 24);
}

// A stop string or EOS completed inside a step's accepted drafts ends the output there, as
// without drafts.
TEST(EngineTest, SpeculativeDraftsStopWhereTheOutputStops) {
  // Script: "abcabcabcabcabc", then EOS. The stop string "cabc" ends at output index 5, inside
  // the step that verifies the drafts "bca" (after "sabca", the lookup of "a" finds "bca").
  const NextTokenFn model = script_model({{'s', ids_of("abcabcabcabcabc")}});
  for (const bool speculate : {false, true}) {
    SCOPED_TRACE(speculate ? "speculating" : "one token per step");
    EngineSetup setup;
    if (speculate) setup.speculation = {8, 1, 2};
    auto t = make_engine(model, setup);
    GenerateRequest stopped = greedy_request(ids_of("s"), 30);
    stopped.sampling.stop = {"cabc"};
    auto s = t.engine->submit(stopped);
    ASSERT_TRUE(s.ok());
    const Collected c = collect(**s);
    EXPECT_EQ(c.text, "ab");                   // cut before "cabc"
    EXPECT_EQ(c.token_ids, ids_of("abcabc"));  // not the step's later "ab"
    EXPECT_EQ(c.last.finish_reason, "stop");
    // EOS after the script, also inside the drafts' step: 15 tokens and EOS.
    auto e = t.engine->submit(greedy_request(ids_of("s"), 30));
    ASSERT_TRUE(e.ok());
    const Collected eos = collect(**e);
    EXPECT_EQ(eos.text, "abcabcabcabcabc");
    EXPECT_EQ(eos.last.finish_reason, "stop");
    EXPECT_EQ(eos.last.num_output_tokens, 16);
    const auto idle = [](const EngineMetrics& m) { return m.pages_in_use == 0; };
    ASSERT_TRUE(wait_metrics(*t.engine, idle));
    EXPECT_EQ(t.engine->metrics().spec_draft_tokens > 0, speculate);
  }
}

TEST(EngineTest, AimdStagingReleasesEveryRequest) {
  // Under aimd requests wait in the staging queue; steps with nothing runnable must sleep until
  // the staging deadline and then go on, never stall.
  EngineSetup s;
  s.policy = sched::SchedulingPolicy::kAimd;
  auto t = make_engine(testing::hash_next_token, s);
  std::vector<GenerateRequest> requests;
  for (int i = 0; i < 10; ++i) {
    requests.push_back(greedy_request(ids_of("aimd " + std::to_string(i * 13)), 4));
  }
  expect_reference_runs(*t.engine, std::move(requests));
}

// The priority policy runs requests of any priority to their reference tokens; fcfs refuses a
// priority with an error naming the field, submitting nothing.
TEST(EngineTest, PriorityPolicyTakesPrioritiesAndFcfsRefusesThem) {
  EngineSetup s;
  s.policy = sched::SchedulingPolicy::kPriority;
  auto t = make_engine(testing::hash_next_token, s);
  std::vector<GenerateRequest> requests;
  for (int i = 0; i < 8; ++i) {
    requests.push_back(greedy_request(ids_of("prio " + std::to_string(i * 7)), 4));
    requests.back().priority = (i * 5) % 3 - 1;
  }
  expect_reference_runs(*t.engine, std::move(requests));
  auto fcfs = make_engine(testing::hash_next_token);
  GenerateRequest r = greedy_request({1, 2}, 3);
  r.priority = 2;
  auto refused = fcfs.engine->submit(std::move(r));
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(refused.status().message(),
            "priority: 2 needs the priority scheduling policy (--policy priority); this engine "
            "schedules fcfs");
}

TEST(EngineTest, DrainWaitsThenStopCancels) {
  auto t = make_engine(testing::hash_next_token);
  t.backend->step_sleep_ms = 1;
  auto quick = t.engine->submit(greedy_request(ids_of("quick"), 3));
  auto slow = t.engine->submit(greedy_request(ids_of("slow"), 3000));
  ASSERT_TRUE(quick.ok() && slow.ok());
  t.engine->drain(std::chrono::milliseconds(50));
  const Collected cq = collect(**quick);
  const Collected cs = collect(**slow);
  EXPECT_EQ(cq.last.finish_reason, "length");
  EXPECT_EQ(cs.last.finish_reason, "cancelled");
  t.engine->stop();
  t.engine->stop();  // idempotent
}

// A StreamSignal attached to several streams wakes its waiter on any stream's update; the
// generation taken before polling makes an update between the poll and the wait visible.
TEST(StreamSignalTest, WakesOnAnyAttachedStream) {
  auto signal = std::make_shared<StreamSignal>();
  RequestStream a(1), b(2), detached(3);
  a.attach(signal);
  b.attach(signal);
  const uint64_t g0 = signal->generation();
  EXPECT_EQ(signal->wait(g0, std::chrono::milliseconds(1)), g0);  // nothing: times out
  detached.push(RequestOutput{});
  EXPECT_EQ(signal->generation(), g0);
  std::thread pusher([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    RequestOutput out;
    out.id = 2;
    out.finished = true;
    b.push(std::move(out));
  });
  const uint64_t g1 = signal->wait(g0, std::chrono::seconds(10));
  pusher.join();
  EXPECT_EQ(g1, g0 + 1);
  EXPECT_FALSE(a.next(std::chrono::milliseconds(0)).has_value());
  auto got = b.next(std::chrono::milliseconds(0));
  ASSERT_TRUE(got.has_value());
  EXPECT_TRUE(got->finished);
  // An update pushed before the wait is seen at once: the generation already moved.
  a.push(RequestOutput{});
  EXPECT_EQ(signal->wait(g1, std::chrono::seconds(10)), g1 + 1);
  a.attach(nullptr);
  a.push(RequestOutput{});
  EXPECT_EQ(signal->generation(), g1 + 1);
}

// ---- Structured outputs (engine.h StructuredOutput) ----

GenerateRequest structured_request(std::vector<int32_t> prompt, int32_t max_tokens,
                                   StructuredOutput::Kind kind, std::string spec,
                                   std::vector<std::string> choices = {}) {
  GenerateRequest r = greedy_request(std::move(prompt), max_tokens);
  r.sampling.structured.kind = kind;
  r.sampling.structured.spec = std::move(spec);
  r.sampling.structured.choices = std::move(choices);
  return r;
}

// Greedy under a mask: each token is the argmax of the fake model's row over the tokens the
// constraint allows. "[0-9]{3}": only the ten digit bytes are allowed (no merged token of the
// test vocabulary is made of digits), and after the third the output is complete and nothing
// may follow, so it ends with "stop" without an EOS.
TEST(EngineStructuredTest, RegexGreedyIsTheArgmaxOverTheAllowedTokens) {
  auto t = make_engine(testing::hash_next_token);
  const std::vector<int32_t> prompt = ids_of("hi");
  auto stream =
      t.engine->submit(structured_request(prompt, 10, StructuredOutput::Kind::kRegex, "[0-9]{3}"));
  ASSERT_TRUE(stream.ok()) << stream.status().to_string();
  const Collected c = collect(**stream);
  std::vector<int32_t> context = prompt, want;
  for (int i = 0; i < 3; ++i) {
    const std::vector<float> row = model_row(context);
    int32_t best = '0';
    for (int32_t d = '0'; d <= '9'; ++d) best = row[d] > row[best] ? d : best;
    want.push_back(best);
    context.push_back(best);
  }
  EXPECT_EQ(c.token_ids, want);
  EXPECT_EQ(c.text, text_of(want));
  EXPECT_EQ(c.last.finish_reason, "stop");
  // Constrained greedy rows are argmax rows: their masks went to the backend.
  EXPECT_EQ(t.backend->num_argmax_rows.load(), 3);
  EXPECT_EQ(t.backend->num_masked_rows.load(), 3);
  EXPECT_TRUE(wait_metrics(*t.engine, [](const EngineMetrics& m) { return m.pages_in_use == 0; }));
}

// EOS is allowed exactly where the output is a complete match: a model that wants EOS at once
// writes "a" first under "a+", then ends; under "ab" it writes both bytes and the grammar ends
// the request.
TEST(EngineStructuredTest, EosOnlyWhereTheOutputIsComplete) {
  auto t = make_engine(script_model({{'E', {}}}));
  auto plus = t.engine->submit(structured_request({'E'}, 8, StructuredOutput::Kind::kRegex, "a+"));
  auto ab = t.engine->submit(structured_request({'E'}, 8, StructuredOutput::Kind::kRegex, "ab"));
  ASSERT_TRUE(plus.ok() && ab.ok());
  const Collected p = collect(**plus), q = collect(**ab);
  EXPECT_EQ(p.token_ids, (std::vector<int32_t>{'a', kEosId}));
  EXPECT_EQ(p.text, "a");
  EXPECT_EQ(p.last.finish_reason, "stop");
  EXPECT_EQ(q.token_ids, (std::vector<int32_t>{'a', 'b'}));
  EXPECT_EQ(q.text, "ab");
  EXPECT_EQ(q.last.finish_reason, "stop");
}

// Choices with merged tokens ("lo", "low", "lower" are tokens): the text is one of the choices;
// the logprob of a token the mask leaves alone is log 1 (vLLM reports the masked row's).
TEST(EngineStructuredTest, ChoicesAndTheMaskedRowsLogprobs) {
  auto t = make_engine(testing::hash_next_token);
  for (uint64_t seed = 0; seed < 8; ++seed) {
    GenerateRequest r = structured_request(ids_of("w"), 8, StructuredOutput::Kind::kChoice, "",
                                           {"lower", "low", "lowest"});
    r.sampling.temperature = 1.0;
    r.sampling.seed = seed;
    auto stream = t.engine->submit(std::move(r));
    ASSERT_TRUE(stream.ok());
    const Collected c = collect(**stream);
    EXPECT_TRUE(c.text == "lower" || c.text == "low" || c.text == "lowest") << c.text;
    EXPECT_EQ(c.last.finish_reason, "stop");
  }
  GenerateRequest r =
      structured_request(ids_of("w"), 4, StructuredOutput::Kind::kChoice, "", {"x"});
  r.sampling.logprobs = true;
  auto stream = t.engine->submit(std::move(r));
  ASSERT_TRUE(stream.ok());
  const Collected c = collect(**stream);
  EXPECT_EQ(c.token_ids, (std::vector<int32_t>{'x'}));
  ASSERT_EQ(c.logprobs.size(), 1u);
  EXPECT_NEAR(c.logprobs[0], 0.0f, 1e-6f);
}

// A JSON object under the fake model: when it ends before max_tokens, the text parses as one.
TEST(EngineStructuredTest, JsonObjectAndSchemaOutputsParse) {
  EngineSetup setup;
  setup.num_pages = 256;
  auto t = make_engine(testing::hash_next_token, setup);
  const std::string schema =
      R"({"type":"object","properties":{"ok":{"type":"boolean"},"n":{"enum":[1,2]}},"required":["ok","n"]})";
  int parsed[2] = {0, 0};  // outputs that ended before max_tokens: object, schema
  for (uint64_t seed = 0; seed < 6; ++seed) {
    for (auto kind : {StructuredOutput::Kind::kJsonObject, StructuredOutput::Kind::kJsonSchema}) {
      GenerateRequest r = structured_request(
          ids_of("j"), 200, kind, kind == StructuredOutput::Kind::kJsonSchema ? schema : "");
      r.sampling.temperature = 1.0;
      r.sampling.seed = seed;
      auto stream = t.engine->submit(std::move(r));
      ASSERT_TRUE(stream.ok()) << stream.status().to_string();
      const Collected c = collect(**stream);
      ASSERT_TRUE(c.last.finish_reason == "stop" || c.last.finish_reason == "length")
          << c.last.finish_reason << " " << c.last.error;
      if (c.last.finish_reason != "stop") continue;
      ++parsed[kind == StructuredOutput::Kind::kJsonSchema];
      const auto doc = nlohmann::json::parse(c.text, nullptr, false);
      ASSERT_FALSE(doc.is_discarded()) << c.text;
      ASSERT_TRUE(doc.is_object()) << c.text;
      if (kind == StructuredOutput::Kind::kJsonSchema) {
        EXPECT_TRUE(doc.at("ok").is_boolean()) << c.text;
        EXPECT_TRUE(doc.at("n") == 1 || doc.at("n") == 2) << c.text;
        EXPECT_EQ(doc.size(), 2u) << c.text;
      }
    }
  }
  EXPECT_GT(parsed[0], 0);
  EXPECT_GT(parsed[1], 0);
}

// StructuredOutput::whitespace "" (disable_any_whitespace): the JSON has no whitespace
// outside its strings; the cache keeps it apart from the same constraint with whitespace.
TEST(EngineStructuredTest, JsonWithoutWhitespace) {
  EngineSetup setup;
  setup.num_pages = 256;
  auto t = make_engine(testing::hash_next_token, setup);
  const auto outside_strings_has_space = [](const std::string& text) {
    bool in_string = false, escaped = false;
    for (char ch : text) {
      if (in_string) {
        in_string = escaped || ch != '"';
        escaped = !escaped && ch == '\\';
      } else if (ch == '"') {
        in_string = true;
      } else if (ch == ' ' || ch == '\n' || ch == '\t' || ch == '\r') {
        return true;
      }
    }
    return false;
  };
  int stopped = 0;
  for (uint64_t seed = 0; seed < 6; ++seed) {
    for (auto kind : {StructuredOutput::Kind::kJsonObject, StructuredOutput::Kind::kJsonSchema}) {
      GenerateRequest r = structured_request(
          ids_of("j"), 200, kind,
          kind == StructuredOutput::Kind::kJsonSchema ? R"({"type":"object"})" : "");
      r.sampling.structured.whitespace = "";
      r.sampling.temperature = 1.0;
      r.sampling.seed = seed;
      auto stream = t.engine->submit(std::move(r));
      ASSERT_TRUE(stream.ok()) << stream.status().to_string();
      const Collected c = collect(**stream);
      EXPECT_FALSE(outside_strings_has_space(c.text)) << c.text;
      if (c.last.finish_reason != "stop") continue;
      ++stopped;
      EXPECT_TRUE(nlohmann::json::parse(c.text, nullptr, false).is_object()) << c.text;
    }
  }
  EXPECT_GT(stopped, 0);
}

// allowed_token_ids: every drawn token is one of them, alone or within a structured output;
// an id outside the vocabulary is refused at submit naming it.
TEST(EngineStructuredTest, AllowedTokenIdsBoundEveryDraw) {
  EngineSetup setup;
  setup.num_pages = 256;
  auto t = make_engine(testing::hash_next_token, setup);
  const std::vector<int32_t> allowed = ids_of("xyz");
  for (uint64_t seed = 0; seed < 4; ++seed) {
    GenerateRequest r = greedy_request(ids_of("p"), 12);
    r.sampling.temperature = 1.0;
    r.sampling.seed = seed;
    r.sampling.allowed_token_ids = allowed;
    auto stream = t.engine->submit(r);
    ASSERT_TRUE(stream.ok()) << stream.status().to_string();
    const Collected c = collect(**stream);
    EXPECT_EQ(c.last.finish_reason, "length");  // EOS is not allowed
    ASSERT_EQ(c.token_ids.size(), 12u);
    for (int32_t id : c.token_ids) {
      EXPECT_NE(std::find(allowed.begin(), allowed.end(), id), allowed.end()) << c.text;
    }
  }
  // Within a regex: "x" or "y" repeated, ended by EOS (which the list includes).
  GenerateRequest r =
      structured_request(ids_of("p"), 30, StructuredOutput::Kind::kRegex, "[xyq]{1,5}");
  r.sampling.allowed_token_ids = ids_of("xy");
  r.sampling.allowed_token_ids.push_back(kEosId);
  r.sampling.temperature = 1.0;
  r.sampling.seed = 9;
  auto stream = t.engine->submit(r);
  ASSERT_TRUE(stream.ok()) << stream.status().to_string();
  const Collected c = collect(**stream);
  EXPECT_EQ(c.last.finish_reason, "stop");
  EXPECT_EQ(c.text.find_first_not_of("xy"), std::string::npos) << c.text;
  EXPECT_FALSE(c.text.empty());
  GenerateRequest bad = greedy_request(ids_of("p"), 4);
  bad.sampling.allowed_token_ids = {1, -3};
  const std::string message = t.engine->submit(bad).status().message();
  EXPECT_EQ(message.rfind("allowed_token_ids[1]: expected a token id in [0, ", 0), 0u) << message;
  EXPECT_NE(message.find("), got -3"), std::string::npos) << message;
}

// A structural tag: free text passes as the model writes it, EOS included; after a trigger
// only the structures' begins may follow (the model wanting "<f=c" gets "<f=a" or "<f=b").
TEST(EngineStructuredTest, StructuralTagConstrainsOnlyAfterATrigger) {
  const std::string script = "ok <f=a>{\"x\":7}</f> end";
  auto t = make_engine(script_model({{'A', ids_of(script)}, {'B', ids_of("<f=c>{}")}}));
  const std::string tag =
      R"({"structures":[{"begin":"<f=a>","schema":{"type":"object","properties":)"
      R"({"x":{"type":"integer"}},"required":["x"]},"end":"</f>"},)"
      R"({"begin":"<f=b>","schema":{},"end":"</f>"}],"triggers":["<f="]})";
  auto a =
      t.engine->submit(structured_request({'A'}, 40, StructuredOutput::Kind::kStructuralTag, tag));
  auto b =
      t.engine->submit(structured_request({'B'}, 6, StructuredOutput::Kind::kStructuralTag, tag));
  ASSERT_TRUE(a.ok() && b.ok()) << a.status().to_string() << b.status().to_string();
  const Collected ca = collect(**a), cb = collect(**b);
  EXPECT_EQ(ca.text, script);
  EXPECT_EQ(ca.last.finish_reason, "stop");  // the model's EOS, allowed in free text
  ASSERT_GE(cb.text.size(), 4u) << cb.text;
  EXPECT_EQ(cb.text.substr(0, 3), "<f=");
  EXPECT_TRUE(cb.text[3] == 'a' || cb.text[3] == 'b') << cb.text;
  EXPECT_GT(t.backend->num_masked_rows.load(), 0);
  // A malformed tag is refused at submit, naming the request's field and the tag's.
  GenerateRequest bad = structured_request({'A'}, 4, StructuredOutput::Kind::kStructuralTag,
                                           R"({"structures":[],"triggers":["<"]})");
  bad.sampling.structured.field = "structured_outputs";
  EXPECT_EQ(t.engine->submit(bad).status().message(),
            "structured_outputs: structural_tag: structures: expected a list of 1 to 64 "
            "{begin, schema, end} objects");
}

// bad_words_token_ids: greedy is the argmax of the fake model's row over the tokens no
// sequence bans at that point (a sequence's last token, where the output ends with the rest);
// bad sequences are refused at submit, naming them, and leave no pages behind.
TEST(EngineStructuredTest, BadWordsTokenIdsBanTheLastTokenAfterItsPrefix) {
  auto t = make_engine(testing::hash_next_token);
  const std::vector<int32_t> prompt = ids_of("hi");
  constexpr int32_t kMaxTokens = 8;
  const auto run = [&](const std::vector<std::vector<int32_t>>& banned) {
    GenerateRequest r = greedy_request(prompt, kMaxTokens);
    r.sampling.bad_words_token_ids = banned;
    auto stream = t.engine->submit(r);
    EXPECT_TRUE(stream.ok()) << stream.status().to_string();
    return stream.ok() ? collect(**stream).token_ids : std::vector<int32_t>{};
  };
  // The reference: each step's argmax among the tokens not banned there.
  const auto reference = [&](const std::vector<std::vector<int32_t>>& banned) {
    std::vector<int32_t> context = prompt, out;
    while (static_cast<int32_t>(out.size()) < kMaxTokens) {
      const std::vector<float> row = model_row(context);
      int32_t best = -1;
      for (int32_t tok = 0; tok < kVocab; ++tok) {
        bool is_banned = false;
        for (const std::vector<int32_t>& b : banned) {
          const std::size_t k = b.size() - 1;
          is_banned |= b.back() == tok && k <= out.size() &&
                       std::equal(b.begin(), b.end() - 1, out.end() - static_cast<long>(k));
        }
        if (!is_banned && (best < 0 || row[tok] > row[best])) best = tok;
      }
      out.push_back(best);
      context.push_back(best);
      if (best == kEosId) break;
    }
    return out;
  };
  const std::vector<int32_t> free = run({});
  ASSERT_EQ(free, reference({}));
  ASSERT_GE(free.size(), 3u);
  // The second token after the first: the output starts the same, then turns.
  const std::vector<std::vector<int32_t>> pair = {{free[0], free[1]}};
  const std::vector<int32_t> turned = run(pair);
  EXPECT_EQ(turned, reference(pair));
  ASSERT_GE(turned.size(), 2u);
  EXPECT_EQ(turned[0], free[0]);
  EXPECT_NE(turned[1], free[1]);
  // One-token sequences ban their token everywhere; a sequence whose prefix never comes out
  // changes nothing.
  const std::vector<std::vector<int32_t>> singles = {
      {free[0]}, {free[2]}, {static_cast<int32_t>(kVocab) - 1, free[1]}};
  const std::vector<int32_t> other = run(singles);
  EXPECT_EQ(other, reference(singles));
  for (const int32_t id : other) EXPECT_TRUE(id != free[0] && id != free[2]) << id;
  EXPECT_GT(t.backend->num_masked_rows.load(), 0);

  GenerateRequest empty = greedy_request(prompt, 4);
  empty.sampling.bad_words_token_ids = {{1}, {}};
  EXPECT_EQ(t.engine->submit(empty).status().message(),
            "bad_words_token_ids[1]: expected 1 to 64 token ids, got 0");
  GenerateRequest outside = greedy_request(prompt, 4);
  outside.sampling.bad_words_token_ids = {{1, static_cast<int32_t>(kVocab)}};
  EXPECT_EQ(t.engine->submit(outside).status().message(),
            "bad_words_token_ids[0][1]: expected a token id in [0, " + std::to_string(kVocab) +
                "), got " + std::to_string(kVocab));
  EXPECT_TRUE(wait_metrics(*t.engine, [](const EngineMetrics& m) { return m.pages_in_use == 0; }));
}

// Constrained rows go to the backend with their masks (ForwardBatch::masks): draws there give
// the same tokens, logprobs and alternatives as host draws from the masked logits, with logit
// bias and penalties applied after the mask, requests of several constraints and unconstrained
// ones in the same steps.
TEST(EngineStructuredTest, BackendDrawsUnderMasksEqualHostDraws) {
  struct Run {
    std::vector<Collected> outputs;
    int64_t masked_rows = 0, sample_rows = 0, late_fills = 0;
    EngineMetrics metrics;  // once every step is published
  };
  const auto run = [](bool backend_sampling) {
    EngineSetup setup;
    setup.num_pages = 512;
    setup.backend_sampling = backend_sampling;
    auto t = make_engine(testing::hash_next_token, setup);
    std::vector<std::shared_ptr<RequestStream>> streams;
    for (uint64_t seed = 0; seed < 4; ++seed) {
      for (const auto& [kind, spec] :
           {std::pair{StructuredOutput::Kind::kJsonObject, std::string()},
            std::pair{StructuredOutput::Kind::kRegex, std::string("[a-f]+(x|yz)[0-9]{2,5}")},
            std::pair{StructuredOutput::Kind::kNone, std::string()}}) {
        GenerateRequest r = structured_request(ids_of("js"), 24, kind, spec);
        r.sampling.temperature = 0.9;
        r.sampling.seed = seed;
        r.sampling.logprobs = true;
        r.sampling.top_logprobs = 3;
        r.sampling.frequency_penalty = 0.4;
        r.sampling.logit_bias = {{'"', 1.5}, {'a', -0.5}};
        auto stream = t.engine->submit(std::move(r));
        EXPECT_TRUE(stream.ok()) << stream.status().to_string();
        if (stream.ok()) streams.push_back(std::move(*stream));
      }
    }
    Run out;
    for (auto& s : streams) out.outputs.push_back(collect(*s));
    out.masked_rows = t.backend->num_masked_rows.load();
    out.sample_rows = t.backend->num_sample_rows.load();
    out.late_fills = t.backend->num_late_mask_fills.load();
    const int64_t masked = out.masked_rows;
    EXPECT_TRUE(wait_metrics(*t.engine, [&](const EngineMetrics& m) {
      return m.masked_rows == masked && m.pages_in_use == 0;
    }));
    out.metrics = t.engine->metrics();
    return out;
  };
  const Run host = run(false), dev = run(true);
  EXPECT_EQ(host.masked_rows, 0);
  EXPECT_EQ(host.sample_rows, 0);
  ASSERT_EQ(host.outputs.size(), 12u);
  ASSERT_EQ(dev.outputs.size(), 12u);
  int64_t constrained_tokens = 0;
  for (size_t i = 0; i < host.outputs.size(); ++i) {
    SCOPED_TRACE("request " + std::to_string(i));
    const Collected &h = host.outputs[i], &d = dev.outputs[i];
    EXPECT_EQ(d.token_ids, h.token_ids);
    EXPECT_EQ(d.logprobs, h.logprobs);
    ASSERT_EQ(d.top_logprobs.size(), h.top_logprobs.size());
    for (size_t k = 0; k < h.top_logprobs.size(); ++k) {
      ASSERT_EQ(d.top_logprobs[k].size(), h.top_logprobs[k].size());
      for (size_t j = 0; j < h.top_logprobs[k].size(); ++j) {
        EXPECT_EQ(d.top_logprobs[k][j].token_id, h.top_logprobs[k][j].token_id);
        EXPECT_EQ(d.top_logprobs[k][j].logprob, h.top_logprobs[k][j].logprob);
      }
    }
    EXPECT_EQ(d.last.finish_reason, h.last.finish_reason);
    if (i % 3 != 2) constrained_tokens += static_cast<int64_t>(h.token_ids.size());
  }
  // Every constrained token was drawn from a masked row on the backend.
  EXPECT_EQ(dev.masked_rows, constrained_tokens);
  EXPECT_GT(dev.sample_rows, constrained_tokens);
  // The masks were filled inside the forwards (ForwardBatch::fill_masks), once per step.
  EXPECT_GT(dev.late_fills, 0);
  EXPECT_LE(dev.late_fills, dev.masked_rows);
  // The engine's counters (/metrics): the masked rows, and the time their masks took.
  EXPECT_EQ(dev.metrics.masked_rows, constrained_tokens);
  EXPECT_GT(dev.metrics.mask_fill_seconds, 0.0);
  EXPECT_LE(dev.metrics.mask_fill_seconds, dev.metrics.forward_seconds);
  EXPECT_EQ(host.metrics.masked_rows, 0);
  EXPECT_EQ(host.metrics.mask_fill_seconds, 0.0);
  // The regex outputs match it.
  for (size_t i = 1; i < 12; i += 3) {
    const std::string& text = host.outputs[i].text;
    if (host.outputs[i].last.finish_reason == "stop") {
      EXPECT_TRUE(std::regex_match(text, std::regex("[a-f]+(x|yz)[0-9]{2,5}"))) << text;
    }
  }
}

TEST(EngineStructuredTest, ConstraintsThatDoNotCompileAreInvalidArguments) {
  auto t = make_engine(testing::hash_next_token);
  Engine& e = *t.engine;
  expect_invalid(e, structured_request({1}, 3, StructuredOutput::Kind::kRegex, "(ab"),
                 "structured_output: regex");
  GenerateRequest r = structured_request({1}, 3, StructuredOutput::Kind::kJsonSchema, "{\"type\":");
  r.sampling.structured.field = "response_format";
  expect_invalid(e, r, "response_format: ");
  expect_invalid(e, structured_request({1}, 3, StructuredOutput::Kind::kRegex, ""),
                 "structured_output: expected a non-empty pattern");
  expect_invalid(e, structured_request({1}, 3, StructuredOutput::Kind::kChoice, ""),
                 "structured_output: expected at least one choice");
  EXPECT_EQ(e.metrics().requests_rejected, 4);
}

// No token can continue: the choice "" is complete at once, so only EOS may come, and
// min_tokens bans it. The request fails alone, its pages come back, and a request beside it
// is untouched.
TEST(EngineStructuredTest, NoAllowedTokenFailsOnlyThatRequest) {
  auto t = make_engine(testing::hash_next_token);
  GenerateRequest r = structured_request({5, 6}, 4, StructuredOutput::Kind::kChoice, "", {""});
  r.sampling.min_tokens = 1;
  auto bad = t.engine->submit(std::move(r));
  auto good = t.engine->submit(greedy_request({7, 8}, 4));
  ASSERT_TRUE(bad.ok() && good.ok());
  const Collected b = collect(**bad), g = collect(**good);
  EXPECT_EQ(b.last.finish_reason, "error");
  EXPECT_NE(b.last.error.find("structured_output: no token can continue the output"),
            std::string::npos)
      << b.last.error;
  EXPECT_EQ(g.last.finish_reason, "length");
  EXPECT_EQ(g.token_ids.size(), 4u);
  // Without min_tokens the same request ends at once with EOS.
  auto ok =
      t.engine->submit(structured_request({5, 6}, 4, StructuredOutput::Kind::kChoice, "", {""}));
  ASSERT_TRUE(ok.ok());
  const Collected o = collect(**ok);
  EXPECT_EQ(o.token_ids, (std::vector<int32_t>{kEosId}));
  EXPECT_EQ(o.last.finish_reason, "stop");
  EXPECT_TRUE(wait_metrics(*t.engine, [](const EngineMetrics& m) { return m.pages_in_use == 0; }));
}

}  // namespace
}  // namespace packserve::engine
