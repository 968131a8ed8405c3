// block_hash.cc: see block_hash.h.
#include "packserve/kv/block_hash.h"

#include <xxhash.h>

namespace packserve::kv {

PageKey page_key(PageKey parent_key, std::span<const TokenId> page_tokens) {
  return XXH3_64bits_withSeed(page_tokens.data(), page_tokens.size_bytes(), parent_key);
}

void full_page_keys(std::span<const TokenId> tokens, int32_t page_size,
                    std::vector<PageKey>* keys) {
  keys->clear();
  const size_t page = static_cast<size_t>(page_size);
  const size_t num_full = tokens.size() / page;
  keys->reserve(num_full);
  PageKey parent = kRootPageKey;
  for (size_t i = 0; i < num_full; ++i) {
    parent = page_key(parent, tokens.subspan(i * page, page));
    keys->push_back(parent);
  }
}

}  // namespace packserve::kv
