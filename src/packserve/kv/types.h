// types.h: the vocabulary shared by the KV-cache manager and the scheduler (DESIGN.md
// "KV-cache manager"): request ids, token ids, physical page ids and page keys.
//
// PageId is int32_t because the attention engine's BatchLayout::kv_page_indices is int32_t:
// a request's page table exports to it without conversion.
// Thread-safety: plain types.
#pragma once

#include <cstdint>

namespace packserve::kv {

using RequestId = uint64_t;  // chosen by the caller; unique among live requests
using TokenId = int32_t;     // vocabulary index
using PageId = int32_t;      // physical page, 0 <= id < KvCacheConfig::num_pages
using PageKey = uint64_t;    // content key of a full page (block_hash.h)

}  // namespace packserve::kv
