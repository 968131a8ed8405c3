// json_schema_free_form.cc: see json_schema_free_form.h.
#include "packserve/grammar/json_schema_free_form.h"

#include "packserve/grammar/json_schema.h"

namespace packserve::grammar::detail {

std::string json_string_regex() { return "\"" + std::string(kJsonStringChar) + "*\""; }

std::string object_of(const std::string& value, std::string_view ws_view) {
  const std::string ws(ws_view);
  const std::string member = json_string_regex() + ws + ":" + ws + value;
  return "\\{" + ws + "(?:" + member + "(?:" + ws + "," + ws + member + ")*" + ws + ")?\\}";
}

std::string array_of(const std::string& value, std::string_view ws_view) {
  const std::string ws(ws_view);
  return "\\[" + ws + "(?:" + value + "(?:" + ws + "," + ws + value + ")*" + ws + ")?\\]";
}

std::string free_form_value(int levels, std::string_view ws) {
  std::string out =
      "(?:" + json_string_regex() + "|" + std::string(kJsonNumberRegex) + "|true|false|null";
  if (levels > 0) {
    const std::string inner = free_form_value(levels - 1, ws);
    out += "|" + object_of(inner, ws) + "|" + array_of(inner, ws);
  }
  return out + ")";
}

}  // namespace packserve::grammar::detail
