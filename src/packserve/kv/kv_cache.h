// kv_cache.h: the paged KV-cache manager (DESIGN.md "KV-cache manager"; issue 3).
//
// Owns: the page pool (reference counts, free list, LRU list of cached pages), the prefix
// cache (page key -> page, block_hash.h) and one page table per live request. It does not
// own KV memory: it hands out page ids; the engine's k_pages/v_pages hold the data.
//
// Page states. Every page is in exactly one of
//   free    refcount 0, no key, on the free list;
//   cached  refcount 0, published under its key, on the LRU list (evictable);
//   in use  refcount >= 1 (= the number of page tables holding it), published or not.
// A page is *published* when it became full with computed KV: its key (chained hash of its
// tokens and all parents, block_hash.h) maps to it, so a later request with the same prefix
// adopts it instead of recomputing. Published pages are immutable: nobody writes into them.
//
// Prefix caching. add_request() walks the request's full pages in order and adopts the longest
// run whose keys are published (refcount + 1; a cached page leaves the LRU list). At least one
// token is always left to compute, because the step that computes the last known token is
// the one that samples the next: when every token sits in adopted full pages, the last token
// is recomputed, which writes into (a copy of) the last adopted page; when the pool has no
// page for that copy, the last page is not adopted and is recomputed whole instead.
//
// Copy-on-write. Before a step writes KV at positions [c, c + k) of a request (c = its
// computed tokens), allocate_slots()/add_request() give it private pages there: a page in that
// range that is shared (refcount > 1, e.g. after fork()) or published is replaced in the
// request's table by a new page, and a PageCopy {src, dst, num_tokens} tells the engine to copy
// the src page's first num_tokens KV slots into dst before the forward. The src page loses one
// reference (and may become cached or free).
//
// Pending pages. add_request() keeps the keys of the request's full pages after the adopted
// ones: the pages it will compute and publish, *pending* until it commits them, which then
// takes their keys from there (no page is hashed twice). Its first uncommitted one, its
// frontier, is indexed under its key with the request as owner (the first request to index a
// key owns it) until the request commits it or ends. probe_prefix() finds a token list's next
// pages there, so a scheduler can let a request whose prefix another request is computing
// right now wait for it instead of computing it twice.
//
// Eviction. A page is allocated from the free list first, else by evicting the least recently
// used cached page (its key is unpublished). When a request ends its pages are released from
// the last to the first, so a chain's tail is evicted before its head (a head evicted first
// would make its cached descendants unreachable). Adoption moves a page out of the LRU list;
// the next release puts it back at the most-recent end.
//
// Failure contract (STYLE.md §5): bad input (unknown or duplicate request id, empty token
// list, negative counts, tokens shorter than what is committed) -> kInvalidArgument; not enough
// free + cached pages -> kResourceExhausted. In both cases nothing changed: not the pool, not
// the tables, not the statistics. All allocation is all-or-nothing.
//
// Invariants (check_invariants(), run by tests and, in debug builds, by the scheduler after
// every step): each page is in exactly one state; refcount = number of tables holding it;
// free list and LRU list hold exactly the free and cached pages; the key map and the pages'
// keys agree; a table covers its computed tokens; every indexed frontier is its live owner's
// frontier. Once all requests have ended, pages_free + pages_cached = pages_total and nothing
// is pending.
//
// Cost: add_request is O(prompt tokens) (hashing) + O(pages adopted); allocate_slots,
// commit_computed (amortized, one page hash per page_size generated tokens) and page
// allocation are O(pages touched); free_request is O(table length); probe_prefix is O(keys it
// counts). Nothing scans the pool except check_invariants().
// Thread-safety: none; owned and called by the scheduler's single thread.
#pragma once

#include <cstdint>
#include <span>
#include <unordered_map>
#include <vector>

#include "packserve/common/status.h"
#include "packserve/kv/block_hash.h"
#include "packserve/kv/types.h"

namespace packserve::kv {

struct KvCacheConfig {
  // Pages in the pool: the KV capacity divided by page_size tokens * KV bytes per token.
  // >= 1.
  int32_t num_pages = 4096;
  // Tokens per page. In [1, 256] (the attention kernels' range, attention::kMaxPageSize).
  int32_t page_size = 16;
  // Publish full computed pages under their chained key and let new requests adopt them;
  // when false, no page is ever cached and every ended request's pages go straight to free.
  bool enable_prefix_caching = true;

