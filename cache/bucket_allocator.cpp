// SPDX-License-Identifier: Apache-2.0
#include "cache/bucket_allocator.h"
#include "util/clock.h"
#include "util/log.h"
#include "util/thread.h"

#include <algorithm>
#include <string>

namespace ubcache {

BucketAllocator::BucketAllocator(Options o)
    : o_(o), published_(new std::atomic<uint32_t>[o.nbuckets]), inflight_(new std::atomic<uint32_t>[o.nbuckets]), dirty_(new std::atomic<uint32_t>[o.nbuckets]), prio_hist_(new std::atomic<uint32_t>[kPrioBins]) {
  ClearPrio();
  used_.reset(new std::atomic<uint32_t>[o_.nbuckets]());
  MutexLock l(&mu_);
  buckets_.resize(o_.nbuckets);
  writers_.resize(std::max(1u, o_.writers));
  for (uint32_t b = 0; b < o_.nbuckets; b++) {
    if (b < o_.first_bucket) buckets_[b].kind = Kind::kReserved;
    CountKind(buckets_[b].kind, 1);
  }
  for (uint32_t b = 0; b < o_.nbuckets; b++) {
    PublishLocked(b);
    inflight_[b].store(0, std::memory_order_relaxed);
    dirty_[b].store(0, std::memory_order_relaxed);
  }
  // Hand out low buckets first.
  for (uint32_t b = o_.nbuckets; b-- > o_.first_bucket;) free_.push_back(b);
  // bcache keeps a free FIFO of a few hundred buckets; here about 1% of
  // the cache, within [1, 4096].
  uint32_t usable = o_.nbuckets > o_.first_bucket ? o_.nbuckets - o_.first_bucket : 0;
  // Small caches get a few more: a reclaimed bucket now waits for its gen
  // to be journaled before it is free.
  // The target is on top of the metadata reserve, which data never takes:
  // else a small cache's data had only target - reserve buckets (2 MiB of
  // 512 KiB buckets) before each allocation reclaimed inline.
  free_target_ = std::clamp<uint32_t>(usable / 128, std::min<uint32_t>(8, usable / 8), 4096);
  free_target_ = std::min<uint32_t>(free_target_ + o_.metadata_reserve, std::max<uint32_t>(usable / 2, 1));
  free_target_ = std::max<uint32_t>(free_target_, 1);
}

void BucketAllocator::PublishLocked(uint32_t b) {
  published_[b].store(Pack(buckets_[b]), std::memory_order_release);
}

void BucketAllocator::SetPrioLocked(uint32_t i, uint16_t prio) {
  Bucket& b = buckets_[i];
  if (b.kind == Kind::kData) CountPrio(b.prio, -1);
  b.prio = prio;
  if (b.kind == Kind::kData) CountPrio(b.prio, 1);
  PublishLocked(i);
}

bool BucketAllocator::ReclaimableLocked(uint32_t b) const {
  const Bucket& k = buckets_[b];
  return k.kind == Kind::kData && !k.open && inflight_[b].load(std::memory_order_acquire) == 0 &&
         dirty_[b].load(std::memory_order_acquire) == 0 &&
         static_cast<uint8_t>(k.gen - k.gc_gen) < kMaxGenLead;  // else GC must run first
}

uint64_t BucketAllocator::VictimKeyLocked(uint32_t b, ReplacementPolicy policy) const {
  const Bucket& k = buckets_[b];
  // GC found nothing live in it: dropping it costs no cached data.
  if (DeadLocked(b)) return 0;
  switch (policy) {
    case ReplacementPolicy::kLru:
      // Priority first; among equal ones (priorities decay only every 30 s,
      // so everything filled or hit since shares the top one) the bucket
      // least recently filled or hit goes first, not the lowest-numbered.
      return 1 + (uint64_t{k.prio} << 40) + used_[b].load(std::memory_order_relaxed);
    case ReplacementPolicy::kFifo:
      return 1 + k.filled_seq;
    case ReplacementPolicy::kRandom:
      break;
  }
  // A fixed pseudo-random order per salt: Refill's choice can be re-checked.
  uint64_t x = (uint64_t{b} + salt_) * 0x9E3779B97F4A7C15ull;
  return 1 + ((x ^ (x >> 29)) >> 1);
}

void BucketAllocator::NoteLeadLocked(const Bucket& k) {
  uint8_t lead = static_cast<uint8_t>(k.gen - k.gc_gen);
  max_lead_ = std::max(max_lead_, lead);
  if (gc_pass_) gc_pass_lead_ = std::max(gc_pass_lead_, lead);
}

void BucketAllocator::InvalidateLocked(uint32_t b) {
  Bucket& v = buckets_[b];
  if (b < dead_counted_ && DeadLocked(b)) dead_.fetch_sub(1, std::memory_order_relaxed);
  CountPrio(v.prio, -1);
  CountKind(Kind::kData, -1);
  CountKind(Kind::kFree, 1);
  v.kind = Kind::kFree;
  v.gen++;  // every pointer into the bucket is stale from now on
  NoteLeadLocked(v);
  PublishLocked(b);
  // Reused only once the new gen is durable (see the header).
  if (persist_gens_)
    pending_.push_back(b);
  else
    free_.push_back(b);
}

bool BucketAllocator::PersistPendingLocked() {
  if (pending_.empty() || persisting_) return false;
  std::vector<uint32_t> batch;
  batch.swap(pending_);
  std::vector<std::pair<uint32_t, uint8_t>> gens;
  gens.reserve(batch.size());
  for (uint32_t b : batch) gens.emplace_back(b, buckets_[b].gen);
  AssertMayBlock("persisting bucket generations");
  GenPersister fn = persist_gens_;
  persisting_ = true;
  mu_.Unlock();  // the journal write must not hold up Valid()/Touch()/Allocate()
  Status st = fn(gens);
  mu_.Lock();
  persisting_ = false;
  if (!st.ok()) {
    // Not durable: they stay pending, and are offered again next time.
    pending_.insert(pending_.end(), batch.begin(), batch.end());
    WakeSpaceWaitersLocked();
    return false;
  }
  // A bucket's gen cannot move while pending (it is free and unreachable),
  // so the durable gen is its gen now.
  free_.insert(free_.end(), batch.begin(), batch.end());
  WakeSpaceWaitersLocked();
  return true;
}

bool BucketAllocator::ParkForSpace(Callback<void(bool space)>&& fn) {
  {
    MutexLock l(&mu_);
    if (free_.size() > o_.metadata_reserve) return false;
    space_waiters_.push_back({Reactor::Current(), std::move(fn)});
  }
  WantRefill();
  return true;
}

void BucketAllocator::WakeSpaceWaitersLocked() {
  if (space_waiters_.empty() || persisting_) return;
  bool space = free_.size() > o_.metadata_reserve;
  if (!space) {
    // Parked writes go on without space (through, or park again): said at
    // most every 10 s, so a cache that stays out of space shows in the log.
    uint64_t now = NowNanos();
    if (now - no_space_logged_ns_ >= 10'000'000'000) {
      no_space_logged_ns_ = now;
      UB_INFO("cache: {} parked allocations woken without space: {} free (reserve {}), {} pending, {} dirty buckets",
              space_waiters_.size(), free_.size(), o_.metadata_reserve, pending_.size(), dirty_buckets());
    }
  }
  for (SpaceWaiter& w : space_waiters_)
    w.reactor->Post([fn = std::move(w.fn), space]() mutable { fn(space); });
  space_waiters_.clear();
}

void BucketAllocator::WaitForPersistLocked() {
  AssertMayBlock("waiting for a generation persist");
  while (persisting_) {
    mu_.Unlock();
    std::this_thread::sleep_for(std::chrono::microseconds(100));
    mu_.Lock();
  }
}

void BucketAllocator::SetGenPersister(GenPersister fn) {
  MutexLock l(&mu_);
  persist_gens_ = std::move(fn);
}

void BucketAllocator::AddDirty(uint32_t bucket, int64_t delta) {
  if (bucket >= o_.nbuckets) return;
  uint32_t before = dirty_[bucket].fetch_add(static_cast<uint32_t>(delta), std::memory_order_acq_rel);
  uint32_t after = before + static_cast<uint32_t>(delta);
  if (before == 0 && after != 0) dirty_buckets_.fetch_add(1, std::memory_order_relaxed);
  if (before != 0 && after == 0) dirty_buckets_.fetch_sub(1, std::memory_order_relaxed);
}

void BucketAllocator::ApplyGens(const std::vector<std::pair<uint32_t, uint8_t>>& gens) {
  MutexLock l(&mu_);
  for (auto [b, gen] : gens) {
    if (b < o_.first_bucket || b >= o_.nbuckets) continue;
    Bucket& k = buckets_[b];
    if (k.kind == Kind::kData) CountPrio(k.prio, -1);
    CountKind(k.kind, -1);
    k.kind = Kind::kData;
    k.gen = gen;
    k.prio = 0;
    k.filled_seq = 0;
    CountKind(k.kind, 1);
    CountPrio(k.prio, 1);
    NoteLeadLocked(k);
    PublishLocked(b);
  }
}

bool BucketAllocator::ReclaimWindowLocked(ReplacementPolicy policy) {
  // The refill thread fell behind. Choose among the next kScanChunk buckets
  // only, so the wait is bounded; move on to the next window when none of
  // them can go.
  const uint32_t n = o_.nbuckets;
  const bool random = policy == ReplacementPolicy::kRandom;
  if (random) cursor_ = static_cast<uint32_t>(rng_() % n);  // then the first that can go
  for (uint32_t scanned = 0; scanned < n;) {
    uint32_t window = std::min(kScanChunk, n - scanned);
    uint32_t victim = UINT32_MAX;
    uint64_t best = UINT64_MAX;
    for (uint32_t i = 0; i < window; i++) {
      uint32_t b = cursor_;
      cursor_ = cursor_ + 1 == n ? 0 : cursor_ + 1;
      if (!ReclaimableLocked(b)) continue;
      uint64_t key = VictimKeyLocked(b, policy);
      if (key < best) {
        best = key;
        victim = b;
        if (random) break;
      }
    }
    scanned += window;
    if (victim != UINT32_MAX) {
      InvalidateLocked(victim);
      reclaimed_fg_.fetch_add(1, std::memory_order_relaxed);
      return true;
    }
  }
  return false;
}

size_t BucketAllocator::Refill(ReplacementPolicy policy) {
  size_t want;
  {
    MutexLock l(&mu_);
    want = free_.size() + pending_.size() < free_target_ ? free_target_ - free_.size() - pending_.size() : 0;
    if (want == 0 && !pending_.empty()) {
      PersistPendingLocked();  // an earlier persist failed: try again
      return 0;
    }
    if (want == 0) {
      WakeSpaceWaitersLocked();  // nothing to journal: they look again
      return 0;
    }
    if (policy == ReplacementPolicy::kRandom) salt_ = rng_();
  }
  // The `want` best victims, kept in a max-heap on their key while the
  // buckets are visited a chunk at a time.
  using Candidate = std::pair<uint64_t, uint32_t>;
  std::vector<Candidate> best;
  best.reserve(want + 1);
  for (uint32_t first = 0; first < o_.nbuckets; first += kScanChunk) {
    uint32_t last = std::min<uint64_t>(o_.nbuckets, uint64_t{first} + kScanChunk);
    MutexLock l(&mu_);
    for (uint32_t b = first; b < last; b++) {
      if (!ReclaimableLocked(b)) continue;
      Candidate c{VictimKeyLocked(b, policy), b};
      if (best.size() < want) {
        best.push_back(c);
        std::push_heap(best.begin(), best.end());
      } else if (c < best.front()) {
        std::pop_heap(best.begin(), best.end());
        best.back() = c;
        std::push_heap(best.begin(), best.end());
      }
    }
  }
  std::sort(best.begin(), best.end());
  // Take them, re-checking each: a bucket hit since it was seen has a new
  // key and stays.
  size_t done = 0;
  for (size_t i = 0; i < best.size(); i += kScanChunk) {
    MutexLock l(&mu_);
    for (size_t j = i; j < std::min(best.size(), i + kScanChunk); j++) {
      if (free_.size() + pending_.size() >= free_target_) break;
      auto [key, b] = best[j];
      if (!ReclaimableLocked(b) || VictimKeyLocked(b, policy) != key) continue;
      InvalidateLocked(b);
      done++;
    }
    reclaimed_bg_.fetch_add(done, std::memory_order_relaxed);
    if (free_.size() >= free_target_) break;
  }
  {
    MutexLock l(&mu_);
    // Parked allocations are woken by the persist, or here if there was
    // nothing to persist.
    if (!PersistPendingLocked()) WakeSpaceWaitersLocked();
  }
  return done;
}

void BucketAllocator::WantRefill() {
  if (refill_wanted_.exchange(true, std::memory_order_acq_rel)) return;  // already asked
  {
    MutexLock l(&wake_mu_);  // not between the refill thread's check and its wait
  }
  wake_cv_.Signal();
}

void BucketAllocator::StartRefill(std::function<ReplacementPolicy()> policy) {
  if (refill_.joinable()) return;
  refill_ = std::thread([this, policy = std::move(policy)] {
    SetThreadName("ub-refill");
    RefillLoop(policy);
  });
}

void BucketAllocator::RefillLoop(std::function<ReplacementPolicy()> policy) {
  for (;;) {
    {
      MutexLock l(&wake_mu_);
      auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(1);
      while (!stop_ && !refill_wanted_.load(std::memory_order_acquire))
        if (!wake_cv_.WaitUntil(&wake_mu_, deadline)) break;
      if (stop_) return;
    }
    refill_wanted_.store(false, std::memory_order_release);
    Refill(policy());
  }
}

BucketAllocator::~BucketAllocator() { StopRefill(); }

void BucketAllocator::StopRefill() {
  {
    MutexLock l(&wake_mu_);
    stop_ = true;
  }
  wake_cv_.SignalAll();
  if (refill_.joinable()) refill_.join();
}

Result<uint32_t> BucketAllocator::TakeFreeLocked(bool metadata, ReplacementPolicy policy) {
  // Data may not dig into the metadata reserve.
  while (free_.size() <= (metadata ? 0 : o_.metadata_reserve)) {
    if (persist_gens_ && IsServingThread()) {
      // A serving reactor neither journals generations nor waits for that
      // (see the top): reclaim (CPU only), and the refill thread journals.
      if (pending_.empty() && !persisting_ && !ReclaimWindowLocked(policy))
        return Status::NoSpace("cache: no bucket can be reclaimed");
      WantRefill();
      return Status::WouldBlock("cache: reclaimed buckets wait for their generations to be journaled");
    }
    // Durable gens first: buckets already reclaimed, then one more window.
    if (PersistPendingLocked()) continue;
    if (persisting_) {
      // Another thread is journaling gens: wait for it. That is one journal
      // write, what the reclaim below would cost this thread anyway; failing
      // instead left data uncached whenever the refill thread was journaling
      // (a burst just after a start, on a loaded machine, cached nothing).
      WaitForPersistLocked();
      continue;
    }
    if (!ReclaimWindowLocked(policy)) return Status::NoSpace("cache: no bucket can be reclaimed");
    if (persist_gens_ && !PersistPendingLocked() && free_.size() <= (metadata ? 0 : o_.metadata_reserve))
      return Status::NoSpace("cache: a reclaimed bucket's generation could not be made durable");
  }
  uint32_t b = free_.back();
  free_.pop_back();
  CountKind(Kind::kFree, -1);
  if (free_.size() < free_target_ / 2 + o_.metadata_reserve + 1) WantRefill();
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
    CountKind(Kind::kData, 1);
    k.prio = kInitialPrio;
    CountPrio(k.prio, 1);
    k.filled_seq = ++fill_seq_;
    PublishLocked(b);
    wr.bucket = b;
    wr.fill = 0;
  }
  Space s{uint64_t{wr.bucket} * o_.bucket_size + wr.fill, buckets_[wr.bucket].gen, wr.bucket};
  wr.fill += len;
  inflight_[wr.bucket].fetch_add(1, std::memory_order_relaxed);
  used_[wr.bucket].store(UsedTick(), std::memory_order_relaxed);
  return s;
}

