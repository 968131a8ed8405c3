// bench_inprocess.cc: see bench_inprocess.h.
#include "packserve/cli/bench_inprocess.h"

#include <chrono>

#include "packserve/engine/engine.h"
#include "packserve/model/checkpoint.h"
#include "packserve/tokenizer/tokenizer.h"

namespace packserve::cli {
namespace {

class InProcessSender final : public benchclient::RequestSender {
 public:
  InProcessSender(std::unique_ptr<engine::Engine> engine, bool ignore_eos,
                  benchclient::RequestSampling sampling)
      : engine_(std::move(engine)), ignore_eos_(ignore_eos), sampling_(sampling) {}
  ~InProcessSender() override { engine_->stop(); }

  void send(const benchclient::ReplayRequest& request, std::chrono::steady_clock::time_point origin,
            benchclient::RequestRecord& record) override {
    auto ms = [&] {
      return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - origin)
          .count();
    };
    record.send_ms = ms();
    auto ids = engine_->tokenizer().encode(request.prompt,
                                           tokenizer::EncodeOptions{.add_special_tokens = true});
    if (!ids.ok()) {
      record.error = "encode: " + ids.status().message();
      record.end_ms = ms();
      return;
    }
    engine::GenerateRequest g;
    g.prompt_token_ids = std::move(ids).value();
    g.sampling.max_tokens = request.max_tokens;
    g.sampling.ignore_eos = ignore_eos_;
    if (sampling_.temperature) g.sampling.temperature = *sampling_.temperature;
    if (sampling_.top_k) g.sampling.top_k = *sampling_.top_k;
    if (sampling_.top_p) g.sampling.top_p = *sampling_.top_p;
    if (sampling_.presence_penalty) g.sampling.presence_penalty = *sampling_.presence_penalty;
    if (sampling_.frequency_penalty) g.sampling.frequency_penalty = *sampling_.frequency_penalty;
    g.sampling.logprobs = sampling_.logprobs;
    record.server_prompt_tokens = static_cast<int32_t>(g.prompt_token_ids.size());
    auto stream = engine_->submit(std::move(g));
    if (!stream.ok()) {
      record.error = "submit: " + stream.status().message();
      record.end_ms = ms();
      return;
    }
    for (;;) {
      auto update = (*stream)->next(std::chrono::milliseconds(1000));
      if (!update) continue;
      const double now = ms();
      for (size_t i = 0; i < update->tokens.size(); ++i) record.chunk_ms.push_back(now);
      record.output_tokens = update->num_output_tokens;
      if (update->finished) {
        record.finish_reason = update->finish_reason;
        record.end_ms = now;
        if (update->finish_reason == "stop" || update->finish_reason == "length") {
          record.success = record.output_tokens > 0 && !record.chunk_ms.empty();
          if (!record.success) record.error = "no output tokens";
        } else {
          record.error = "finish_reason " + update->finish_reason;
        }
        return;
      }
    }
  }
  std::optional<double> running_batch_size() override {
    return static_cast<double>(engine_->metrics().num_running);
  }
  std::string running_batch_source() const override { return "engine num_running"; }

 private:
  std::unique_ptr<engine::Engine> engine_;
  bool ignore_eos_;
  benchclient::RequestSampling sampling_;
};

}  // namespace

void add_inprocess_options(CLI::App& cmd, InProcessOptions& o) {
  add_engine_flags(cmd, o.engine, "--in-process: ");
}

Result<std::unique_ptr<benchclient::RequestSender>> make_inprocess_sender(
    const std::string& model_dir, const InProcessOptions& o, bool ignore_eos,
    benchclient::RequestSampling sampling) {
  PS_ASSIGN_OR_RETURN(auto weights, model::load_checkpoint(model_dir));
  PS_ASSIGN_OR_RETURN(auto tok, tokenizer::Tokenizer::from_dir(model_dir));
  engine::EngineConfig config;
  PS_RETURN_IF_ERROR(apply_engine_flags(o.engine, config));
  config.max_waiting_requests = 1 << 20;  // the trace decides the load, never the queue limit
  PS_ASSIGN_OR_RETURN(auto backend, make_engine_backend(o.engine.backend, weights, o.engine.threads,
                                                        o.engine.cpu_default_num_pages, config));
  PS_ASSIGN_OR_RETURN(auto engine, engine::Engine::create(config, std::move(backend.backend), tok));
  return std::unique_ptr<benchclient::RequestSender>(
      std::make_unique<InProcessSender>(std::move(engine), ignore_eos, sampling));
}

}  // namespace packserve::cli
