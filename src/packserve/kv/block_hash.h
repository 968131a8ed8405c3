// block_hash.h: the content key of a full KV page, chained through its parents (DESIGN.md
// "KV-cache manager": prefix caching).
//
//   key(page 0) = XXH3_64(token ids of page 0, seed = kRootPageKey)
//   key(page i) = XXH3_64(token ids of page i, seed = key(page i-1))
//
// so two full pages have the same key iff (up to 64-bit collisions) they hold the same tokens
// AND all their ancestors did: a key names a whole prefix, not just one page. Token ids are
// hashed as their little-endian int32 bytes (the host representation; every supported host is
// little-endian). A collision would make a request adopt a wrong page: with k cached pages the
// probability is about k^2 / 2^65 (1e-8 for a million pages), which we accept, as vLLM does by
// default; keys are never compared for anything but cache lookup.
// Thread-safety: pure functions.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "packserve/kv/types.h"

namespace packserve::kv {

// Seed of the first page of every request (the parent key of page 0).
inline constexpr PageKey kRootPageKey = 0x9e3779b97f4a7c15ull;

// Key of one page whose parent page has key `parent_key` (kRootPageKey for page 0).
// `page_tokens` is the page's full token list (page_size tokens).
PageKey page_key(PageKey parent_key, std::span<const TokenId> page_tokens);

// Keys of the full pages of `tokens`, in order: keys->size() = tokens.size() / page_size
// (a trailing partial page has no key). page_size >= 1. `keys` is overwritten.
void full_page_keys(std::span<const TokenId> tokens, int32_t page_size, std::vector<PageKey>* keys);

}  // namespace packserve::kv