Result<BucketAllocator::Space> BucketAllocator::AllocateMetadata() {
  MutexLock l(&mu_);
  UB_ASSIGN_OR_RETURN(uint32_t b, TakeFreeLocked(true, ReplacementPolicy::kLru));
  Bucket& k = buckets_[b];
  k.kind = Kind::kMetadata;
  CountKind(Kind::kMetadata, 1);
  PublishLocked(b);
  return Space{uint64_t{b} * o_.bucket_size, k.gen, b};
}

void BucketAllocator::FreeMetadata(uint32_t bucket) {
  MutexLock l(&mu_);
  Bucket& k = buckets_[bucket];
  if (k.kind != Kind::kMetadata) return;
  if (!persist_gens_) {
    k.kind = Kind::kFree;
    // Like Reclaim, never run the generation kMaxGenLead past the last GC, or
    // metadata churn would wrap it back onto stale data pointers. Valid()
    // vouches only for data, so an unbumped freed metadata bucket is safe.
    if (static_cast<uint8_t>(k.gen - k.gc_gen) < kMaxGenLead) k.gen++;
    NoteLeadLocked(k);
    PublishLocked(bucket);
    CountKind(Kind::kMetadata, -1);
    CountKind(Kind::kFree, 1);
    free_.push_back(bucket);
    return;
  }
  // An empty data bucket: no data pointer carries its gen (it was free when
  // it became metadata), and reclaim bumps the gen durably before reuse.
  k.kind = Kind::kData;
  k.prio = 0;
  k.filled_seq = 0;
  CountKind(Kind::kMetadata, -1);
  CountKind(Kind::kData, 1);
  CountPrio(k.prio, 1);
  PublishLocked(bucket);
}

