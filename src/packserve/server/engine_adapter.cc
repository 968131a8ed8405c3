// engine_adapter.cc: see engine_adapter.h.
#include "packserve/server/engine_adapter.h"

#include <span>
#include <type_traits>
#include <utility>

namespace packserve::server {
namespace {

class EngineStream final : public OutputStream {
 public:
  explicit EngineStream(std::shared_ptr<engine::RequestStream> stream)
      : stream_(std::move(stream)) {}
  engine::RequestId id() const override { return stream_->id(); }
  std::optional<engine::RequestOutput> next(std::chrono::milliseconds timeout) override {
    return stream_->next(timeout);
  }
  void attach(std::shared_ptr<engine::StreamSignal> signal) override {
    stream_->attach(std::move(signal));
  }

 private:
  std::shared_ptr<engine::RequestStream> stream_;
};

}  // namespace

EngineAdapter::EngineAdapter(std::shared_ptr<engine::Engine> engine,
                             std::optional<tokenizer::ChatTemplate> chat_template)
    : engine_(std::move(engine)), chat_template_(std::move(chat_template)) {}

Result<std::shared_ptr<OutputStream>> EngineAdapter::submit(engine::GenerateRequest request) {
  PS_ASSIGN_OR_RETURN(auto stream, engine_->submit(std::move(request)));
  return std::shared_ptr<OutputStream>(std::make_shared<EngineStream>(std::move(stream)));
}

void EngineAdapter::cancel(engine::RequestId id) { engine_->cancel(id); }

engine::EngineMetrics EngineAdapter::metrics() const { return engine_->metrics(); }

Result<std::vector<int32_t>> EngineAdapter::encode(std::string_view text,
                                                   bool add_special_tokens) const {
  tokenizer::EncodeOptions options;
  options.add_special_tokens = add_special_tokens;
  PS_ASSIGN_OR_RETURN(auto ids, engine_->tokenizer().encode(text, options));
  return std::vector<int32_t>(ids.begin(), ids.end());
}

Result<std::string> EngineAdapter::decode(std::span<const int32_t> token_ids) const {
  static_assert(std::is_same_v<tokenizer::TokenId, int32_t>);
  return engine_->tokenizer().decode(token_ids);
}

Result<std::string> EngineAdapter::render_chat(const std::vector<tokenizer::ChatMessage>& messages,
                                               bool add_generation_prompt,
                                               const tokenizer::ChatRenderOptions& options) const {
  if (!chat_template_) {
    return invalid_argument(
        "this model has no chat template (tokenizer_config.json chat_template); use "
        "/v1/completions");
  }
  return chat_template_->render(messages, add_generation_prompt, options);
}

std::string EngineAdapter::token_text(int32_t token_id) const {
  const tokenizer::TokenId id = static_cast<tokenizer::TokenId>(token_id);
  Result<std::string> text =
      engine_->tokenizer().decode(std::span<const tokenizer::TokenId>(&id, 1));
  return text.ok() ? text.value() : std::string();
}

int64_t EngineAdapter::vocab_size() const { return engine_->model_config().vocab_size; }

}  // namespace packserve::server
