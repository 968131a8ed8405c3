// stream_decoder.h: incremental decoding for streaming output. Tokens arrive one at a time;
// push() returns the text that is complete so far and holds back the bytes of a character
// that later tokens may still complete (a byte-level token can end in the middle of a UTF-8
// sequence: one emoji is often 2-4 tokens).
// Contract: the concatenation of every push() result and finish() equals
// Tokenizer::decode(all ids) (tested on random id sequences); no returned chunk ever holds
// part of a character; bytes that can no longer become a valid character are emitted as
// U+FFFD as soon as that is known; at most 3 bytes are ever held.
// Failure: push() with an unknown id returns kInvalidArgument and leaves the state unchanged.
// Thread-safety: one StreamDecoder per stream; not for concurrent use.
#pragma once

#include <string>

#include "packserve/tokenizer/tokenizer.h"

namespace packserve::tokenizer {

class StreamDecoder {
 public:
  StreamDecoder(Tokenizer tokenizer, DecodeOptions options)
      : tokenizer_(std::move(tokenizer)), options_(options) {}

  // Adds token `id`; returns the newly completed text (possibly empty).
  Result<std::string> push(TokenId id);
  // Ends the stream: returns the held bytes converted (an incomplete character becomes
  // U+FFFD) and resets the decoder for a new stream.
  std::string finish();
  // Bytes currently held back (0..3).
  std::size_t num_pending_bytes() const { return pending_bytes_.size(); }

 private:
  Tokenizer tokenizer_;
  DecodeOptions options_;
  std::string pending_bytes_;
};

}  // namespace packserve::tokenizer