void BucketAllocator::Touch(uint32_t bucket) {
  if (bucket >= o_.nbuckets) return;
  uint32_t now = UsedTick();
  if (used_[bucket].load(std::memory_order_relaxed) != now) used_[bucket].store(now, std::memory_order_relaxed);
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
  for (uint32_t first = 0; first < o_.nbuckets; first += kScanChunk) {
    uint32_t last = std::min<uint64_t>(o_.nbuckets, uint64_t{first} + kScanChunk);
    MutexLock l(&mu_);
    for (uint32_t i = first; i < last; i++) {
      const Bucket& b = buckets_[i];
      if (b.kind == Kind::kData && b.prio > 0) SetPrioLocked(i, static_cast<uint16_t>(b.prio - 1));
    }
  }
}

void BucketAllocator::MarkGcDone(const std::vector<uint8_t>& at_start) {
  {
    MutexLock l(&mu_);
    gc_pass_ = true;
    gc_pass_lead_ = 0;
  }
  // Chunks already done record later bumps in gc_pass_lead_; chunks not yet
  // done are measured when they are reached.
  uint8_t lead = 0;
  for (uint32_t first = 0; first < o_.nbuckets; first += kScanChunk) {
    uint32_t last = std::min<uint64_t>(o_.nbuckets, uint64_t{first} + kScanChunk);
    MutexLock l(&mu_);
    for (uint32_t i = first; i < last; i++) {
      Bucket& b = buckets_[i];
      if (i < at_start.size()) b.gc_gen = at_start[i];
      lead = std::max(lead, static_cast<uint8_t>(b.gen - b.gc_gen));
    }
  }
  MutexLock l(&mu_);
  max_lead_ = std::max(lead, gc_pass_lead_);
  gc_pass_ = false;
}

