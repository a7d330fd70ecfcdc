#include "cache/cache_set.h"

#include "btree/mem_node_store.h"
#include "util/log.h"
#include "util/size.h"

namespace ubcache {

Result<std::unique_ptr<CacheSet>> CacheSet::Create(BlockDevice* cache_dev, Options o) {
  if (o.bucket_size < 64 * 1024 || (o.bucket_size & (o.bucket_size - 1)))
    return Status::InvalidArgument("bucket size must be a power of two >= 64 KiB");
  uint64_t nbuckets = cache_dev->size() / o.bucket_size;
  uint64_t first = (o.reserved_bytes + o.bucket_size - 1) / o.bucket_size;
  BucketAllocator::Options bo;
  bo.bucket_size = o.bucket_size;
  bo.nbuckets = static_cast<uint32_t>(nbuckets);
  bo.first_bucket = static_cast<uint32_t>(first);
  bo.metadata_reserve = 2;
  bo.writers = Reactor::kMaxReactors;
  if (nbuckets < first + bo.metadata_reserve + 4)
    return Status::InvalidArgument(cache_dev->spec() + ": too small for a cache (" +
                                   FormatSize(cache_dev->size()) + " with " +
                                   FormatSize(o.bucket_size) + " buckets)");
  std::unique_ptr<CacheSet> set(new CacheSet(cache_dev, o));
  set->buckets_ = std::make_unique<BucketAllocator>(bo);
  set->knobs_.btree_cache_size = o.btree_cache_size;
  set->store_ = std::make_unique<MemNodeStore>();
  ExtentIndex::Options io;
  io.cache_bytes = o.btree_cache_size;
  UB_ASSIGN_OR_RETURN(set->index_, ExtentIndex::Create(set->store_.get(), io));
  set->buckets_->StartRefill(
      [s = set.get()] { return s->knobs_.replacement.load(std::memory_order_relaxed); });
  set->hk_ = std::thread([s = set.get()] { s->Housekeeping(); });
  UB_INFO("cache set on {}: {} buckets of {}", cache_dev->Describe(), nbuckets - first,
          FormatSize(o.bucket_size));
  return set;
}

CacheSet::~CacheSet() {
  {
    std::lock_guard<std::mutex> l(hk_mu_);
    hk_stop_ = true;
  }
  hk_cv_.notify_all();
  if (hk_.joinable()) hk_.join();
  buckets_->StopRefill();  // it reads knobs_, which goes before buckets_
}

Result<uint64_t> CacheSet::RunGc() {
  std::lock_guard<std::mutex> one_at_a_time(gc_mu_);
  BucketAllocator& buckets = *buckets_;
  std::vector<uint8_t> gens = buckets.GenSnapshot();
  uint64_t seq_at_start = buckets.fill_seq();
  // bcache's btree GC in one pass: count every bucket's live bytes and drop
  // the pointers whose bucket has been reused. The index holds no lock
  // while the callback runs, so dropping happens as the walk goes.
  std::vector<uint32_t> live(buckets.options().nbuckets, 0);
  uint64_t dropped = 0;
  Status drop_status;
  Status st = index_->ForEach([&](const Extent& e) {
    if (buckets.Valid(e.cache_offset, e.gen)) {
      live[buckets.BucketOf(e.cache_offset)] += static_cast<uint32_t>(e.len);
      return;
    }
    // Invalidating the range may also drop a fresh extent inserted there
    // since the walk saw the stale one: that is a future miss, never stale
    // data (the backing device has everything; writeback must revisit this).
    Status s = index_->Invalidate(e.dev, e.start, e.len);
    if (!s.ok() && drop_status.ok()) drop_status = s;
    dropped++;
  });
  if (!st.ok()) return st;
  if (!drop_status.ok()) return drop_status;
  buckets.MarkGcDone(gens);
  buckets.SetLiveBytes(std::move(live), seq_at_start);
  gc_runs_.fetch_add(1, std::memory_order_relaxed);
  UB_DEBUG("cache gc: dropped {} stale extents", dropped);
  return dropped;
}

void CacheSet::Housekeeping() {
  uint64_t ticks = 0;
  std::unique_lock<std::mutex> l(hk_mu_);
  while (!hk_stop_) {
    hk_cv_.wait_for(l, std::chrono::seconds(1));
    if (hk_stop_) break;
    l.unlock();
    // Journal: one append per second batches every index change; a
    // checkpoint folds it into nodes when it grows.
    Status st = index_->Commit();
    if (st.ok() && index_->stats().journal_bytes > (64u << 20)) st = index_->Checkpoint().status();
    if (!st.ok()) UB_WARN("cache index housekeeping: {}", st.ToString());
    if (buckets_->MaxGenLead() >= BucketAllocator::kMaxGenLead / 2) {
      auto dropped = RunGc();
      if (!dropped.ok()) UB_WARN("cache gc: {}", dropped.status().ToString());
    }
    // bcache ages priorities so that LRU means "least recently used".
    if (++ticks % 30 == 0) buckets_->DecayPriorities();
    l.lock();
  }
}

}  // namespace ubcache
