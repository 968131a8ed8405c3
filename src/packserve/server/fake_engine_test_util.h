// fake_engine_test_util.h: a scripted EngineApi for the server's tests (no model needed).
//   encode: one token per byte (id = byte value), vocab 256; token_text(id) = that byte;
//   decode(ids): those bytes (an id outside [0, 256): kInvalidArgument "ids[i]: ...").
//   render_chat: "tool: <definition>\n" per tool, "<role>: <content>\n" per message (and
//   "call: <name><arguments>\n" per tool call, "reasoning: <text>\n" for reasoning_content),
//   "date: <date_string>\n" when given (continue_final_message: without the last "\n"), then
//   (with the generation prompt) "assistant: "
//   ("assistant (no thinking): " with enable_thinking false); its family is ChatML (Hermes tool
//   calls) unless set_chat_template_family.
//   generation: output token i is 'a' + i % 26 (after set_output_text(t): byte i of t, and the
//   request ends "stop" after the last, as at an EOS), one token per `token_interval` for every
//   live request, on one generator thread; stop strings end the request ("stop", the stop
//   string excluded from the text), max_tokens ends it ("length"); cancel() ends it
//   ("cancelled").
//   submit() refuses with kResourceExhausted beyond `max_live` live requests and with
//   kFailedPrecondition after set_draining().
//   Prefix cache: a prompt submitted before (the same token ids) reports all its tokens as
//   cached (num_cached_prompt_tokens), as the engine's prefix cache with prefix wait would.
//   logprobs: -0.5 for every token; top_logprobs k: the token and the k - 1 letters after it
//   at -0.5, -1.5, ...; prompt_logprobs k: with the first token, prompt token i (i >= 1) at
//   -1 - i / 10 with k alternatives: that token at the same logprob, then 'z' at -9.
//   Failures: after fail_prompts_with(id), a request whose prompt holds token `id` ends with
//   finish_reason "error" at its first step.
// Thread-safety: all methods thread-safe.
#pragma once

#include <algorithm>
#include <atomic>
#include <chrono>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "packserve/server/engine_api.h"

namespace packserve::server::testing {

// The engine's own update queue behind the server's OutputStream view.
class FakeStream final : public OutputStream {
 public:
  explicit FakeStream(engine::RequestId id) : stream_(id) {}
  engine::RequestId id() const override { return stream_.id(); }
  std::optional<engine::RequestOutput> next(std::chrono::milliseconds timeout) override {
    return stream_.next(timeout);
  }
  void attach(std::shared_ptr<engine::StreamSignal> signal) override {
    stream_.attach(std::move(signal));
  }
  void push(engine::RequestOutput out) { stream_.push(std::move(out)); }

 private:
  engine::RequestStream stream_;
};

class FakeEngine final : public EngineApi {
 public:
  explicit FakeEngine(std::chrono::milliseconds token_interval = std::chrono::milliseconds(1),
                      int64_t max_model_len = 64, int max_live = 1000)
      : interval_(token_interval), max_model_len_(max_model_len), max_live_(max_live) {
    thread_ = std::thread([this] { run(); });
  }
  ~FakeEngine() override {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      quit_ = true;
    }
    thread_.join();
  }