  // Names the first bad field, its value and the expected range.
  Status validate() const;
};

enum class PageState { kFree, kCached, kInUse };

// The engine copies KV slots [0, num_tokens) of src_page into dst_page (every layer, K and V)
// before running the step that produced it.
struct PageCopy {
  PageId src_page = 0;
  PageId dst_page = 0;
  int32_t num_tokens = 0;  // in [1, page_size]
};

struct KvCacheStats {
  int64_t pages_total = 0;
  int64_t pages_free = 0;
  int64_t pages_cached = 0;  // refcount 0, evictable
  int64_t pages_in_use = 0;  // refcount >= 1
  // Prefix hit accounting, counted by successful add_request calls (a preempted request that
  // is readmitted is looked up again): tokens looked up = all tokens passed; hit tokens =
  // tokens whose KV was adopted and need no compute.
  int64_t prefix_lookup_tokens = 0;
  int64_t prefix_hit_tokens = 0;
  int64_t num_pages_published = 0;  // pages that entered the key map
  int64_t num_evictions = 0;        // cached pages reclaimed for a new allocation
  int64_t num_cow_copies = 0;       // PageCopy records produced
  // prefix_hit_tokens / prefix_lookup_tokens, 0 when nothing was looked up.
  double prefix_hit_rate() const;
};

// What a request whose full pages have the keys `keys` (block_hash.h full_page_keys) would find
// now (probe_prefix()).
struct PrefixProbe {
  int32_t num_cached_pages = 0;   // leading pages published now: adoptable
  int32_t num_pending_pages = 0;  // the pages right after them that a live request is computing
};

struct AdmitResult {
  int32_t num_cached_tokens = 0;  // leading tokens adopted from the prefix cache (computed)
  int32_t num_new_tokens = 0;     // tokens after them with slots allocated for the next step
};

class KvCacheManager {
 public:
  // `config` must be valid (config.validate().ok()); checked with PS_CHECK.
  explicit KvCacheManager(const KvCacheConfig& config);

  // Registers request `id`, whose known tokens are `tokens` (prompt, plus tokens generated
  // before a preemption), adopts the longest run of published full pages of `tokens` (capped
  // so that at least one token stays to compute), then allocates slots for the next
  // min(max_new_tokens, tokens.size() - num_cached_tokens) tokens, as allocate_slots() does.
  // Appends any page copies to `copies` (may be null only if the caller knows none can occur,
  // i.e. prefix caching is off). adopt_cached = false: nothing is adopted (every token is
  // computed; its full pages are still published), and no prefix lookup is counted. Errors: id
  // already live, empty tokens, max_new_tokens < 0 (kInvalidArgument); not enough pages for
  // the first slots (kResourceExhausted, nothing adopted and no statistic counted).
  Result<AdmitResult> add_request(RequestId id, std::span<const TokenId> tokens,
                                  int32_t max_new_tokens, std::vector<PageCopy>* copies,
                                  bool adopt_cached = true);

  // Makes the page table of `id` cover positions [0, c + num_new_tokens) where c is its
  // computed-token count, allocating pages as needed, and gives it private pages for the
  // positions [c, c + num_new_tokens) it is about to write (copy-on-write, appended to
  // `copies`). Calling it again with the same count before commit_computed() changes nothing.
  // Errors: unknown id, num_new_tokens < 0 (kInvalidArgument); not enough free + cached pages
  // (kResourceExhausted, nothing changed).
  Status allocate_slots(RequestId id, int32_t num_new_tokens, std::vector<PageCopy>* copies);

  // Records that the KV of the next num_new_tokens positions of `id` has been written
  // (c += num_new_tokens) and publishes every page that became full. `tokens` is the request's
  // known token list, starting with the tokens it was admitted with (their page keys were taken
  // then); the pages after those are hashed from it. Errors: unknown id,
  // num_new_tokens < 0, c + num_new_tokens beyond the allocated slots or beyond tokens.size()
  // (kInvalidArgument, nothing changed).
  Status commit_computed(RequestId id, std::span<const TokenId> tokens, int32_t num_new_tokens);

  // Makes `child` a new request sharing every page of `parent` (refcount + 1 each) with the
  // same computed-token count: parallel sampling / beam search. The first write by either into
  // a shared partial page copies it. The child has no pending pages. Errors:
  // unknown parent, child already live (kInvalidArgument).
  Status fork(RequestId parent, RequestId child);

  // Ends request `id` (finished, cancelled, length limit, preempted): its pages lose a
  // reference, last page first; a page reaching 0 becomes cached if published (and prefix
  // caching is on), else free; its pending pages stop being pending. Errors: unknown id
  // (kInvalidArgument).
  Status free_request(RequestId id);