void BucketAllocator::MarkGcDone() { MarkGcDone(GenSnapshot()); }

std::vector<uint8_t> BucketAllocator::GenSnapshot() const {
  std::vector<uint8_t> gens(o_.nbuckets);
  for (uint32_t first = 0; first < o_.nbuckets; first += kScanChunk) {
    uint32_t last = std::min<uint64_t>(o_.nbuckets, uint64_t{first} + kScanChunk);
    MutexLock l(&mu_);
    for (uint32_t i = first; i < last; i++) gens[i] = buckets_[i].gen;
  }
  return gens;
}

uint8_t BucketAllocator::MaxGenLead() const {
  MutexLock l(&mu_);
  return max_lead_;
}

void BucketAllocator::SetLiveBytes(std::vector<uint32_t> live, uint64_t seq_at_start) {
  {
    MutexLock l(&mu_);
    live_.swap(live);
    live_seq_ = seq_at_start;
    dead_.store(0, std::memory_order_relaxed);
    dead_counted_ = 0;
  }
  // dead_ counts chunk by chunk; a bucket reclaimed meanwhile is subtracted
  // only if its chunk was counted (InvalidateLocked).
  for (uint32_t first = 0; first < o_.nbuckets; first += kScanChunk) {
    uint32_t last = std::min<uint64_t>(o_.nbuckets, uint64_t{first} + kScanChunk);
    MutexLock l(&mu_);
    uint64_t dead = 0;
    for (uint32_t b = first; b < last && b < live_.size(); b++) {
      // A bucket still open when GC walked the index may hold data written
      // after the walk: its count is not final, so it is not empty.
      if (buckets_[b].open && live_[b] == 0) live_[b] = 1;
      if (DeadLocked(b)) dead++;
    }
    dead_.fetch_add(dead, std::memory_order_relaxed);
    dead_counted_ = last;
  }
}  // the old vector is freed here, after mu_ is released

