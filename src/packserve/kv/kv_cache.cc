// kv_cache.cc: see kv_cache.h for the states, the invariants and the failure contract.
#include "packserve/kv/kv_cache.h"

#include <algorithm>
#include <string>

#include "fmt/format.h"

namespace packserve::kv {

namespace {
constexpr int32_t kMaxPageSize = 256;  // attention::kMaxPageSize; kv does not see attention
}  // namespace

Status KvCacheConfig::validate() const {
  if (num_pages < 1) {
    return invalid_argument(
        fmt::format("kv.num_pages: expected an integer >= 1, got {}", num_pages));
  }
  if (page_size < 1 || page_size > kMaxPageSize) {
    return invalid_argument(fmt::format("kv.page_size: expected an integer in [1, {}], got {}",
                                        kMaxPageSize, page_size));
  }
  return ok_status();
}

double KvCacheStats::prefix_hit_rate() const {
  return prefix_lookup_tokens == 0
             ? 0.0
             : static_cast<double>(prefix_hit_tokens) / static_cast<double>(prefix_lookup_tokens);
}

KvCacheManager::KvCacheManager(const KvCacheConfig& config) : config_(config) {
  const Status valid = config.validate();
  PS_CHECK(valid.ok()) << valid.to_string();
  pages_.resize(static_cast<size_t>(config_.num_pages));
  free_pages_.reserve(static_cast<size_t>(config_.num_pages));
  // Pushed in reverse so that page 0 is handed out first (readable tests and logs).
  for (PageId p = config_.num_pages - 1; p >= 0; --p) free_pages_.push_back(p);
  counters_.pages_total = config_.num_pages;
}

int32_t KvCacheManager::pages_for_tokens(int64_t num_tokens) const {
  return static_cast<int32_t>((num_tokens + config_.page_size - 1) / config_.page_size);
}

// ---- LRU list of cached pages (intrusive, doubly linked over page ids) ----

void KvCacheManager::lru_push_back(PageId page) {
  PageMeta& m = pages_[page];
  m.lru_prev = lru_tail_;
  m.lru_next = -1;
  if (lru_tail_ >= 0) {
    pages_[lru_tail_].lru_next = page;
  } else {
    lru_head_ = page;
  }
  lru_tail_ = page;
  ++num_cached_;
}

void KvCacheManager::lru_remove(PageId page) {
  PageMeta& m = pages_[page];
  if (m.lru_prev >= 0) {
    pages_[m.lru_prev].lru_next = m.lru_next;
  } else {
    lru_head_ = m.lru_next;
  }
  if (m.lru_next >= 0) {
    pages_[m.lru_next].lru_prev = m.lru_prev;
  } else {
    lru_tail_ = m.lru_prev;
  }
  m.lru_prev = m.lru_next = -1;
  --num_cached_;
}

PageId KvCacheManager::take_page() {
  PageId page;
  if (!free_pages_.empty()) {
    page = free_pages_.back();
    free_pages_.pop_back();
  } else {
    PS_CHECK(lru_head_ >= 0) << "take_page on an empty pool";
    page = lru_head_;
    lru_remove(page);
    PageMeta& m = pages_[page];
    key_to_page_.erase(m.key);
    m.published = false;
    m.key = 0;
    ++counters_.num_evictions;
  }
  PageMeta& m = pages_[page];
  m.state = PageState::kInUse;
  m.refcount = 1;
  return page;
}

void KvCacheManager::release_page(PageId page) {
  PageMeta& m = pages_[page];
  PS_CHECK(m.refcount >= 1) << "release of page " << page << " with refcount " << m.refcount;
  if (--m.refcount > 0) return;
  if (m.published) {
    m.state = PageState::kCached;
    lru_push_back(page);
  } else {
    m.state = PageState::kFree;
    free_pages_.push_back(page);
  }
}

const PageKey* KvCacheManager::frontier_key(const RequestPages& req) {
  const size_t j = static_cast<size_t>(req.num_keyed_pages - req.first_pending_page);
  return j < req.pending_keys.size() ? &req.pending_keys[j] : nullptr;
}

void KvCacheManager::index_frontier(const RequestPages& req, RequestId id) {
  const PageKey* key = frontier_key(req);
  if (key != nullptr && key_to_page_.count(*key) == 0) frontier_owner_.emplace(*key, id);
}

void KvCacheManager::unindex_frontier(const PageKey* key, RequestId id) {
  if (key == nullptr) return;
  const auto it = frontier_owner_.find(*key);
  if (it != frontier_owner_.end() && it->second == id) frontier_owner_.erase(it);
}

// ---- requests ----

int32_t KvCacheManager::pages_needed(const RequestPages& req, int32_t num_new_tokens) const {
  const int32_t end = req.num_computed_tokens + num_new_tokens;
  const int32_t have = static_cast<int32_t>(req.pages.size());
  int32_t needed = std::max(0, pages_for_tokens(end) - have);
  if (num_new_tokens > 0) {
    // Copy-on-write for existing pages overlapping the write range [c, end).
    const int32_t first = req.num_computed_tokens / config_.page_size;
    const int32_t last = std::min(have, pages_for_tokens(end));
    for (int32_t i = first; i < last; ++i) {
      const PageMeta& m = pages_[req.pages[i]];
      if (m.refcount > 1 || m.published) ++needed;
    }
  }
  return needed;
}

void KvCacheManager::allocate_checked(RequestPages& req, int32_t num_new_tokens,
                                      std::vector<PageCopy>* copies) {
  const int32_t c = req.num_computed_tokens;
  const int32_t end = c + num_new_tokens;
  const int32_t have = static_cast<int32_t>(req.pages.size());
  if (num_new_tokens > 0) {
    const int32_t first = c / config_.page_size;
    const int32_t last = std::min(have, pages_for_tokens(end));
    for (int32_t i = first; i < last; ++i) {
      const PageId src = req.pages[i];
      const PageMeta& m = pages_[src];
      if (m.refcount <= 1 && !m.published) continue;
      const PageId dst = take_page();
      // Slots below c in this page hold computed KV that the request keeps reading.
      const int32_t keep_tokens = std::min(config_.page_size, c - i * config_.page_size);
      if (keep_tokens > 0) {
        PS_CHECK(copies != nullptr) << "copy-on-write needs a copies vector";
        copies->push_back(PageCopy{src, dst, keep_tokens});
        ++counters_.num_cow_copies;
      }
      req.pages[i] = dst;
      release_page(src);
    }
  }
  const int32_t want = pages_for_tokens(end);
  while (static_cast<int32_t>(req.pages.size()) < want) req.pages.push_back(take_page());
}

Result<AdmitResult> KvCacheManager::add_request(RequestId id, std::span<const TokenId> tokens,
                                                int32_t max_new_tokens,
                                                std::vector<PageCopy>* copies, bool adopt_cached) {
  if (requests_.count(id) != 0) {
    return invalid_argument(fmt::format("req={}: request id is already live", id));
  }
  if (tokens.empty()) {
    return invalid_argument(fmt::format("req={}: tokens: expected >= 1 token, got 0", id));
  }
  if (max_new_tokens < 0) {
    return invalid_argument(
        fmt::format("req={}: max_new_tokens: expected >= 0, got {}", id, max_new_tokens));
  }
  const int64_t n = static_cast<int64_t>(tokens.size());
  if (n > INT32_MAX / 2) {
    return invalid_argument(fmt::format("req={}: tokens: {} tokens is too many", id, n));
  }

  // Longest run of published full pages; scratch_keys_[i] = key of full page i.
  RequestPages req;
  scratch_keys_.clear();
  if (config_.enable_prefix_caching) {
    full_page_keys(tokens, config_.page_size, &scratch_keys_);
    for (const PageKey key : scratch_keys_) {
      if (!adopt_cached) break;
      const auto it = key_to_page_.find(key);
      if (it == key_to_page_.end()) break;
      req.pages.push_back(it->second);
    }
  }
  const int32_t num_tokens = static_cast<int32_t>(n);
  int32_t num_new = 0;
  for (;;) {
    const int32_t adopted_tokens = static_cast<int32_t>(req.pages.size()) * config_.page_size;
    const bool capped = adopted_tokens > num_tokens - 1;
    req.num_computed_tokens = std::min(adopted_tokens, num_tokens - 1);
    num_new = std::min(max_new_tokens, num_tokens - req.num_computed_tokens);
    // Capacity check before touching anything: adopted pages that are cached today leave the
    // evictable pool. Adopted pages are published, so pages_needed() counts a copy for an
    // adopted page in the write range.
    int32_t adopted_cached = 0;
    for (const PageId p : req.pages) {
      if (pages_[p].state == PageState::kCached) ++adopted_cached;
    }
    const int32_t needed = pages_needed(req, num_new);
    const int32_t available = num_allocatable_pages() - adopted_cached;
    if (needed <= available) break;
    if (capped) {
      // Every token was cached and the last one must be recomputed into a copy of the last
      // page: without room for the copy, recompute that whole page instead (its cached page
      // stays evictable, which can be exactly the page that makes it fit).
      req.pages.pop_back();
      continue;
    }
    return resource_exhausted(
        fmt::format("req={}: needs {} pages for {} new tokens after {} cached, {} allocatable", id,
                    needed, num_new, req.num_computed_tokens, available));
  }
  req.num_keyed_pages = static_cast<int32_t>(req.pages.size());
  req.chain_key = req.pages.empty() ? kRootPageKey : scratch_keys_[req.pages.size() - 1];
  // The full pages it will compute and publish are pending until it commits them.
  req.first_pending_page = req.num_keyed_pages;
  req.pending_keys.assign(scratch_keys_.begin() + req.num_keyed_pages, scratch_keys_.end());
  index_frontier(req, id);

  for (const PageId p : req.pages) {
    PageMeta& m = pages_[p];
    if (m.state == PageState::kCached) {
      lru_remove(p);
      m.state = PageState::kInUse;
    }
    ++m.refcount;
  }
  allocate_checked(req, num_new, copies);
  if (adopt_cached) {
    counters_.prefix_lookup_tokens += n;
    counters_.prefix_hit_tokens += req.num_computed_tokens;
  }
  const AdmitResult result{req.num_computed_tokens, num_new};
  requests_.emplace(id, std::move(req));
  return result;
}

Status KvCacheManager::allocate_slots(RequestId id, int32_t num_new_tokens,
                                      std::vector<PageCopy>* copies) {
  const auto it = requests_.find(id);
  if (it == requests_.end()) {
    return invalid_argument(fmt::format("req={}: allocate_slots of an unknown request", id));
  }
  if (num_new_tokens < 0 || num_new_tokens > INT32_MAX / 2) {
    return invalid_argument(
        fmt::format("req={}: num_new_tokens: expected >= 0, got {}", id, num_new_tokens));
  }
  RequestPages& req = it->second;
  const int32_t needed = pages_needed(req, num_new_tokens);
  if (needed > num_allocatable_pages()) {
    return resource_exhausted(
        fmt::format("req={}: needs {} pages for {} new tokens, {} allocatable", id, needed,
                    num_new_tokens, num_allocatable_pages()));
  }
  allocate_checked(req, num_new_tokens, copies);
  return ok_status();
}

Status KvCacheManager::commit_computed(RequestId id, std::span<const TokenId> tokens,
                                       int32_t num_new_tokens) {
  const auto it = requests_.find(id);
  if (it == requests_.end()) {
    return invalid_argument(fmt::format("req={}: commit_computed of an unknown request", id));
  }
  RequestPages& req = it->second;
  const int64_t end = static_cast<int64_t>(req.num_computed_tokens) + num_new_tokens;
  const int64_t slots = static_cast<int64_t>(req.pages.size()) * config_.page_size;
  if (num_new_tokens < 0 || end > slots || end > static_cast<int64_t>(tokens.size())) {
    return invalid_argument(fmt::format(
        "req={}: commit_computed of {} tokens after {}: expected >= 0 and the end <= {} "
        "allocated slots and <= {} known tokens",
        id, num_new_tokens, req.num_computed_tokens, slots, tokens.size()));
  }
  req.num_computed_tokens = static_cast<int32_t>(end);
  const int32_t num_full = req.num_computed_tokens / config_.page_size;
  const size_t page = static_cast<size_t>(config_.page_size);
  const PageKey* old_frontier = frontier_key(req);
  const int32_t keyed_before = req.num_keyed_pages;
  while (req.num_keyed_pages < num_full) {
    const int32_t i = req.num_keyed_pages;
    const PageKey* pending = frontier_key(req);
    req.chain_key =
        pending != nullptr
            ? *pending
            : page_key(req.chain_key, tokens.subspan(static_cast<size_t>(i) * page, page));
    ++req.num_keyed_pages;
    if (!config_.enable_prefix_caching) continue;
    // A page with the same content may already be published (two requests computed the same
    // prefix at once); then this copy stays private and is freed when the request ends.
    const auto [slot, inserted] = key_to_page_.emplace(req.chain_key, req.pages[i]);
    if (!inserted) continue;
    PageMeta& m = pages_[req.pages[i]];
    PS_CHECK(!m.published && m.refcount >= 1) << "publishing page " << req.pages[i];
    m.published = true;
    m.key = req.chain_key;
    ++counters_.num_pages_published;
  }
  if (req.num_keyed_pages != keyed_before) {
    unindex_frontier(old_frontier, id);
    index_frontier(req, id);
  }
  return ok_status();
}

Status KvCacheManager::fork(RequestId parent, RequestId child) {
  const auto it = requests_.find(parent);
  if (it == requests_.end()) {
    return invalid_argument(fmt::format("req={}: fork of an unknown request", parent));
  }
  if (requests_.count(child) != 0) {
    return invalid_argument(fmt::format("req={}: fork child id is already live", child));
  }
  RequestPages copy = it->second;
  copy.pending_keys.clear();  // the parent computes them
  for (const PageId p : copy.pages) ++pages_[p].refcount;
  requests_.emplace(child, std::move(copy));
  return ok_status();
}

Status KvCacheManager::free_request(RequestId id) {
  const auto it = requests_.find(id);
  if (it == requests_.end()) {
    return invalid_argument(fmt::format("req={}: free of an unknown request", id));
  }
  const std::vector<PageId>& pages = it->second.pages;
  for (auto p = pages.rbegin(); p != pages.rend(); ++p) release_page(*p);
  unindex_frontier(frontier_key(it->second), id);
  requests_.erase(it);
  return ok_status();
}

// ---- queries ----

Result<std::span<const PageId>> KvCacheManager::page_table(RequestId id) const {
  const auto it = requests_.find(id);
  if (it == requests_.end()) {
    return invalid_argument(fmt::format("req={}: page_table of an unknown request", id));
  }
  return std::span<const PageId>(it->second.pages);
}

Result<int32_t> KvCacheManager::num_computed_tokens(RequestId id) const {
  const auto it = requests_.find(id);
  if (it == requests_.end()) {
    return invalid_argument(fmt::format("req={}: num_computed_tokens of an unknown request", id));
  }
  return it->second.num_computed_tokens;
}

PageState KvCacheManager::page_state(PageId page) const {
  PS_CHECK(page >= 0 && page < config_.num_pages) << "page " << page;
  return pages_[page].state;
}

int32_t KvCacheManager::page_refcount(PageId page) const {
  PS_CHECK(page >= 0 && page < config_.num_pages) << "page " << page;
  return pages_[page].refcount;
}

bool KvCacheManager::page_is_published(PageId page) const {
  PS_CHECK(page >= 0 && page < config_.num_pages) << "page " << page;
  return pages_[page].published;
}

PrefixProbe KvCacheManager::probe_prefix(std::span<const PageKey> keys) const {
  PrefixProbe probe;
  if (!config_.enable_prefix_caching) return probe;
  size_t i = 0;
  while (i < keys.size() && key_to_page_.count(keys[i]) != 0) ++i;
  probe.num_cached_pages = static_cast<int32_t>(i);
  if (i == keys.size()) return probe;
  const auto owner = frontier_owner_.find(keys[i]);
  if (owner == frontier_owner_.end()) return probe;
  const RequestPages& req = requests_.at(owner->second);  // its frontier is keys[i]
  const std::span<const PageKey> pending(frontier_key(req),
                                         req.pending_keys.data() + req.pending_keys.size());
  size_t n = 0;
  while (i + n < keys.size() && n < pending.size() && keys[i + n] == pending[n]) ++n;
  probe.num_pending_pages = static_cast<int32_t>(n);
  return probe;
}

std::vector<PageId> KvCacheManager::lru_order() const {
  std::vector<PageId> order;
  order.reserve(static_cast<size_t>(num_cached_));
  for (PageId p = lru_head_; p >= 0; p = pages_[p].lru_next) order.push_back(p);
  return order;
}

KvCacheStats KvCacheManager::stats() const {
  KvCacheStats s = counters_;
  s.pages_total = config_.num_pages;
  s.pages_free = static_cast<int64_t>(free_pages_.size());
  s.pages_cached = num_cached_;
  s.pages_in_use = s.pages_total - s.pages_free - s.pages_cached;
  return s;
}

Status KvCacheManager::check_invariants() const {
  const size_t num_pages = pages_.size();
  std::vector<int32_t> holders(num_pages, 0);
  for (const auto& [id, req] : requests_) {
    const int64_t slots = static_cast<int64_t>(req.pages.size()) * config_.page_size;
    if (req.num_computed_tokens > slots) {
      return internal_error(fmt::format("req={}: {} computed tokens but only {} slots", id,
                                        req.num_computed_tokens, slots));
    }
    if (req.num_keyed_pages > static_cast<int32_t>(req.pages.size())) {
      return internal_error(fmt::format("req={}: {} keyed pages > {} pages", id,
                                        req.num_keyed_pages, req.pages.size()));
    }
    for (const PageId p : req.pages) {
      if (p < 0 || static_cast<size_t>(p) >= num_pages) {
        return internal_error(fmt::format("req={}: page id {} out of range", id, p));
      }
      ++holders[p];
    }
  }
  std::vector<uint8_t> on_free(num_pages, 0), on_lru(num_pages, 0);
  for (const PageId p : free_pages_) {
    if (p < 0 || static_cast<size_t>(p) >= num_pages || on_free[p]) {
      return internal_error(fmt::format("free list: page {} out of range or listed twice", p));
    }
    on_free[p] = 1;
  }
  int32_t lru_count = 0;
  PageId prev = -1;
  for (PageId p = lru_head_; p >= 0; p = pages_[p].lru_next) {
    if (static_cast<size_t>(p) >= num_pages || on_lru[p] || pages_[p].lru_prev != prev) {
      return internal_error(fmt::format("LRU list broken at page {}", p));
    }
    on_lru[p] = 1;
    prev = p;
    ++lru_count;
  }
  if (prev != lru_tail_ || lru_count != num_cached_) {
    return internal_error(fmt::format("LRU list: tail {} vs {}, length {} vs count {}", prev,
                                      lru_tail_, lru_count, num_cached_));
  }
  int64_t num_published = 0;
  for (size_t i = 0; i < num_pages; ++i) {
    const PageMeta& m = pages_[i];
    const PageId p = static_cast<PageId>(i);
    if (m.refcount != holders[i]) {
      return internal_error(fmt::format("page {}: refcount {} but {} page tables hold it", p,
                                        m.refcount, holders[i]));
    }
    const bool is_free = m.state == PageState::kFree;
    const bool is_cached = m.state == PageState::kCached;
    const bool in_use = m.state == PageState::kInUse;
    if (is_free != (on_free[i] != 0) || is_cached != (on_lru[i] != 0) ||
        in_use != (m.refcount > 0)) {
      return internal_error(fmt::format("page {}: state {} but on_free={} on_lru={} refcount={}", p,
                                        static_cast<int>(m.state), on_free[i], on_lru[i],
                                        m.refcount));
    }
    if ((is_free && m.published) || (is_cached && !m.published)) {
      return internal_error(fmt::format("page {}: state {} but published={}", p,
                                        static_cast<int>(m.state), m.published));
    }
    if (m.published) {
      ++num_published;
      const auto it = key_to_page_.find(m.key);
      if (it == key_to_page_.end() || it->second != p) {
        return internal_error(
            fmt::format("page {}: published key {:#x} does not map to it", p, m.key));
      }
    }
  }
  if (num_published != static_cast<int64_t>(key_to_page_.size())) {
    return internal_error(
        fmt::format("{} published pages but {} keys", num_published, key_to_page_.size()));
  }
  for (const auto& [key, owner] : frontier_owner_) {
    const auto it = requests_.find(owner);
    const PageKey* frontier = it == requests_.end() ? nullptr : frontier_key(it->second);
    if (frontier == nullptr || *frontier != key) {
      return internal_error(fmt::format(
          "frontier key {:#x}: owner req={} is not live or its frontier is elsewhere", key, owner));
    }
  }
  if (requests_.empty() &&
      static_cast<int64_t>(free_pages_.size()) + num_cached_ != config_.num_pages) {
    return internal_error(fmt::format("no live request but free {} + cached {} != total {}",
                                      free_pages_.size(), num_cached_, config_.num_pages));
  }
  return ok_status();
}

}  // namespace packserve::kv
