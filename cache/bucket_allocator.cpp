#include "cache/bucket_allocator.h"

#include <algorithm>

namespace ubcache {

BucketAllocator::BucketAllocator(Options o)
    : o_(o), published_(new std::atomic<uint32_t>[o.nbuckets]) {
  MutexLock l(&mu_);
  buckets_.resize(o_.nbuckets);
  writers_.resize(std::max(1u, o_.writers));
  for (uint32_t b = 0; b < o_.nbuckets; b++) {
    if (b < o_.first_bucket) {
      buckets_[b].kind = Kind::kReserved;
      counts_[static_cast<int>(Kind::kReserved)]++;
    } else {
      counts_[static_cast<int>(Kind::kFree)]++;
    }
  }
  for (uint32_t b = 0; b < o_.nbuckets; b++) PublishLocked(b);
  // Hand out low buckets first.
  for (uint32_t b = o_.nbuckets; b-- > o_.first_bucket;) free_.push_back(b);
}

void BucketAllocator::PublishLocked(uint32_t b) {
  published_[b].store(Pack(buckets_[b]), std::memory_order_release);
}

void BucketAllocator::SetPrioLocked(uint32_t i, uint16_t prio) {
  Bucket& b = buckets_[i];
  if (b.kind == Kind::kData) prio_hist_[b.prio / 1024]--;
  b.prio = prio;
  if (b.kind == Kind::kData) prio_hist_[b.prio / 1024]++;
  PublishLocked(i);
}

bool BucketAllocator::ReclaimLocked(ReplacementPolicy policy) {
  // Choose a data bucket to invalidate. A scan, but only when the free list
  // is empty, and amortised over a whole bucket of allocations.
  uint32_t victim = UINT32_MAX;
  uint64_t best = UINT64_MAX;
  uint32_t n = o_.nbuckets;
  uint32_t start = policy == ReplacementPolicy::kRandom ? static_cast<uint32_t>(rng_() % n) : 0;
  for (uint32_t i = 0; i < n; i++) {
    uint32_t b = (start + i) % n;
    const Bucket& k = buckets_[b];
    if (k.kind != Kind::kData || k.open) continue;
    if (static_cast<uint8_t>(k.gen - k.gc_gen) >= kMaxGenLead) continue;  // needs GC first
    uint64_t key = policy == ReplacementPolicy::kLru    ? k.prio
                   : policy == ReplacementPolicy::kFifo ? k.filled_seq
                                                        : 0;
    if (key < best) {
      best = key;
      victim = b;
      if (policy == ReplacementPolicy::kRandom) break;
    }
  }
  if (victim == UINT32_MAX) return false;
  Bucket& v = buckets_[victim];
  prio_hist_[v.prio / 1024]--;
  counts_[static_cast<int>(Kind::kData)]--;
  counts_[static_cast<int>(Kind::kFree)]++;
  v.kind = Kind::kFree;
  v.gen++;  // every pointer into the bucket is stale from now on
  max_lead_ = std::max(max_lead_, static_cast<uint8_t>(v.gen - v.gc_gen));
  PublishLocked(victim);
  free_.push_back(victim);
  return true;
}

Result<uint32_t> BucketAllocator::TakeFreeLocked(bool metadata, ReplacementPolicy policy) {
  // Data may not dig into the metadata reserve.
  while (free_.size() <= (metadata ? 0 : o_.metadata_reserve)) {
    if (!ReclaimLocked(policy)) return Status::NoSpace("cache: no bucket can be reclaimed");
  }
  uint32_t b = free_.back();
  free_.pop_back();
  counts_[static_cast<int>(Kind::kFree)]--;
  return b;
}

Result<BucketAllocator::Space> BucketAllocator::Allocate(unsigned w, uint64_t len,
                                                         ReplacementPolicy policy) {
  if (len == 0 || len > o_.bucket_size) return Status::InvalidArgument("cache: bad allocation size");
  MutexLock l(&mu_);
  Writer& wr = writers_[w % writers_.size()];
  if (wr.bucket == UINT32_MAX || wr.fill + len > o_.bucket_size) {
    UB_ASSIGN_OR_RETURN(uint32_t b, TakeFreeLocked(false, policy));
    if (wr.bucket != UINT32_MAX) buckets_[wr.bucket].open = false;  // full: reclaimable now
    Bucket& k = buckets_[b];
    k.kind = Kind::kData;
    k.open = true;
    counts_[static_cast<int>(Kind::kData)]++;
    k.prio = kInitialPrio;
    prio_hist_[k.prio / 1024]++;
    k.filled_seq = ++fill_seq_;
    PublishLocked(b);
    wr.bucket = b;
    wr.fill = 0;
  }
  Space s{uint64_t{wr.bucket} * o_.bucket_size + wr.fill, buckets_[wr.bucket].gen, wr.bucket};
  wr.fill += len;
  return s;
}

Result<BucketAllocator::Space> BucketAllocator::AllocateMetadata() {
  MutexLock l(&mu_);
  UB_ASSIGN_OR_RETURN(uint32_t b, TakeFreeLocked(true, ReplacementPolicy::kLru));
  Bucket& k = buckets_[b];
  k.kind = Kind::kMetadata;
  counts_[static_cast<int>(Kind::kMetadata)]++;
  PublishLocked(b);
  return Space{uint64_t{b} * o_.bucket_size, k.gen, b};
}

void BucketAllocator::FreeMetadata(uint32_t bucket) {
  MutexLock l(&mu_);
  Bucket& k = buckets_[bucket];
  if (k.kind != Kind::kMetadata) return;
  k.kind = Kind::kFree;
  // Like Reclaim, never run the generation kMaxGenLead past the last GC, or
  // metadata churn would wrap it back onto stale data pointers. Valid()
  // vouches only for data, so an unbumped freed metadata bucket is safe.
  if (static_cast<uint8_t>(k.gen - k.gc_gen) < kMaxGenLead) k.gen++;
  max_lead_ = std::max(max_lead_, static_cast<uint8_t>(k.gen - k.gc_gen));
  PublishLocked(bucket);
  counts_[static_cast<int>(Kind::kMetadata)]--;
  counts_[static_cast<int>(Kind::kFree)]++;
  free_.push_back(bucket);
}

void BucketAllocator::Touch(uint32_t bucket) {
  if (bucket >= o_.nbuckets) return;
  // Most hits find the priority still at its top: no lock for them.
  if ((published_[bucket].load(std::memory_order_acquire) >> 16) == kInitialPrio) return;
  MutexLock l(&mu_);
  if (buckets_[bucket].kind == Kind::kData) SetPrioLocked(bucket, kInitialPrio);
}

bool BucketAllocator::Valid(uint64_t cache_offset, uint8_t gen) const {
  uint32_t b = BucketOf(cache_offset);
  if (b >= o_.nbuckets) return false;
  uint32_t w = published_[b].load(std::memory_order_acquire);
  return static_cast<uint8_t>(w) == gen && static_cast<Kind>((w >> 8) & 0xff) == Kind::kData;
}

void BucketAllocator::DecayPriorities() {
  MutexLock l(&mu_);
  for (uint32_t i = 0; i < buckets_.size(); i++) {
    const Bucket& b = buckets_[i];
    if (b.kind == Kind::kData && b.prio > 0) SetPrioLocked(i, static_cast<uint16_t>(b.prio - 1));
  }
}

void BucketAllocator::MarkGcDone(const std::vector<uint8_t>& at_start) {
  MutexLock l(&mu_);
  max_lead_ = 0;
  for (size_t i = 0; i < buckets_.size(); i++) {
    if (i < at_start.size()) buckets_[i].gc_gen = at_start[i];
    max_lead_ = std::max(max_lead_, static_cast<uint8_t>(buckets_[i].gen - buckets_[i].gc_gen));
  }
}

std::vector<uint8_t> BucketAllocator::GenSnapshot() const {
  MutexLock l(&mu_);
  std::vector<uint8_t> gens(buckets_.size());
  for (size_t i = 0; i < buckets_.size(); i++) gens[i] = buckets_[i].gen;
  return gens;
}

uint8_t BucketAllocator::MaxGenLead() const {
  MutexLock l(&mu_);
  return max_lead_;
}

void BucketAllocator::MarkGcDone() {
  MutexLock l(&mu_);
  max_lead_ = 0;
  for (Bucket& b : buckets_) b.gc_gen = b.gen;
}

BucketAllocator::Usage BucketAllocator::usage() const {
  MutexLock l(&mu_);
  Usage u{};
  u.buckets = o_.nbuckets;
  u.free = counts_[static_cast<int>(Kind::kFree)];
  u.data = counts_[static_cast<int>(Kind::kData)];
  u.metadata = counts_[static_cast<int>(Kind::kMetadata)];
  u.reserved = counts_[static_cast<int>(Kind::kReserved)];
  std::copy(std::begin(prio_hist_), std::end(prio_hist_), u.prio_histogram);
  return u;
}

}  // namespace ubcache
