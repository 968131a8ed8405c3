// chat_template_test.cc: prompt text for both families, written out by hand from the
// templates' definitions (Meta's Llama-3 template, ChatML), detection and its errors.
#include "packserve/tokenizer/chat_template.h"

#include <gtest/gtest.h>

namespace packserve::tokenizer {
namespace {

const std::vector<ChatMessage> kConversation = {
    {"system", "Be brief."}, {"user", "  Hi!\n"}, {"assistant", "Hello."}, {"user", "2+2?"}};

TEST(ChatTemplateTest, Llama3Format) {
  const ChatTemplate chat(ChatTemplateFamily::kLlama3, "<|begin_of_text|>");
  const auto text = chat.render(kConversation, /*add_generation_prompt=*/true);
  ASSERT_TRUE(text.ok()) << text.status().to_string();
  // Content is trimmed ("  Hi!\n" -> "Hi!"); BOS once at the start.
  EXPECT_EQ(*text,
            "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nBe brief.<|eot_id|>"
            "<|start_header_id|>user<|end_header_id|>\n\nHi!<|eot_id|>"
            "<|start_header_id|>assistant<|end_header_id|>\n\nHello.<|eot_id|>"
            "<|start_header_id|>user<|end_header_id|>\n\n2+2?<|eot_id|>"
            "<|start_header_id|>assistant<|end_header_id|>\n\n");
}

TEST(ChatTemplateTest, ChatmlFormat) {
  const ChatTemplate chat(ChatTemplateFamily::kChatml, "");
  const auto text = chat.render(kConversation, /*add_generation_prompt=*/false);
  ASSERT_TRUE(text.ok());
  EXPECT_EQ(*text,
            "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\n  Hi!\n<|im_end|>\n"
            "<|im_start|>assistant\nHello.<|im_end|>\n<|im_start|>user\n2+2?<|im_end|>\n");
  const auto with_prompt = chat.render({{"user", "x"}}, /*add_generation_prompt=*/true);
  ASSERT_TRUE(with_prompt.ok());
  EXPECT_EQ(*with_prompt, "<|im_start|>user\nx<|im_end|>\n<|im_start|>assistant\n");
}

TEST(ChatTemplateTest, FamilyFromTokenizerConfig) {
  const auto llama = ChatTemplate::from_config_text(
      R"({"bos_token": "<|begin_of_text|>", "chat_template": "{% for message in messages %}{{ '<|start_header_id|>' + message['role'] + '<|end_header_id|>\n\n' + message['content'] | trim + '<|eot_id|>' }}{% endfor %}"})",
      "tokenizer_config.json", std::nullopt);
  ASSERT_TRUE(llama.ok()) << llama.status().to_string();
  EXPECT_EQ(llama->family(), ChatTemplateFamily::kLlama3);
  EXPECT_EQ(llama->bos_token(), "<|begin_of_text|>");
  const auto chatml = ChatTemplate::from_config_text(
      R"({"chat_template": [{"name": "default", "template": "{{'<|im_start|>' + m + '<|im_end|>'}}"}]})",
      "tokenizer_config.json", std::nullopt);
  ASSERT_TRUE(chatml.ok()) << chatml.status().to_string();
  EXPECT_EQ(chatml->family(), ChatTemplateFamily::kChatml);
}

TEST(ChatTemplateTest, UnknownTemplateIsAnErrorUnlessFamilyIsGiven) {
  const char* config = R"({"chat_template": "[INST] {{ messages[0]['content'] }} [/INST]"})";
  const auto unknown = ChatTemplate::from_config_text(config, "cfg.json", std::nullopt);
  ASSERT_FALSE(unknown.ok());
  EXPECT_EQ(unknown.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(unknown.status().message().find("cfg.json: chat_template"), std::string::npos)
      << unknown.status().message();
  const auto given =
      ChatTemplate::from_config_text(config, "cfg.json", ChatTemplateFamily::kChatml);
  ASSERT_TRUE(given.ok());
  EXPECT_EQ(given->family(), ChatTemplateFamily::kChatml);
  const auto missing = ChatTemplate::from_config_text("{}", "cfg.json", std::nullopt);
  EXPECT_FALSE(missing.ok());
  EXPECT_FALSE(parse_chat_template_family("mistral").ok());
}

TEST(ChatTemplateTest, BadMessagesAreErrors) {
  const ChatTemplate chat(ChatTemplateFamily::kChatml, "");
  const auto bad_role = chat.render({{"user", "a"}, {"robot", "b"}}, true);
  ASSERT_FALSE(bad_role.ok());
  EXPECT_NE(bad_role.status().message().find("messages[1].role"), std::string::npos);
  EXPECT_FALSE(chat.render({}, true).ok());
}

}  // namespace
}  // namespace packserve::tokenizer
