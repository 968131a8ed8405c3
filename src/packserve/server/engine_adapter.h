// engine_adapter.h: packserve::engine::Engine seen through the server's EngineApi, plus the
// model's tokenizer and chat template (compiled only where the engine library is built).
// Thread-safety: as Engine (every method thread-safe); the tokenizer and template are
// immutable.
#pragma once

#include <memory>
#include <optional>

#include "packserve/engine/engine.h"
#include "packserve/server/engine_api.h"
#include "packserve/tokenizer/chat_template.h"

namespace packserve::server {

class EngineAdapter final : public EngineApi {
 public:
  // `chat_template` absent: chat requests are answered 400 saying the model has none.
  EngineAdapter(std::shared_ptr<engine::Engine> engine,
                std::optional<tokenizer::ChatTemplate> chat_template);

  Result<std::shared_ptr<OutputStream>> submit(engine::GenerateRequest request) override;
  void cancel(engine::RequestId id) override;
  engine::EngineMetrics metrics() const override;
  Result<std::vector<int32_t>> encode(std::string_view text,
                                      bool add_special_tokens) const override;
  Result<std::string> decode(std::span<const int32_t> token_ids) const override;
  Result<std::string> render_chat(const std::vector<tokenizer::ChatMessage>& messages,
                                  bool add_generation_prompt,
                                  const tokenizer::ChatRenderOptions& options) const override;
  std::optional<tokenizer::ChatTemplateFamily> chat_template_family() const override {
    if (!chat_template_) return std::nullopt;
    return chat_template_->family();
  }
  std::string token_text(int32_t token_id) const override;
  int64_t vocab_size() const override;
  int64_t max_model_len() const override { return engine_->max_model_len(); }

  engine::Engine& engine() { return *engine_; }

 private:
  std::shared_ptr<engine::Engine> engine_;
  std::optional<tokenizer::ChatTemplate> chat_template_;
};

}  // namespace packserve::server
