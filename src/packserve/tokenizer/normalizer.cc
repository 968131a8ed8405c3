// normalizer.cc: see normalizer.h.
#include "packserve/tokenizer/normalizer.h"

#include <unicode/bytestream.h>
#include <unicode/normalizer2.h>
#include <unicode/stringpiece.h>
#include <unicode/utypes.h>

#include <algorithm>
#include <cstdint>
#include <string>

namespace packserve::tokenizer {
namespace {

const icu::Normalizer2* instance(NormalizationForm form, UErrorCode& error) {
  switch (form) {
    case NormalizationForm::kNfc:
      return icu::Normalizer2::getNFCInstance(error);
    case NormalizationForm::kNfd:
      return icu::Normalizer2::getNFDInstance(error);
    case NormalizationForm::kNfkc:
      return icu::Normalizer2::getNFKCInstance(error);
    case NormalizationForm::kNfkd:
      return icu::Normalizer2::getNFKDInstance(error);
  }
  return nullptr;
}

bool is_ascii(std::string_view text) {
  return std::all_of(text.begin(), text.end(),
                     [](char c) { return static_cast<unsigned char>(c) < 0x80; });
}

}  // namespace

std::string replace_all(std::string_view text, std::string_view pattern, std::string_view content) {
  std::string out;
  out.reserve(text.size());
  std::size_t from = 0;
  for (std::size_t at; (at = text.find(pattern, from)) != std::string_view::npos;
       from = at + pattern.size()) {
    out.append(text, from, at - from).append(content);
  }
  return out.append(text, from);
}

Status Normalizer::apply_form(NormalizationForm form, std::string& text) const {
  if (is_ascii(text)) return ok_status();  // every form leaves ASCII alone
  if (text.size() > static_cast<std::size_t>(INT32_MAX) / 4) {
    return invalid_argument("text: " + std::to_string(text.size()) +
                            " bytes; expected at most 512 MiB to normalize");
  }
  UErrorCode error = U_ZERO_ERROR;
  const icu::Normalizer2* normalizer = instance(form, error);
  if (U_FAILURE(error) || normalizer == nullptr) {
    return internal_error(std::string("ICU normalizer unavailable: ") + u_errorName(error));
  }
  const icu::StringPiece piece(text.data(), static_cast<int32_t>(text.size()));
  if (normalizer->isNormalizedUTF8(piece, error) && U_SUCCESS(error)) return ok_status();
  error = U_ZERO_ERROR;
  std::string scratch;
  icu::StringByteSink<std::string> sink(&scratch);
  normalizer->normalizeUTF8(0, piece, sink, nullptr, error);
  if (U_FAILURE(error)) {
    return internal_error(std::string("ICU normalization failed: ") + u_errorName(error));
  }
  text.swap(scratch);
  return ok_status();
}

Status Normalizer::apply(std::string_view text, std::string& out) const {
  out.assign(text);
  for (const Step& step : steps_) {
    switch (step.kind) {
      case Step::kForm:
        PS_RETURN_IF_ERROR(apply_form(step.form, out));
        break;
      case Step::kPrepend:
        if (!out.empty()) out.insert(0, step.text);
        break;
      case Step::kReplace:
        out = replace_all(out, step.text, step.content);
        break;
    }
  }
  return ok_status();
}

}  // namespace packserve::tokenizer
