// chat_template.cc: see chat_template.h.
#include "packserve/tokenizer/chat_template.h"

#include <unicode/uchar.h>

#include <ctime>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <tuple>
#include <utility>

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

// tokenizer_config's `key` (bos_token, eos_token): a string or {"content": string}; "" when
// absent.
Result<std::string> token_field(const Json& config, const char* key,
                                const std::string& source_name) {
  const auto it = config.find(key);
  if (it == config.end() || it->is_null()) return std::string();
  if (it->is_string()) return it->get<std::string>();
  if (it->is_object() && it->contains("content") && (*it)["content"].is_string()) {
    return (*it)["content"].get<std::string>();
  }
  return invalid_argument(source_name + ": " + key +
                          ": expected a string or {\"content\": string}, got " + it->dump());
}

}  // namespace

// Qwen2.5's template writes it when the messages have no system message.
constexpr std::string_view kQwen25DefaultSystem =
    "You are Qwen, created by Alibaba Cloud. You are a helpful assistant.";

// The families' names, as errors list them.
constexpr std::string_view kFamilyNames = "llama3, chatml, mistral, mistral-tekken or mistral-v1";

Result<ChatTemplateFamily> parse_chat_template_family(std::string_view name) {
  if (name == "llama3") return ChatTemplateFamily::kLlama3;
  if (name == "chatml") return ChatTemplateFamily::kChatml;
  if (name == "mistral") return ChatTemplateFamily::kMistral;
  if (name == "mistral-tekken") return ChatTemplateFamily::kMistralTekken;
  if (name == "mistral-v1") return ChatTemplateFamily::kMistralV1;
  return invalid_argument("chat template family: expected " + std::string(kFamilyNames) +
                          ", got \"" + std::string(name) + "\"");
}

std::string_view chat_template_family_name(ChatTemplateFamily family) {
  switch (family) {
    case ChatTemplateFamily::kLlama3:
      return "llama3";
    case ChatTemplateFamily::kChatml:
      return "chatml";
    case ChatTemplateFamily::kMistral:
      return "mistral";
    case ChatTemplateFamily::kMistralTekken:
      return "mistral-tekken";
    case ChatTemplateFamily::kMistralV1:
      return "mistral-v1";
  }
  return "chatml";
}

Result<ChatTemplateFamily> ChatTemplate::detect_family(std::string_view jinja_template) {
  const bool llama3 = jinja_template.find("<|start_header_id|>") != std::string_view::npos &&
                      jinja_template.find("<|eot_id|>") != std::string_view::npos;
  const bool chatml = jinja_template.find("<|im_start|>") != std::string_view::npos &&
                      jinja_template.find("<|im_end|>") != std::string_view::npos;
  const bool mistral = jinja_template.find("[INST]") != std::string_view::npos &&
                       jinja_template.find("[/INST]") != std::string_view::npos;
  if (mistral && !llama3 && !chatml) {
    if (jinja_template.find("\"[INST] \" + message[\"content\"] + \"[/INST]\"") !=
        std::string_view::npos) {
      return ChatTemplateFamily::kMistral;
    }
    if (jinja_template.find("\"[INST]\" + message[\"content\"] + \"[/INST]\"") !=
        std::string_view::npos) {
      return ChatTemplateFamily::kMistralTekken;
    }
    for (std::string_view v1 : {"' [INST] ' + message['content'] + ' [/INST]'",
                                "\" [INST] \" + message[\"content\"] + \" [/INST]\""}) {
      if (jinja_template.find(v1) != std::string_view::npos) return ChatTemplateFamily::kMistralV1;
    }
    return invalid_argument(
        "chat_template: a Mistral [INST] template other than Mistral-7B-Instruct-v0.3's (\"[INST] "
        "\" + content + \"[/INST]\"), Mistral-Nemo's (\"[INST]\" + content + \"[/INST]\") and "
        "v0.1/v0.2's (' [INST] ' + content + ' [/INST]'); give the family explicitly (mistral, "
        "mistral-tekken or mistral-v1)");
  }
  if (llama3 && !chatml) return ChatTemplateFamily::kLlama3;
  if (chatml && !llama3) return ChatTemplateFamily::kChatml;
  return invalid_argument(
      std::string("chat_template: ") +
      (llama3 ? "has both Llama-3 and ChatML markers" : "unknown template family") +
      "; expected a Llama-3 (<|start_header_id|>, <|eot_id|>), ChatML (<|im_start|>, "
      "<|im_end|>) or Mistral ([INST], [/INST]) template, or give the family explicitly (" +
      std::string(kFamilyNames) + ")");
}

