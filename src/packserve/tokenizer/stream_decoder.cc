// stream_decoder.cc: see stream_decoder.h.
#include "packserve/tokenizer/stream_decoder.h"

#include "packserve/tokenizer/utf8.h"

namespace packserve::tokenizer {

Result<std::string> StreamDecoder::push(TokenId id) {
  std::string bytes;
  PS_RETURN_IF_ERROR(tokenizer_.append_token_bytes(id, options_, bytes));
  pending_bytes_ += bytes;
  std::string text;
  const std::size_t consumed = append_utf8_lossy(pending_bytes_, /*final=*/false, text);
  pending_bytes_.erase(0, consumed);
  return text;
}

std::string StreamDecoder::finish() {
  std::string text;
  (void)append_utf8_lossy(pending_bytes_, /*final=*/true, text);
  pending_bytes_.clear();
  return text;
}

}  // namespace packserve::tokenizer
