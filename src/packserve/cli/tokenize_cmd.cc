// tokenize_cmd.cc: `packserve tokenize --tokenizer DIR` (issue 4 "Tokenizer").
//
//   encode (default): JSON lines on stdin, each {"text": "..."} or {"messages": [{"role",
//           "content"}, ...]} (rendered with the chat template of DIR/tokenizer_config.json
//           plus the generation prompt), -> {"ids": [...]} lines on stdout.
//   --decode: {"ids": [...]} -> {"text": "..."} lines.
// Exit codes (commands.h): 0 success; 2 bad input: the tokenizer does not load or a line is
// not what is expected (the message names the line number; lines before it were written).
#include <iostream>
#include <limits>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "packserve/cli/commands.h"
#include "packserve/tokenizer/chat_template.h"
#include "packserve/tokenizer/tokenizer.h"

namespace packserve::cli {
namespace {

using nlohmann::json;
using tokenizer::ChatMessage;
using tokenizer::ChatTemplate;
using tokenizer::TokenId;
using tokenizer::Tokenizer;

struct TokenizeArgs {
  std::string tokenizer_dir;
  bool decode = false;
  bool skip_special_tokens = false;
  bool add_special_tokens = false;
  std::string chat_template = "auto";
};

int fail_input(const std::string& message) {
  std::cerr << "error: " << message << "\n";
  return 2;
}

Result<std::vector<ChatMessage>> parse_messages(const json& value) {
  if (!value.is_array()) return invalid_argument("\"messages\": expected an array");
  std::vector<ChatMessage> messages;
  for (std::size_t i = 0; i < value.size(); ++i) {
    const json& m = value[i];
    const std::string field = "\"messages\"[" + std::to_string(i) + "]";
    if (!m.is_object() || m.size() != 2 || !m.contains("role") || !m.contains("content") ||
        !m["role"].is_string() || !m["content"].is_string()) {
      return invalid_argument(field + ": expected {\"role\": string, \"content\": string}");
    }
    messages.push_back(ChatMessage{m["role"].get<std::string>(), m["content"].get<std::string>()});
  }
  return messages;
}

// One input line -> one output JSON value, or a Status describing what is wrong with it.
class LineProcessor {
 public:
  LineProcessor(Tokenizer tokenizer, const TokenizeArgs& args)
      : tokenizer_(std::move(tokenizer)), args_(args) {}

  Result<json> process(const std::string& line) {
    json input;
    try {
      input = json::parse(line);
    } catch (const json::exception& e) {
      return invalid_argument(std::string("not valid JSON: ") + e.what());
    }
    if (args_.decode) return decode(input);
    return encode(input);
  }

 private:
  Result<json> decode(const json& input) {
    if (!input.is_object() || input.size() != 1 || !input.contains("ids") ||
        !input["ids"].is_array()) {
      return invalid_argument("expected {\"ids\": [integer, ...]}");
    }
    std::vector<TokenId> ids;
    for (const json& id : input["ids"]) {
      if (!id.is_number_integer() || id.get<std::int64_t>() < 0 ||
          id.get<std::int64_t>() > std::numeric_limits<TokenId>::max()) {
        return invalid_argument("\"ids\": expected token ids (integers >= 0), got " + id.dump());
      }
      ids.push_back(static_cast<TokenId>(id.get<std::int64_t>()));
    }
    PS_ASSIGN_OR_RETURN(std::string text,
                        tokenizer_.decode(ids, {.skip_special_tokens = args_.skip_special_tokens}));
    return json{{"text", std::move(text)}};
  }

  Result<json> encode(const json& input) {
    std::string text;
    if (input.is_object() && input.size() == 1 && input.contains("text") &&
        input["text"].is_string()) {
      text = input["text"].get<std::string>();
    } else if (input.is_object() && input.size() == 1 && input.contains("messages")) {
      PS_ASSIGN_OR_RETURN(const auto messages, parse_messages(input["messages"]));
      PS_ASSIGN_OR_RETURN(const ChatTemplate* chat, chat_template());
      PS_ASSIGN_OR_RETURN(text, chat->render(messages, /*add_generation_prompt=*/true));
    } else {
      return invalid_argument("expected {\"text\": string} or {\"messages\": [...]}");
    }
    PS_ASSIGN_OR_RETURN(const std::vector<TokenId> ids,
                        tokenizer_.encode(text, {.add_special_tokens = args_.add_special_tokens}));
    return json{{"ids", ids}};
  }

  // Loaded on the first chat line, so plain text needs no tokenizer_config.json.
  Result<const ChatTemplate*> chat_template() {
    if (!chat_template_) {
      std::optional<tokenizer::ChatTemplateFamily> family;
      if (args_.chat_template != "auto") {
        PS_ASSIGN_OR_RETURN(family, tokenizer::parse_chat_template_family(args_.chat_template));
      }
      PS_ASSIGN_OR_RETURN(auto loaded, ChatTemplate::from_dir(args_.tokenizer_dir, family));
      chat_template_ = std::move(loaded);
    }
    return &*chat_template_;
  }

  Tokenizer tokenizer_;
  const TokenizeArgs& args_;
  std::optional<ChatTemplate> chat_template_;
};

int run_tokenize(const TokenizeArgs& args) {
  auto loaded = Tokenizer::from_dir(args.tokenizer_dir);
  if (!loaded.ok()) return fail_input(loaded.status().to_string());
  LineProcessor processor(std::move(loaded).value(), args);
  std::string line;
  std::size_t line_number = 0;
  while (std::getline(std::cin, line)) {
    ++line_number;
    auto output = processor.process(line);
    if (!output.ok()) {
      std::cout.flush();
      return fail_input("stdin line " + std::to_string(line_number) + ": " +
                        output.status().message());
    }
    std::cout << output->dump(-1, ' ', false, json::error_handler_t::strict) << '\n';
  }
  std::cout.flush();
  return 0;
}

}  // namespace

void register_tokenize_command(CLI::App& app, int& exit_code) {
  auto args = std::make_shared<TokenizeArgs>();
  auto* cmd = app.add_subcommand(
      "tokenize",
      "JSON lines on stdin -> JSON lines on stdout: {\"text\"} or {\"messages\"} -> {\"ids\"}, "
      "or with --decode {\"ids\"} -> {\"text\"}");
  cmd->add_option("--tokenizer", args->tokenizer_dir,
                  "directory holding tokenizer.json (and tokenizer_config.json for chat)")
      ->required();
  cmd->add_flag("--decode", args->decode, "decode {\"ids\": [...]} lines instead of encoding");
  cmd->add_flag("--skip-special-tokens", args->skip_special_tokens,
                "with --decode: leave special tokens out of the text");
  cmd->add_flag("--add-special-tokens", args->add_special_tokens,
                "encode: apply the post_processor template (e.g. Llama-3's BOS)");
  cmd->add_option("--chat-template", args->chat_template,
                  "template family for {\"messages\"} lines: auto (from tokenizer_config.json), "
                  "llama3, chatml, mistral, mistral-tekken or mistral-v1")
      ->capture_default_str();
  cmd->callback([args, &exit_code] { exit_code = run_tokenize(*args); });
}

}  // namespace packserve::cli