ChatTemplateTraits ChatTemplate::detect_traits(std::string_view jinja) {
  const auto has = [&](std::string_view s) { return jinja.find(s) != std::string_view::npos; };
  ChatTemplateTraits traits;
  traits.thinking_switch = has("enable_thinking");
  if (has("Cutting Knowledge Date")) {
    traits.llama3_system = has("strftime_now") ? Llama3System::kToday : Llama3System::kFixedDate;
  }
  if (has(kQwen25DefaultSystem)) traits.default_system = kQwen25DefaultSystem;
  return traits;
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
  PS_ASSIGN_OR_RETURN(std::string bos, token_field(config, "bos_token", source_name));
  ChatTemplateTraits traits;
  if (const auto it = config.find("chat_template"); it != config.end() && it->is_string()) {
    traits = detect_traits(it->get_ref<const std::string&>());
  }
  if (!family) {
    const auto it = config.find("chat_template");
    if (it == config.end() || it->is_null()) {
      return invalid_argument(source_name +
                              ": chat_template: missing; give the template "
                              "family explicitly (" +
                              std::string(kFamilyNames) + ")");
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
  const bool mistral = *family == ChatTemplateFamily::kMistral ||
                       *family == ChatTemplateFamily::kMistralTekken ||
                       *family == ChatTemplateFamily::kMistralV1;
  if (mistral && bos.empty()) bos = "<s>";
  if (*family == ChatTemplateFamily::kChatml) bos.clear();
  std::string eos;
  if (mistral) {
    PS_ASSIGN_OR_RETURN(eos, token_field(config, "eos_token", source_name));
    if (eos.empty()) eos = "</s>";
  }
  return ChatTemplate(*family, std::move(bos), std::move(eos), std::move(traits));
}

Result<ChatTemplate> ChatTemplate::from_dir(const std::string& dir,
                                            std::optional<ChatTemplateFamily> family) {
  const std::string path = dir + "/tokenizer_config.json";
  std::ifstream file(path, std::ios::binary);
  if (!file) {
    if (family) return ChatTemplate::from_config_text("{}", path, family);
    return not_found(path +
                     ": cannot open; it names the chat template (or give the family "
                     "explicitly: " +
                     std::string(kFamilyNames) + ")");
  }
  std::ostringstream text;
  text << file.rdbuf();
  return from_config_text(text.str(), path, family);
}

namespace {

using OrderedJson = nlohmann::ordered_json;

// Jinja's `tojson` as Hugging Face's templates run it (Python's json.dumps with
// ensure_ascii=False): without indent ", " and ": " between items, with indent one item per
// line and ": " after keys. Scalars are nlohmann's (the same escapes and number forms for the
// values requests carry).
void append_python_json(const OrderedJson& v, int indent, int depth, std::string& out) {
  const bool object = v.is_object();
  if (!object && !v.is_array()) {
    out += v.dump(-1, ' ', false, OrderedJson::error_handler_t::replace);
    return;
  }
  if (v.empty()) {
    out += object ? "{}" : "[]";
    return;
  }
  const auto newline = [&](int level) {
    out += '\n';
    out.append(static_cast<std::size_t>(indent * level), ' ');
  };
  out += object ? '{' : '[';
  bool first = true;
  for (auto it = v.begin(); it != v.end(); ++it) {
    if (!first) out += indent < 0 ? ", " : ",";
    first = false;
    if (indent >= 0) newline(depth + 1);
    if (object) {
      out += OrderedJson(it.key()).dump(-1, ' ', false, OrderedJson::error_handler_t::replace);
      out += ": ";
    }
    append_python_json(*it, indent, depth + 1, out);
  }
  if (indent >= 0) newline(depth);
  out += object ? '}' : ']';
}

std::string python_json(const OrderedJson& v, int indent = -1) {
  std::string out;
  append_python_json(v, indent, 0, out);
  return out;
}

// `text` parsed as a JSON object, else kInvalidArgument naming `field`.
Result<OrderedJson> json_object(const std::string& text, const std::string& field) {
  OrderedJson v = OrderedJson::parse(text, nullptr, /*allow_exceptions=*/false);
  if (v.is_discarded() || !v.is_object()) {
    return invalid_argument(field + ": expected the JSON text of an object");
  }
  return v;
}

Result<std::vector<OrderedJson>> parse_tools(const std::vector<std::string>& tools) {
  std::vector<OrderedJson> out;
  for (std::size_t i = 0; i < tools.size(); ++i) {
    PS_ASSIGN_OR_RETURN(OrderedJson tool,
                        json_object(tools[i], "tools[" + std::to_string(i) + "]"));
    out.push_back(std::move(tool));
  }
  return out;
}

std::string call_field(std::size_t message, std::size_t call) {
  return "messages[" + std::to_string(message) + "].tool_calls[" + std::to_string(call) +
         "].function.arguments";
}

constexpr std::string_view kChatmlToolsHead =
    "# Tools\n\nYou may call one or more functions to assist with the user query.\n\nYou are "
    "provided with function signatures within <tools></tools> XML tags:\n<tools>";
constexpr std::string_view kChatmlToolsTail =
    "\n</tools>\n\nFor each function call, return a json object with function name and "
    "arguments within <tool_call></tool_call> XML tags:\n<tool_call>\n{\"name\": "
    "<function-name>, \"arguments\": <args-json-object>}\n</tool_call><|im_end|>\n";

std::string_view strip_leading_newlines(std::string_view s) {
  return s.substr(std::min(s.find_first_not_of('\n'), s.size()));
}

std::string_view strip_trailing_newlines(std::string_view s) {
  const std::size_t last = s.find_last_not_of('\n');
  return last == std::string_view::npos ? std::string_view() : s.substr(0, last + 1);
}

// Qwen3's template: the index of the last user message that is a query (not a
// <tool_response> wrapper); the last message's when there is none.
std::size_t last_query_index(const std::vector<ChatMessage>& messages) {
  for (std::size_t i = messages.size(); i-- > 0;) {
    const std::string& c = messages[i].content;
    if (messages[i].role == "user" &&
        !(c.starts_with("<tool_response>") && c.ends_with("</tool_response>"))) {
      return i;
    }
  }
  return messages.size() - 1;
}

// Qwen3's template: an assistant turn's content and reasoning (its reasoning_content, else the
// text of a <think> block before `</think>` in its content).
std::pair<std::string, std::string> qwen3_assistant_parts(const ChatMessage& m) {
  if (m.reasoning) return {m.content, *m.reasoning};
  const std::size_t first_close = m.content.find("</think>");
  if (first_close == std::string::npos) return {m.content, ""};
  const std::string_view text(m.content);
  const std::string_view content =
      strip_leading_newlines(text.substr(m.content.rfind("</think>") + 8));
  std::string_view reasoning = strip_trailing_newlines(text.substr(0, first_close));
  if (const std::size_t open = reasoning.rfind("<think>"); open != std::string_view::npos) {
    reasoning.remove_prefix(open + 7);
  }
  return {std::string(content), std::string(strip_leading_newlines(reasoning))};
}

Result<std::string> render_chatml(const std::vector<ChatMessage>& messages,
                                  bool add_generation_prompt, const std::vector<OrderedJson>& tools,
                                  bool qwen3_thinking, bool empty_thinking,
                                  const std::string& default_system) {
  std::string out;
  std::size_t first = 0;
  const bool has_system = messages[0].role == "system";
  if (!tools.empty()) {
    out += "<|im_start|>system\n";
    if (has_system) {
      out += messages[0].content + "\n\n";
      first = 1;
    } else if (!default_system.empty()) {
      out += default_system + "\n\n";
    }
    out += kChatmlToolsHead;
    for (const OrderedJson& tool : tools) out += "\n" + python_json(tool);
    out += kChatmlToolsTail;
  } else if (!has_system && !default_system.empty()) {
    out += "<|im_start|>system\n" + default_system + "<|im_end|>\n";
  }
  const std::size_t last_query = last_query_index(messages);
  for (std::size_t i = first; i < messages.size(); ++i) {
    const ChatMessage& m = messages[i];
    if (m.role == "tool") {
      // A run of tool results is one user turn.
      if (i == 0 || messages[i - 1].role != "tool") out += "<|im_start|>user";
      out += "\n<tool_response>\n" + m.content + "\n</tool_response>";
      if (i + 1 == messages.size() || messages[i + 1].role != "tool") out += "<|im_end|>\n";
      continue;
    }
    // The turn's text; `content` without Qwen3's reasoning decides the newline before a call.
    std::string content = m.content;
    std::string text = m.content;
    if (qwen3_thinking && m.role == "assistant") {
      std::string reasoning;
      std::tie(content, reasoning) = qwen3_assistant_parts(m);
      text = content;
      if (i > last_query && (i + 1 == messages.size() || !reasoning.empty())) {
        text = "<think>\n" +
               std::string(strip_trailing_newlines(strip_leading_newlines(reasoning))) +
               "\n</think>\n\n" + std::string(strip_leading_newlines(content));
      }
    }
    out += "<|im_start|>" + m.role + "\n" + text;
    for (std::size_t c = 0; c < m.tool_calls.size(); ++c) {
      PS_ASSIGN_OR_RETURN(OrderedJson args,
                          json_object(m.tool_calls[c].arguments, call_field(i, c)));
      if (c > 0 || !content.empty()) out += "\n";
      out += "<tool_call>\n{\"name\": \"" + m.tool_calls[c].name +
             "\", \"arguments\": " + python_json(args) + "}\n</tool_call>";
    }
    out += "<|im_end|>\n";
  }
  if (add_generation_prompt) out += "<|im_start|>assistant\n";
  if (add_generation_prompt && empty_thinking) out += "<think>\n\n</think>\n\n";
  return out;
}

// Llama 3.1's date_string default.
constexpr std::string_view kLlama31Date = "26 Jul 2024";

// Jinja's strftime_now("%d %b %Y") as transformers defines it: the local date.
std::string today_date() {
  const std::time_t now = std::time(nullptr);
  std::tm local{};
  localtime_r(&now, &local);
  char text[32];
  const std::size_t n = std::strftime(text, sizeof(text), "%d %b %Y", &local);
  return std::string(text, n);
}
constexpr std::string_view kLlama3ToolsUser =
    "Given the following functions, please respond with a JSON for a function call with its "
    "proper arguments that best answers the given prompt.\n\nRespond in the format "
    "{\"name\": function name, \"parameters\": dictionary of argument name and its value}.Do "
    "not use variables.\n\n";

Result<std::string> render_llama3(const std::vector<ChatMessage>& messages,
                                  bool add_generation_prompt, const std::vector<OrderedJson>& tools,
                                  const std::string& bos_token, Llama3System system,
                                  const std::optional<std::string>& date_string) {
  const auto header = [](std::string_view role) {
    return "<|start_header_id|>" + std::string(role) + "<|end_header_id|>\n\n";
  };
  std::string out = bos_token;
  std::size_t first = 0;
  if (!tools.empty() || system != Llama3System::kWithToolsOnly) {
    out += header("system");
    if (!tools.empty()) out += "Environment: ipython\n";
    out += "Cutting Knowledge Date: December 2023\nToday Date: ";
    if (date_string) {
      out += *date_string;
    } else {
      out += system == Llama3System::kToday ? today_date() : std::string(kLlama31Date);
    }
    out += "\n\n";
    if (messages[0].role == "system") {
      out += trim(messages[0].content);
      first = 1;
    }
    out += "<|eot_id|>";
  }
  if (!tools.empty()) {
    if (first == messages.size() || messages[first].role != "user") {
      const std::string f = "messages[" + std::to_string(first) + "]";
      return invalid_argument(f +
                              ": expected a user message here: with tools, Llama 3's "
                              "template puts them in the first message after the system one");
    }
    out += header("user");
    out += kLlama3ToolsUser;
    for (const OrderedJson& tool : tools) out += python_json(tool, 4) + "\n\n";
    out += trim(messages[first].content);
    out += "<|eot_id|>";
    ++first;
  }
  for (std::size_t i = first; i < messages.size(); ++i) {
    const ChatMessage& m = messages[i];
    if (m.role == "tool") {
      out += header("ipython") + python_json(OrderedJson(m.content)) + "<|eot_id|>";
    } else if (!m.tool_calls.empty()) {
      if (m.tool_calls.size() != 1) {
        const std::string f = "messages[" + std::to_string(i) + "].tool_calls";
        return invalid_argument(f +
                                ": Llama 3's template takes one tool call per assistant "
                                "message, got " +
                                std::to_string(m.tool_calls.size()));
      }
      PS_ASSIGN_OR_RETURN(OrderedJson args,
                          json_object(m.tool_calls[0].arguments, call_field(i, 0)));
      out += header("assistant") + "{\"name\": \"" + m.tool_calls[0].name +
             "\", \"parameters\": " + python_json(args) + "}<|eot_id|>";
    } else {
      out += header(m.role);
      out += trim(m.content);
      out += "<|eot_id|>";
    }
  }
  if (add_generation_prompt) out += header("assistant");
  return out;
}

// A tool call id as Mistral's templates take it: 9 characters. Longer ids (OpenAI's
// "call_...") are cut to their last 9, as vLLM does for Mistral models; shorter ones are an
// error naming `field`.
Result<std::string> mistral_call_id(const std::string& id, const std::string& field) {
  if (id.size() < kMistralCallIdLength) {
    return invalid_argument(field + ": Mistral's template needs a tool call id of " +
                            std::to_string(kMistralCallIdLength) + " characters, got \"" + id +
                            "\"");
  }
  return id.substr(id.size() - kMistralCallIdLength);
}

// One tool in [AVAILABLE_TOOLS] as Mistral's templates write it: its function's fields other
// than "return", a string value between quotes as is (not escaped), any other as `tojson`.
Result<std::string> mistral_tool(const OrderedJson& tool, std::size_t index) {
  const auto fn = tool.find("function");
  if (fn == tool.end() || !fn->is_object()) {
    return invalid_argument("tools[" + std::to_string(index) + "].function: expected an object");
  }
  std::string out = "{\"type\": \"function\", \"function\": {";
  bool first = true;
  for (auto it = fn->begin(); it != fn->end(); ++it) {
    if (it.key() == "return") continue;
    if (!first) out += ", ";
    first = false;
    out += "\"" + it.key() + "\": ";
    out += it->is_string() ? "\"" + it->get<std::string>() + "\"" : python_json(*it);
  }
  return out + "}}";
}

// Mistral's templates: user and assistant turns alternate after an optional first system
// message, tool results and assistant turns that call tools aside. Returns the index of the
// last user turn (messages.size() when there is none).
Result<std::size_t> check_mistral_turns(const std::vector<ChatMessage>& messages,
                                        std::size_t first) {
  std::size_t turn = 0;
  std::size_t last_user = messages.size();
  for (std::size_t i = first; i < messages.size(); ++i) {
    const ChatMessage& m = messages[i];
    if (m.role == "tool" || (m.role == "assistant" && !m.tool_calls.empty())) continue;
    const bool user_turn = turn++ % 2 == 0;
    if ((m.role == "user") != user_turn || (m.role != "user" && m.role != "assistant")) {
      return invalid_argument("messages[" + std::to_string(i) + "].role: expected \"" +
                              (user_turn ? "user" : "assistant") +
                              "\": Mistral's template needs user and assistant turns to "
                              "alternate after an optional first system message (tool calls "
                              "and results aside), got \"" +
                              m.role + "\"");
    }
    if (m.role == "user") last_user = i;
  }
  return last_user;
}

// Mistral-7B-Instruct-v0.1 / v0.2's template (as updated on their model pages: a system message
// before the first user turn): " [INST] content [/INST]", " content" + eos_token; no tools.
Result<std::string> render_mistral_v1(const std::vector<ChatMessage>& messages,
                                      const std::vector<OrderedJson>& tools,
                                      const std::string& bos_token, const std::string& eos_token) {
  if (!tools.empty()) {
    return invalid_argument("tools[0]: Mistral v0.1/v0.2's chat template has no tools");
  }
  const std::size_t first = messages[0].role == "system" ? 1 : 0;
  for (std::size_t i = first; i < messages.size(); ++i) {
    if (messages[i].role == "tool" || !messages[i].tool_calls.empty()) {
      return invalid_argument("messages[" + std::to_string(i) +
                              "]: Mistral v0.1/v0.2's chat template has no tool calls or results");
    }
  }
  PS_RETURN_IF_ERROR(check_mistral_turns(messages, first).status());
  std::string out = bos_token;
  for (std::size_t i = first; i < messages.size(); ++i) {
    const ChatMessage& m = messages[i];
    if (m.role == "user") {
      out += " [INST] ";
      if (first == 1 && i == first) out += messages[0].content + "\n\n";  // `loop.first`
      out += m.content + " [/INST]";
    } else {
      out += " " + m.content + eos_token;
    }
  }
  return out;
}

// Mistral-7B-Instruct-v0.3's template, or with `tekken` Mistral-Nemo's (chat_template.h).
Result<std::string> render_mistral(const std::vector<ChatMessage>& messages,
                                   const std::vector<OrderedJson>& tools,
                                   const std::string& bos_token, const std::string& eos_token,
                                   bool tekken) {
  const std::size_t first = messages[0].role == "system" ? 1 : 0;
  PS_ASSIGN_OR_RETURN(const std::size_t last_user, check_mistral_turns(messages, first));
  const std::string space = tekken ? "" : " ";
  std::string out = bos_token;
  for (std::size_t i = first; i < messages.size(); ++i) {
    const ChatMessage& m = messages[i];
    const std::string f = "messages[" + std::to_string(i) + "]";
    if (m.role == "user") {
      // `message == user_messages[-1]`: every user turn equal to the last one.
      if (!tools.empty() && m.content == messages[last_user].content) {
        out += "[AVAILABLE_TOOLS]" + space + "[";
        for (std::size_t t = 0; t < tools.size(); ++t) {
          PS_ASSIGN_OR_RETURN(std::string tool, mistral_tool(tools[t], t));
          out += (t > 0 ? ", " : "") + tool;
        }
        out += "][/AVAILABLE_TOOLS]";
      }
      out += "[INST]" + space;
      // `loop.last`: the system message only before a user turn that ends the messages.
      if (first == 1 && i + 1 == messages.size()) out += messages[0].content + "\n\n";
      out += m.content + "[/INST]";
    } else if (m.role == "tool") {
      PS_ASSIGN_OR_RETURN(std::string id, mistral_call_id(m.tool_call_id, f + ".tool_call_id"));
      out += "[TOOL_RESULTS]" + space + "{\"content\": " + m.content + ", \"call_id\": \"" + id +
             "\"}[/TOOL_RESULTS]";
    } else if (!m.tool_calls.empty()) {
      out += "[TOOL_CALLS]" + space + "[";
      for (std::size_t c = 0; c < m.tool_calls.size(); ++c) {
        const ChatToolCall& call = m.tool_calls[c];
        PS_ASSIGN_OR_RETURN(OrderedJson args, json_object(call.arguments, call_field(i, c)));
        PS_ASSIGN_OR_RETURN(
            std::string id,
            mistral_call_id(call.id, f + ".tool_calls[" + std::to_string(c) + "].id"));
        OrderedJson fn = {{"name", call.name}, {"arguments", std::move(args)}};
        std::string text = python_json(fn);
        text.pop_back();  // the template's out[:-1]
        out += (c > 0 ? ", " : "") + text + ", \"id\": \"" + id + "\"}";
      }
      out += "]" + eos_token;
    } else if (tekken) {
      out += m.content + eos_token;
    } else {
      out += " ";
      out += trim(m.content);
      out += eos_token;
    }
  }
  return out;
}

}  // namespace

Result<std::string> ChatTemplate::render(const std::vector<ChatMessage>& messages,
                                         bool add_generation_prompt,
                                         const ChatRenderOptions& options) const {
  if (messages.empty()) return invalid_argument("messages: expected at least one message");
  if (options.continue_final_message) {
    return render_continuing(messages, add_generation_prompt, options);
  }
  for (std::size_t i = 0; i < messages.size(); ++i) {
    const ChatMessage& m = messages[i];
    const std::string f = "messages[" + std::to_string(i) + "]";
    if (m.role != "system" && m.role != "user" && m.role != "assistant" && m.role != "tool") {
      return invalid_argument(f +
                              ".role: expected \"system\", \"user\", \"assistant\" or "
                              "\"tool\", got \"" +
                              m.role + "\"");
    }
    if (!m.tool_calls.empty() && m.role != "assistant") {
      return invalid_argument(f + ".tool_calls: only an assistant message makes tool calls");
    }
    PS_RETURN_IF_ERROR(validate_utf8(m.content));
    for (const ChatToolCall& call : m.tool_calls) {
      PS_RETURN_IF_ERROR(validate_utf8(call.name));
      PS_RETURN_IF_ERROR(validate_utf8(call.arguments));
    }
  }
  PS_ASSIGN_OR_RETURN(std::vector<OrderedJson> parsed_tools, parse_tools(options.tools));
  if (family_ == ChatTemplateFamily::kLlama3) {
    return render_llama3(messages, add_generation_prompt, parsed_tools, bos_token_,
                         traits_.llama3_system, options.date_string);
  }
  if (family_ == ChatTemplateFamily::kMistralV1) {
    return render_mistral_v1(messages, parsed_tools, bos_token_, eos_token_);
  }
  if (family_ == ChatTemplateFamily::kMistral || family_ == ChatTemplateFamily::kMistralTekken) {
    return render_mistral(messages, parsed_tools, bos_token_, eos_token_,
                          family_ == ChatTemplateFamily::kMistralTekken);
  }
  return render_chatml(messages, add_generation_prompt, parsed_tools, traits_.thinking_switch,
                       traits_.thinking_switch && !options.enable_thinking, traits_.default_system);
}

// As Hugging Face's apply_chat_template(continue_final_message=True): the whole conversation,
// cut after the last occurrence of the final message's stripped content.
Result<std::string> ChatTemplate::render_continuing(const std::vector<ChatMessage>& messages,
                                                    bool add_generation_prompt,
                                                    const ChatRenderOptions& options) const {
  if (add_generation_prompt) {
    return invalid_argument(
        "continue_final_message: cannot be true with add_generation_prompt (the final message "
        "is continued, no new turn is opened)");
  }
  const ChatMessage& last = messages.back();
  const std::string f = "messages[" + std::to_string(messages.size() - 1) + "]";
  if (last.role != "assistant") {
    return invalid_argument(f +
                            ".role: continue_final_message continues an assistant message, got \"" +
                            last.role + "\"");
  }
  if (!last.tool_calls.empty()) {
    return invalid_argument(f + ".tool_calls: continue_final_message cannot continue tool calls");
  }
  const std::string_view text = trim(last.content);
  if (text.empty()) {
    return invalid_argument(f + ".content: continue_final_message needs text to continue");
  }
  ChatRenderOptions whole = options;
  whole.continue_final_message = false;
  PS_ASSIGN_OR_RETURN(std::string rendered, render(messages, false, whole));
  const std::size_t at = rendered.rfind(text);
  if (at == std::string::npos) {
    return invalid_argument(f +
                            ".content: not in the rendered prompt (the template changes it), so "
                            "it cannot be continued");
  }
  // Hugging Face's test, quirk included: the whitespace after the content is kept only when
  // the content has none before it and the prompt has the content exactly as given.
  const bool kept = text.data() == last.content.data() &&
                    rendered.compare(at, last.content.size(), last.content) == 0;
  rendered.resize(at + (kept ? last.content.size() : text.size()));
  return rendered;
}

}  // namespace packserve::tokenizer