std::vector<uint32_t> BucketAllocator::PinFragmented(const std::vector<uint32_t>& live, uint32_t below,
                                                     size_t max) {
  std::vector<std::pair<uint32_t, uint32_t>> found;  // (live, bucket)
  for (uint32_t first = 0; first < o_.nbuckets; first += kScanChunk) {
    uint32_t last = std::min<uint64_t>(o_.nbuckets, uint64_t{first} + kScanChunk);
    MutexLock l(&mu_);
    for (uint32_t b = first; b < last && b < live.size(); b++) {
      const Bucket& k = buckets_[b];
      if (k.kind == Kind::kData && !k.open && live[b] > 0 && live[b] < below) found.emplace_back(live[b], b);
    }
  }
  std::sort(found.begin(), found.end());
  std::vector<uint32_t> out;
  MutexLock l(&mu_);
  for (auto [n, b] : found) {
    if (out.size() >= max) break;
    if (buckets_[b].kind != Kind::kData || buckets_[b].open) continue;
    inflight_[b].fetch_add(1, std::memory_order_acq_rel);
    out.push_back(b);
  }
  return out;
}

uint64_t BucketAllocator::fill_seq() const {
  MutexLock l(&mu_);
  return fill_seq_;
}

std::vector<BucketAllocator::BucketState> BucketAllocator::ExportState() const {
  MutexLock l(&mu_);
  std::vector<BucketState> out(buckets_.size());
  for (size_t i = 0; i < buckets_.size(); i++) {
    const Bucket& b = buckets_[i];
    out[i] = BucketState{b.gen, b.gc_gen, b.kind, b.prio};
    // See the header: free is saved as an empty data bucket.
    if (persist_gens_ && b.kind == Kind::kFree) out[i] = BucketState{b.gen, b.gc_gen, Kind::kData, 0};
  }
  return out;
}