  // ---- queries ----
  bool contains(RequestId id) const { return requests_.count(id) != 0; }
  int64_t num_requests() const { return static_cast<int64_t>(requests_.size()); }
  // The page table of `id`, page i holding positions [i * page_size, (i + 1) * page_size):
  // the request's kv_page_indices. Valid until the next mutating call. Unknown id ->
  // kInvalidArgument.
  Result<std::span<const PageId>> page_table(RequestId id) const;
  // Tokens whose KV is computed (adopted or committed). Unknown id -> kInvalidArgument.
  Result<int32_t> num_computed_tokens(RequestId id) const;
  // Pages needed to hold num_tokens tokens: ceil(num_tokens / page_size).
  int32_t pages_for_tokens(int64_t num_tokens) const;
  // Pages an allocation could obtain right now: free + cached.
  int32_t num_allocatable_pages() const {
    return static_cast<int32_t>(free_pages_.size()) + num_cached_;
  }
  PageState page_state(PageId page) const;  // page in [0, num_pages), else PS_CHECK
  int32_t page_refcount(PageId page) const;
  bool page_is_published(PageId page) const;
  // How many of `keys` (the chained keys of a token list's full pages, in order) are
  // published from the first on, and how many right after those are pending pages of the live
  // request whose frontier is the next key (see the header comment). Both 0 when prefix
  // caching is off. O(pages counted).
  PrefixProbe probe_prefix(std::span<const PageKey> keys) const;
  // Whether any live request has an indexed frontier: probe_prefix() can find pending pages.
  bool has_pending_pages() const { return !frontier_owner_.empty(); }
  // The cached pages from least to most recently used (the eviction order). O(pages cached).
  std::vector<PageId> lru_order() const;
  KvCacheStats stats() const;
  const KvCacheConfig& config() const { return config_; }

  // Checks every invariant above; kInternal naming the first violation (page, values).
  // O(num_pages + total table length).
  Status check_invariants() const;

 private:
  struct PageMeta {
    int32_t refcount = 0;
    bool published = false;
    PageKey key = 0;  // valid when published
    PageState state = PageState::kFree;
    PageId lru_prev = -1;  // cached pages only
    PageId lru_next = -1;
  };
  struct RequestPages {
    std::vector<PageId> pages;
    int32_t num_computed_tokens = 0;
    // Leading pages whose chain key is known (adopted, or full and committed); the key of
    // page num_keyed_pages chains from chain_key (kRootPageKey before the first page).
    int32_t num_keyed_pages = 0;
    PageKey chain_key = kRootPageKey;
    // Keys of pages [first_pending_page, first_pending_page + pending_keys.size()): the full
    // pages of the tokens known at admission after the adopted ones. Those below
    // num_keyed_pages are committed; the one at num_keyed_pages is the frontier.
    int32_t first_pending_page = 0;
    std::vector<PageKey> pending_keys;
  };

  // Pages allocate_slots(req, num_new_tokens) would take from the pool.
  int32_t pages_needed(const RequestPages& req, int32_t num_new_tokens) const;
  // Performs allocate_slots after the capacity check.
  void allocate_checked(RequestPages& req, int32_t num_new_tokens, std::vector<PageCopy>* copies);
  PageId take_page();  // free list first, else evict the LRU head; pool must not be empty
  void release_page(PageId page);
  void lru_push_back(PageId page);
  void lru_remove(PageId page);
  // The key of req's frontier (its first uncommitted pending page), or null.
  static const PageKey* frontier_key(const RequestPages& req);
  // Indexes req's frontier under `id` unless it has none, the key is published or another
  // request indexed it; unindex_frontier() removes it if `id` owns it.
  void index_frontier(const RequestPages& req, RequestId id);
  void unindex_frontier(const PageKey* key, RequestId id);

  KvCacheConfig config_;
  std::vector<PageMeta> pages_;
  std::vector<PageId> free_pages_;  // a stack
  PageId lru_head_ = -1;            // least recently used cached page
  PageId lru_tail_ = -1;
  int32_t num_cached_ = 0;
  std::unordered_map<PageKey, PageId> key_to_page_;
  std::unordered_map<PageKey, RequestId> frontier_owner_;  // frontier key -> its owner
  std::unordered_map<RequestId, RequestPages> requests_;
  std::vector<PageKey> scratch_keys_;
  KvCacheStats counters_;  // only the cumulative counters are kept current here
};

}  // namespace packserve::kv
