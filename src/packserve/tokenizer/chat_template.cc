// chat_template.cc: see chat_template.h.
#include "packserve/tokenizer/chat_template.h"

#include <unicode/uchar.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "packserve/tokenizer/utf8.h"

namespace packserve::tokenizer {
namespace {

using Json = nlohmann::json;

constexpr std::string_view kDefaultLlama3Bos = "<|begin_of_text|>";

// Python's str.isspace (Jinja's trim is str.strip): White_Space plus the separators
// U+001C..U+001F.
bool is_python_space(char32_t c) {
  return (c >= 0x1C && c <= 0x1F) ||
         u_hasBinaryProperty(static_cast<UChar32>(c), UCHAR_WHITE_SPACE) != 0;
}

std::string_view trim(std::string_view text) {
  std::size_t begin = 0;
  while (begin < text.size()) {
    char32_t cp = 0;
    const std::size_t n = valid_sequence_length(text.substr(begin), &cp);
    if (n == 0 || !is_python_space(cp)) break;
    begin += n;
  }
  std::size_t end = text.size();
  while (end > begin) {
    std::size_t start = end - 1;
    while (start > begin && (static_cast<unsigned char>(text[start]) & 0xC0) == 0x80) --start;
    char32_t cp = 0;
    const std::size_t n = valid_sequence_length(text.substr(start, end - start), &cp);
    if (n == 0 || !is_python_space(cp)) break;
    end = start;
  }
  return text.substr(begin, end - begin);
}

}  // namespace

Result<ChatTemplateFamily> parse_chat_template_family(std::string_view name) {
  if (name == "llama3") return ChatTemplateFamily::kLlama3;
  if (name == "chatml") return ChatTemplateFamily::kChatml;
  return invalid_argument("chat template family: expected \"llama3\" or \"chatml\", got \"" +
                          std::string(name) + "\"");
}

std::string_view chat_template_family_name(ChatTemplateFamily family) {
  return family == ChatTemplateFamily::kLlama3 ? "llama3" : "chatml";
}

Result<ChatTemplateFamily> ChatTemplate::detect_family(std::string_view jinja_template) {
  const bool llama3 = jinja_template.find("<|start_header_id|>") != std::string_view::npos &&
                      jinja_template.find("<|eot_id|>") != std::string_view::npos;
  const bool chatml = jinja_template.find("<|im_start|>") != std::string_view::npos &&
                      jinja_template.find("<|im_end|>") != std::string_view::npos;
  if (llama3 && !chatml) return ChatTemplateFamily::kLlama3;
  if (chatml && !llama3) return ChatTemplateFamily::kChatml;
  return invalid_argument(
      std::string("chat_template: ") +
      (llama3 ? "has both Llama-3 and ChatML markers" : "unknown template family") +
      "; expected a Llama-3 (<|start_header_id|>, <|eot_id|>) or ChatML (<|im_start|>, "
      "<|im_end|>) template, or give the family explicitly (llama3 or chatml)");
}

Result<ChatTemplate> ChatTemplate::from_config_text(std::string_view config_json,
                                                    const std::string& source_name,
                                                    std::optional<ChatTemplateFamily> family) {
  Json config;
  try {
    config = Json::parse(config_json.begin(), config_json.end());
  } catch (const Json::exception& e) {
    return invalid_argument(source_name + ": not valid JSON: " + e.what());
  }
  if (!config.is_object()) return invalid_argument(source_name + ": expected a JSON object");
  std::string bos;
  if (const auto it = config.find("bos_token"); it != config.end() && !it->is_null()) {
    if (it->is_string()) {
      bos = it->get<std::string>();
    } else if (it->is_object() && it->contains("content") && (*it)["content"].is_string()) {
      bos = (*it)["content"].get<std::string>();
    } else {
      return invalid_argument(source_name +
                              ": bos_token: expected a string or {\"content\": "
                              "string}, got " +
                              it->dump());
    }
  }
  if (!family) {
    const auto it = config.find("chat_template");
    if (it == config.end() || it->is_null()) {
      return invalid_argument(source_name +
                              ": chat_template: missing; give the template "
                              "family explicitly (llama3 or chatml)");
    }
    std::string text;
    if (it->is_string()) {
      text = it->get<std::string>();
    } else if (it->is_array()) {
      for (const Json& entry : *it) {
        if (entry.is_object() && entry.value("name", Json()) == "default" &&
            entry.contains("template") && entry["template"].is_string()) {
          text = entry["template"].get<std::string>();
        }
      }
      if (text.empty()) {
        return invalid_argument(source_name +
                                ": chat_template: expected an entry named "
                                "\"default\" with a string \"template\"");
      }
    } else {
      return invalid_argument(source_name +
                              ": chat_template: expected a string or a list of "
                              "{\"name\", \"template\"}, got " +
                              it->type_name());
    }
    auto detected = detect_family(text);
    if (!detected.ok()) {
      return invalid_argument(source_name + ": " + detected.status().message());
    }
    family = *detected;
  }
  if (*family == ChatTemplateFamily::kLlama3 && bos.empty()) bos = kDefaultLlama3Bos;
  if (*family == ChatTemplateFamily::kChatml) bos.clear();
  return ChatTemplate(*family, std::move(bos));
}

Result<ChatTemplate> ChatTemplate::from_dir(const std::string& dir,
                                            std::optional<ChatTemplateFamily> family) {
  const std::string path = dir + "/tokenizer_config.json";
  std::ifstream file(path, std::ios::binary);
  if (!file) {
    if (family) return ChatTemplate::from_config_text("{}", path, family);
    return not_found(path +
                     ": cannot open; it names the chat template (or give the family "
                     "explicitly: llama3 or chatml)");
  }
  std::ostringstream text;
  text << file.rdbuf();
  return from_config_text(text.str(), path, family);
}

Result<std::string> ChatTemplate::render(const std::vector<ChatMessage>& messages,
                                         bool add_generation_prompt) const {
  if (messages.empty()) return invalid_argument("messages: expected at least one message");
  for (std::size_t i = 0; i < messages.size(); ++i) {
    const std::string& role = messages[i].role;
    if (role != "system" && role != "user" && role != "assistant") {
      return invalid_argument("messages[" + std::to_string(i) +
                              "].role: expected \"system\", "
                              "\"user\" or \"assistant\", got \"" +
                              role + "\"");
    }
    PS_RETURN_IF_ERROR(validate_utf8(messages[i].content));
  }
  std::string out;
  if (family_ == ChatTemplateFamily::kLlama3) {
    out += bos_token_;
    for (const ChatMessage& m : messages) {
      out += "<|start_header_id|>" + m.role + "<|end_header_id|>\n\n";
      out += trim(m.content);
      out += "<|eot_id|>";
    }
    if (add_generation_prompt) out += "<|start_header_id|>assistant<|end_header_id|>\n\n";
  } else {
    for (const ChatMessage& m : messages) {
      out += "<|im_start|>" + m.role + "\n" + m.content + "<|im_end|>\n";
    }
    if (add_generation_prompt) out += "<|im_start|>assistant\n";
  }
  return out;
}

}  // namespace packserve::tokenizer