Status BucketAllocator::RestoreState(const std::vector<BucketState>& state) {
  MutexLock l(&mu_);
  if (state.size() != buckets_.size())
    return Status::InvalidArgument("bucket table: " + std::to_string(state.size()) +
                                   " buckets, the cache has " + std::to_string(buckets_.size()));
  for (uint32_t b = 0; b < o_.nbuckets; b++) {
    bool reserved = state[b].kind == Kind::kReserved;
    if (reserved != (b < o_.first_bucket))
      return Status::InvalidArgument("bucket table: bucket " + std::to_string(b) +
                                     (reserved ? " reserved past" : " not reserved below") +
                                     " the first data bucket");
    if (static_cast<uint8_t>(state[b].kind) > static_cast<uint8_t>(Kind::kReserved))
      return Status::InvalidArgument("bucket table: bad kind for bucket " + std::to_string(b));
  }
  for (auto& c : counts_) c.store(0, std::memory_order_relaxed);
  ClearPrio();
  free_.clear();
  pending_.clear();
  max_lead_ = 0;
  live_.clear();  // GC's counts are not saved: the next GC pass redoes them
  dead_.store(0, std::memory_order_relaxed);
  dead_counted_ = 0;
  gc_pass_ = false;
  for (Writer& w : writers_) w = Writer{};
  for (uint32_t b = 0; b < o_.nbuckets; b++) {
    Bucket& k = buckets_[b];
    k = Bucket{};
    k.gen = state[b].gen;
    k.gc_gen = state[b].gc_gen;
    k.kind = state[b].kind;
    if (k.kind == Kind::kData) {
      k.prio = state[b].prio;
      CountPrio(k.prio, 1);
    }
    CountKind(k.kind, 1);
    max_lead_ = std::max(max_lead_, static_cast<uint8_t>(k.gen - k.gc_gen));
    PublishLocked(b);
  }
  for (uint32_t b = o_.nbuckets; b-- > o_.first_bucket;) {
    if (buckets_[b].kind == Kind::kFree) free_.push_back(b);
  }
  return Status::OK();
}