  Result<std::shared_ptr<OutputStream>> submit(engine::GenerateRequest request) override {
    std::lock_guard<std::mutex> lock(mutex_);
    if (draining_) return failed_precondition("draining");
    if (static_cast<int>(live_.size()) >= max_live_) {
      return resource_exhausted("waiting queue full (" + std::to_string(max_live_) + ")");
    }
    if (request.sampling.max_tokens < 1) return invalid_argument("max_tokens: must be >= 1");
    Live live;
    live.stream = std::make_shared<FakeStream>(next_id_++);
    if (!seen_prompts_.insert(request.prompt_token_ids).second) {
      live.num_cached = static_cast<int32_t>(request.prompt_token_ids.size());
    }
    live.request = std::move(request);
    auto stream = live.stream;
    live_.emplace(stream->id(), std::move(live));
    ++num_submitted_;
    return std::shared_ptr<OutputStream>(stream);
  }
  void cancel(engine::RequestId id) override {
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = live_.find(id);
    if (it == live_.end()) return;
    cancelled_.insert(id);
    finish(it->second, "cancelled");
    live_.erase(it);
  }
  engine::EngineMetrics metrics() const override {
    std::lock_guard<std::mutex> lock(mutex_);
    engine::EngineMetrics m;
    m.num_running = static_cast<int64_t>(live_.size());
    m.pages_in_use = static_cast<int64_t>(live_.size());
    m.pages_total = 100;
    m.pages_free = 100 - m.pages_in_use;
    return m;
  }
  Result<std::vector<int32_t>> encode(std::string_view text, bool) const override {
    std::vector<int32_t> ids;
    for (unsigned char c : text) ids.push_back(c);
    return ids;
  }
  Result<std::string> decode(std::span<const int32_t> token_ids) const override {
    std::string text;
    for (std::size_t i = 0; i < token_ids.size(); ++i) {
      if (token_ids[i] < 0 || token_ids[i] >= vocab_size()) {
        return invalid_argument("ids[" + std::to_string(i) + "]: token id " +
                                std::to_string(token_ids[i]) + " is not a token of this tokenizer");
      }
      text += static_cast<char>(token_ids[i]);
    }
    return text;
  }
  Result<std::string> render_chat(const std::vector<tokenizer::ChatMessage>& messages,
                                  bool add_generation_prompt,
                                  const tokenizer::ChatRenderOptions& options) const override {
    std::string text;
    for (const auto& tool : options.tools) text += "tool: " + tool + "\n";
    for (const auto& m : messages) {
      text += m.role + ": " + m.content + "\n";
      if (m.reasoning) text += "reasoning: " + *m.reasoning + "\n";
      for (const auto& call : m.tool_calls) text += "call: " + call.name + call.arguments + "\n";
    }
    if (options.date_string) text += "date: " + *options.date_string + "\n";
    if (options.continue_final_message) text.pop_back();  // ends inside the last message
    if (!add_generation_prompt) return text;
    return text + (options.enable_thinking ? "assistant: " : "assistant (no thinking): ");
  }
  std::optional<tokenizer::ChatTemplateFamily> chat_template_family() const override {
    std::lock_guard<std::mutex> lock(mutex_);
    return family_;
  }
  // The family the server reads the output by (render_chat stays the fake's own).
  void set_chat_template_family(tokenizer::ChatTemplateFamily family) {
    std::lock_guard<std::mutex> lock(mutex_);
    family_ = family;
  }
  std::string token_text(int32_t token_id) const override {
    return std::string(1, static_cast<char>(token_id));
  }
  int64_t vocab_size() const override { return 256; }
  int64_t max_model_len() const override { return max_model_len_; }

