// json_schema_format.cc: see json_schema_format.h. ipv6 is built per count of groups before
// its "::" so that each alternative allows exactly the addresses with that many.
#include "packserve/grammar/json_schema_format.h"

#include <vector>

#include "packserve/grammar/json_schema_internal.h"

namespace packserve::grammar::detail {
namespace {

constexpr std::string_view kDate = "(?:[0-9]{4}-(?:0[1-9]|1[0-2])-(?:0[1-9]|[12][0-9]|3[01]))";
constexpr std::string_view kTime =
    R"((?:(?:[01][0-9]|2[0-3]):[0-5][0-9]:(?:[0-5][0-9]|60)(?:\.[0-9]+)?)"
    R"((?:[Zz]|[+\-](?:[01][0-9]|2[0-3]):[0-5][0-9])))";
constexpr std::string_view kUuid =
    "[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}";
constexpr std::string_view kOctet = "(?:25[0-5]|2[0-4][0-9]|1[0-9]{2}|[1-9]?[0-9])";
constexpr std::string_view kLabel = "[a-zA-Z0-9](?:[a-zA-Z0-9-]{0,61}[a-zA-Z0-9])?";
// RFC 5322 atext.
constexpr std::string_view kAtext = "[a-zA-Z0-9!#$%&'*+/=?^_`{|}~-]";
// RFC 3986 unreserved, gen-delims and sub-delims, or a percent escape.
constexpr std::string_view kUriChar = R"((?:[a-zA-Z0-9\-._~:/?#\[\]@!$&'()*+,;=]|%[0-9a-fA-F]{2}))";
// Date part, then time part (each unit optional in order, at least one), or weeks.
constexpr std::string_view kDurationTime =
    "T(?:[0-9]+H(?:[0-9]+M)?(?:[0-9]+S)?|[0-9]+M(?:[0-9]+S)?|[0-9]+S)";

std::string ipv4() {
  const std::string octet(kOctet);
  return "(?:" + octet + "\\.){3}" + octet;
}

std::string ipv6() {
  const std::string h = "[0-9a-fA-F]{1,4}";
  const std::string v4 = ipv4();
  // `n` groups joined by ':' ("" for 0).
  const auto groups = [&](int n) {
    if (n == 0) return std::string();
    return n == 1 ? h : "(?:" + h + ":){" + std::to_string(n - 1) + "}" + h;
  };
  // Up to `n` groups joined by ':' (possibly none).
  const auto up_to = [&](int n) {
    if (n == 0) return std::string();
    return "(?:" + h + (n > 1 ? "(?::" + h + "){0," + std::to_string(n - 1) + "}" : "") + ")?";
  };
  std::vector<std::string> forms = {groups(8), "(?:" + h + ":){6}" + v4};
  for (int left = 0; left <= 7; ++left) {  // "::" stands for at least one zero group
    forms.push_back(groups(left) + "::" + up_to(7 - left));
  }
  for (int left = 0; left <= 5; ++left) {  // with the IPv4 tail (two groups' worth)
    const int right = 5 - left;
    forms.push_back(groups(left) + "::" +
                    (right > 0 ? "(?:" + h + ":){0," + std::to_string(right) + "}" : "") + v4);
  }
  return alternation(std::move(forms));
}

std::string hostname() {
  const std::string label(kLabel);
  return label + "(?:\\." + label + ")*";
}

}  // namespace

std::optional<std::string> string_format_regex(std::string_view format) {
  if (format == "date") return std::string(kDate);
  if (format == "time") return std::string(kTime);
  if (format == "date-time") return std::string(kDate) + "[Tt]" + std::string(kTime);
  if (format == "duration") {
    const std::string t(kDurationTime);
    return "P(?:(?:[0-9]+Y(?:[0-9]+M)?(?:[0-9]+D)?|[0-9]+M(?:[0-9]+D)?|[0-9]+D)(?:" + t + ")?|" +
           t + "|[0-9]+W)";
  }
  if (format == "uuid") return std::string(kUuid);
  if (format == "ipv4") return ipv4();
  if (format == "ipv6") return ipv6();
  if (format == "hostname") return hostname();
  if (format == "email") {
    const std::string atext(kAtext);
    const std::string label(kLabel);
    return atext + "+(?:\\." + atext + "+)*@" + label + "(?:\\." + label + ")+";
  }
  const std::string uri_chars = std::string(kUriChar) + "*";
  if (format == "uri") return "[a-zA-Z][a-zA-Z0-9+.\\-]*:" + uri_chars;
  if (format == "uri-reference") return uri_chars;
  return std::nullopt;
}

std::string_view supported_string_formats() {
  return "date, time, date-time, duration, uuid, ipv4, ipv6, hostname, email, uri, "
         "uri-reference";
}

}  // namespace packserve::grammar::detail