BucketAllocator::Usage BucketAllocator::usage() const {
  auto count = [&](Kind k) { return counts_[static_cast<int>(k)].load(std::memory_order_relaxed); };
  return Usage{o_.nbuckets,
               count(Kind::kFree),
               count(Kind::kData),
               count(Kind::kMetadata),
               count(Kind::kReserved),
               reclaimed_bg_.load(std::memory_order_relaxed),
               reclaimed_fg_.load(std::memory_order_relaxed),
               dead_.load(std::memory_order_relaxed)};
}

std::vector<uint64_t> BucketAllocator::prio_histogram() const {
  std::vector<uint64_t> h(kPrioBins);
  for (unsigned p = 0; p < kPrioBins; p++) h[p] = prio_hist_[p].load(std::memory_order_relaxed);
  return h;
}

BucketAllocator::PriorityStats BucketAllocator::priority_stats() const {
  Usage u = usage();
  PriorityStats ps{};
  uint64_t all = std::max<uint64_t>(u.buckets, 1);
  ps.unused_percent = static_cast<unsigned>(u.free * 100 / all);
  ps.clean_percent = static_cast<unsigned>((u.data - std::min(u.data, dirty_buckets())) * 100 / all);
  ps.dirty_percent = static_cast<unsigned>(dirty_buckets() * 100 / all);
  // The superblock and journal area counts as metadata, as bcache marks it.
  ps.metadata_percent = static_cast<unsigned>((u.metadata + u.reserved) * 100 / all);
  // Straight from the atomics, no copy, and only the fine bins of nonzero
  // groups: this runs 100 times a second under a metrics scraper. Counts
  // that move between the passes only shift a quantile by a bucket.
  auto h = [this](unsigned p) -> uint64_t { return prio_hist_[p].load(std::memory_order_relaxed); };
  auto group = [this](unsigned g) -> uint64_t { return prio_group_[g].load(std::memory_order_relaxed); };
  constexpr unsigned kGroups = kPrioBins / kPrioGroup + 1;
  uint64_t n = 0, age_sum = 0;
  for (unsigned g = 0; g < kGroups; g++) {
    if (group(g) == 0) continue;
    for (unsigned p = g * kPrioGroup; p < std::min(kPrioBins, (g + 1) * kPrioGroup); p++) {
      uint64_t c = h(p);
      n += c;
      age_sum += c * (kInitialPrio - p);
    }
  }
  if (n == 0) return ps;
  ps.average = age_sum / n;
  ps.bytes_per_quantile = n * o_.bucket_size / (kQuantiles + 1);
  // Youngest first: walk priorities from the top, as bcache walks its
  // priorities sorted in descending order; quantile i is rank n*(i+1)/32.
  unsigned q = 0;
  uint64_t seen = 0;
  for (unsigned g = kGroups; g-- > 0 && q < kQuantiles;) {
    if (group(g) == 0) continue;
    for (unsigned p = std::min(kPrioBins, (g + 1) * kPrioGroup); p-- > g * kPrioGroup && q < kQuantiles;) {
      seen += h(p);
      while (q < kQuantiles && n * (q + 1) / (kQuantiles + 1) < seen)
        ps.quantiles[q++] = static_cast<uint16_t>(kInitialPrio - p);
    }
  }
  return ps;
}

}  // namespace ubcache