  // Every later request generates `text` (one token per byte) and then stops.
  void set_output_text(std::string text) {
    std::lock_guard<std::mutex> lock(mutex_);
    output_text_ = std::move(text);
  }
  void fail_prompts_with(int32_t token_id) {
    std::lock_guard<std::mutex> lock(mutex_);
    fail_token_ = token_id;
  }
  void set_draining() {
    std::lock_guard<std::mutex> lock(mutex_);
    draining_ = true;
  }
  int num_live() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return static_cast<int>(live_.size());
  }
  std::set<engine::RequestId> cancelled() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return cancelled_;
  }
  int64_t num_submitted() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return num_submitted_;
  }
  // Requests submitted so far (copies), by id.
  std::vector<engine::GenerateRequest> submitted_requests() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return history_;
  }

 private:
  struct Live {
    std::shared_ptr<FakeStream> stream;
    engine::GenerateRequest request;
    std::string text;      // generated so far (including held-back text)
    std::size_t sent = 0;  // bytes of text already sent
    int32_t num_output_tokens = 0;
    int32_t num_cached = 0;  // prompt tokens "cached" (the prompt was seen before)
  };

  void finish(Live& l, const std::string& reason) {
    engine::RequestOutput out;
    out.id = l.stream->id();
    out.finished = true;
    out.finish_reason = reason;
    out.num_prompt_tokens = static_cast<int32_t>(l.request.prompt_token_ids.size());
    out.num_output_tokens = l.num_output_tokens;
    out.num_cached_prompt_tokens = l.num_cached;
    if (reason == "length") out.text_delta = l.text.substr(l.sent);
    if (reason == "error") out.error = "injected failure";
    history_.push_back(l.request);
    l.stream->push(std::move(out));
  }

  void step(Live& l, bool& done) {
    const auto& prompt = l.request.prompt_token_ids;
    if (fail_token_ && std::find(prompt.begin(), prompt.end(), *fail_token_) != prompt.end()) {
      finish(l, "error");
      done = true;
      return;
    }
    const int32_t token = output_text_
                              ? static_cast<unsigned char>((*output_text_)[l.num_output_tokens])
                              : 'a' + l.num_output_tokens % 26;
    ++l.num_output_tokens;
    l.text += static_cast<char>(token);
    engine::RequestOutput out;
    out.id = l.stream->id();
    engine::TokenOutput t;
    t.token_id = token;
    t.logprob = -0.5f;
    // Alternatives: this token, then the letters after it, at -0.5, -1.5, -2.5, ...
    for (int32_t j = 0; j < l.request.sampling.top_logprobs; ++j) {
      t.top_logprobs.push_back(
          {'a' + (l.num_output_tokens - 1 + j) % 26, -0.5f - static_cast<float>(j)});
    }
    out.tokens.push_back(std::move(t));
    const int32_t top = l.request.sampling.prompt_logprobs;
    for (size_t i = 1; l.num_output_tokens == 1 && top >= 0 && i < prompt.size(); ++i) {
      engine::TokenOutput p;
      p.token_id = prompt[i];
      p.logprob = -1.0f - static_cast<float>(i) / 10.0f;
      if (top > 0) p.top_logprobs.push_back({prompt[i], *p.logprob});
      if (top > 1) p.top_logprobs.push_back({'z', -9.0f});
      out.prompt_logprobs.push_back(std::move(p));
    }
    out.num_prompt_tokens = static_cast<int32_t>(l.request.prompt_token_ids.size());
    out.num_output_tokens = l.num_output_tokens;
    out.num_cached_prompt_tokens = l.num_cached;
    for (const std::string& stop : l.request.sampling.stop) {
      const auto pos = l.text.find(stop);
      if (pos != std::string::npos) {
        out.text_delta = l.text.substr(l.sent, pos > l.sent ? pos - l.sent : 0);
        out.finished = true;
        out.finish_reason = "stop";
        history_.push_back(l.request);
        l.stream->push(std::move(out));
        done = true;
        return;
      }
    }
    const bool script_done =
        output_text_ && static_cast<std::size_t>(l.num_output_tokens) == output_text_->size();
    if (script_done || l.num_output_tokens >= l.request.sampling.max_tokens) {
      out.text_delta = l.text.substr(l.sent);
      out.finished = true;
      out.finish_reason = script_done ? "stop" : "length";
      history_.push_back(l.request);
      l.stream->push(std::move(out));
      done = true;
      return;
    }
    // Hold back text that could still become a stop string (a suffix of text that is a
    // proper prefix of a stop string).
    std::size_t hold = 0;
    for (const std::string& stop : l.request.sampling.stop) {
      for (std::size_t k = std::min(stop.size() - 1, l.text.size()); k > hold; --k) {
        if (l.text.compare(l.text.size() - k, k, stop, 0, k) == 0) {
          hold = k;
          break;
        }
      }
    }
    const std::size_t emit_to = l.text.size() - hold;
    if (emit_to > l.sent) {
      out.text_delta = l.text.substr(l.sent, emit_to - l.sent);
      l.sent = emit_to;
    }
    l.stream->push(std::move(out));
  }

  void run() {
    for (;;) {
      {
        std::lock_guard<std::mutex> lock(mutex_);
        if (quit_) {
          for (auto& [id, l] : live_) finish(l, "cancelled");
          live_.clear();
          return;
        }
        for (auto it = live_.begin(); it != live_.end();) {
          bool done = false;
          step(it->second, done);
          it = done ? live_.erase(it) : std::next(it);
        }
      }
      std::this_thread::sleep_for(interval_);
    }
  }

  std::chrono::milliseconds interval_;
  int64_t max_model_len_;
  int max_live_;
  mutable std::mutex mutex_;
  std::map<engine::RequestId, Live> live_;
  std::set<engine::RequestId> cancelled_;
  std::vector<engine::GenerateRequest> history_;
  std::set<std::vector<int32_t>> seen_prompts_;
  std::optional<std::string> output_text_;
  tokenizer::ChatTemplateFamily family_ = tokenizer::ChatTemplateFamily::kChatml;
  std::optional<int32_t> fail_token_;
  engine::RequestId next_id_ = 1;
  int64_t num_submitted_ = 0;
  bool draining_ = false;
  bool quit_ = false;
  std::thread thread_;
};

}  // namespace packserve::server::testing
