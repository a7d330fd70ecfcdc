// SPDX-License-Identifier: Apache-2.0
#include "cache/writeback.h"
#include "cache/writeback_pass.h"

#include <algorithm>
#include <chrono>
#include <cmath>

#include "backend/sync_io.h"
#include "btree/write_epoch.h"
#include "cache/backing_durability.h"
#include "cache/backing_super.h"
#include "cache/cache_set.h"
#include "cache/device_activity.h"
#include "cache/dirty_handshake.h"
#include "cache/epoch_clock.h"
#include "cache/ordered_gate.h"
#include "cache/range_guard.h"
#include "cache/service_time.h"
#include "util/clock.h"
#include "util/log.h"
#include "util/size.h"
#include "util/thread.h"

namespace ubcache {

namespace {
constexpr uint64_t kNs = 1'000'000'000;
constexpr uint64_t kMaxRate = uint64_t{1} << 40;  // "no limit", bytes/s
constexpr uint64_t kMaxBackoffNs = 30 * kNs;
// The rate's pause after a write is at most this (bcache's bch_next_delay
// bound): a 1 MiB write at writeback_rate_minimum (4 KiB/s) would otherwise
// put the next one 256 s away, and a rate that rose meanwhile would not be
// heard until then.
constexpr uint64_t kMaxRateDelayNs = 5 * kNs / 2;
// bcache's fragmentation thresholds (percent of the cache in use) and terms.
constexpr unsigned kFragLow = 50, kFragMid = 57, kFragHigh = 64;
constexpr int64_t kFpTermLow = 1, kFpTermMid = 10, kFpTermHigh = 1000;
}  // namespace

namespace {
// Appends p to the last write if it continues it within kMaxRun, else
// starts a new write.
void AppendPiece(std::vector<std::unique_ptr<Writeback::Write>>& writes, Writeback::Piece* p) {
  Writeback::Write* w = writes.empty() ? nullptr : writes.back().get();
  if (!w || w->start + w->len != p->e.start || w->len + p->e.len > Writeback::kMaxRun) {
    writes.push_back(std::make_unique<Writeback::Write>());
    w = writes.back().get();
    w->start = p->e.start;
    w->len = 0;
  }
  w->len += p->e.len;
  w->parts.push_back(p);
  p->w = w;
}
}  // namespace

Writeback::Writeback(Parts parts) : d_(std::move(parts)) {
  seen_lba_switches_ = d_.super ? d_.super->lba_switches() : 0;
  // Dirty since a start that promised no time (lba order then, or a
  // superblock from before consistent_as_of): the epochs already in the
  // index may be on the device out of order (rule 16).
  if (d_.super) {
    BackingSuperblock sb = d_.super->Get();
    if (sb.state == BackingState::kDirty && sb.consistent_as_of == 0) unordered_through_ = d_.epoch->current();
  }
}

void Writeback::Start() {
  thread_ = std::thread([this] {
    SetThreadName("ub-writeback");
    auto r = Reactor::Create(256);
    if (!r.ok()) {
      UB_ERROR("{}: writeback thread: {}", d_.spec, r.status().ToString());
      return;
    }
    reactor_ = std::move(r).value();
    reactor_->Bind();
    Loop();
    reactor_.reset();
  });
}

Writeback::~Writeback() {
  {
    std::lock_guard<std::mutex> l(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void Writeback::Kick() {
  {
    std::lock_guard<std::mutex> l(mu_);
    kicked_ = true;
  }
  cv_.notify_all();
}

bool Writeback::Sleep(uint64_t ns) {
  std::unique_lock<std::mutex> l(mu_);
  cv_.wait_for(l, std::chrono::nanoseconds(ns), [this] { return stop_ || kicked_; });
  kicked_ = false;
  return !stop_;
}

void Writeback::StateTransitions() {
  const Parts& d = d_;
  if (!d.super) return;
  // Fenced: the backing device is someone else's now. Its superblock is
  // never touched again; the fence goes to the cache superblock, so that
  // no later start writes this device's dirty data back unasked.
  if (d.host->fenced()) {
    if (fence_recorded_) return;
    Status st = d.set->RecordFence(d.super->Get().uuid);
    if (st.ok()) {
      fence_recorded_ = true;
      UB_ERROR("{}: fence recorded on the cache device: no start writes its {} of dirty data back without "
               "--after-fence", d.spec, FormatSize(d.set->index().DirtyBytes(d.dev)));
    } else {
      UB_ERROR("{}: cannot record the fence on the cache device ({}); retrying", d.spec, st.ToString());
    }
    return;
  }
  // A failed cache with nothing dirty for this device: detach it, as bcache
  // does — the backing superblock then says it can be used alone.
  if (d.set->failed() && d.host->attached() && d.set->index().DirtyBytes(d.dev) == 0 &&
      d.super->state() != BackingState::kDirty) {
    Status st = d.host->Detach();
    if (st.ok()) st = d.super->Detach();
    if (st.ok())
      UB_ERROR("{}: detached from the failed cache device; served from the backing device alone", d.spec);
    else
      UB_WARN("{}: detaching from the failed cache: {}", d.spec, st.ToString());
    return;
  }
  // Dirty first: a writeback-mode write is waiting for it.
  if (d.handshake->TakeDirtyRequest()) {
    Status st = d.super->MarkDirty();
    if (!st.ok()) {
      UB_ERROR("{}: cannot mark the backing superblock dirty ({}); writes go writethrough",
               d.spec, st.ToString());
    }
    d.handshake->SetDirtyOk(st.ok());
  }
  // Clean once nothing is dirty (cache/dirty_handshake.h: the other half
  // is each writeback-mode write's Enter/Leave).
  if (d.super->state() == BackingState::kDirty && !d.handshake->dirty_requested()) {
    d.handshake->CloseForClean();
    if (!d.handshake->WritesInFlight() &&
        d.set->index().DirtyBytes(d.dev) == 0) {
      // Written-back data is on the backing media before it says clean.
      Status st = d.durability->SyncFlush();
      if (st.ok()) st = d.super->MarkClean();
      if (!st.ok()) UB_WARN("{}: cannot mark the backing superblock clean: {}", d.spec, st.ToString());
      else UB_INFO("{}: no dirty data left: backing superblock clean", d.spec);
    }
    d.handshake->SetDirtyOk(d.super->state() == BackingState::kDirty);
  }
}

void Writeback::UpdateRate(uint64_t now) {
  const Parts& d = d_;
  CacheKnobs& k = d.set->knobs();
  BucketAllocator& b = d.set->buckets();
  BucketAllocator::Usage u = b.usage();
  uint64_t bucket = d.set->options().bucket_size;
  uint64_t cache_bytes = (u.buckets - u.reserved) * bucket;
  double target = static_cast<double>(cache_bytes) * k.writeback_percent.load() / 100.0;
  double dirty = static_cast<double>(d.set->index().DirtyBytes(d.dev));
  // writeback_order flush: the lag target caps the dirty target at what
  // came in over writeback_lag_target seconds — dirty x target / lag, the
  // dirty data per second of lag measured now — so the controller steers
  // the oldest epoch's age towards the target, as it steers dirty data
  // towards writeback_percent (past twice the target: full speed,
  // MeasureLag).
  const double lag_target = k.writeback_lag_target.load();
  const double lag_s = static_cast<double>(lag_ms_.load()) / 1000;
  if (d.ordered->ordered() && lag_target > 0 && lag_s > lag_target)
    target = std::min(target, dirty * lag_target / lag_s);
  double error = dirty - target;
  double p = error / std::max<uint32_t>(1, k.writeback_rate_p_term_inverse.load());
  double seconds = std::max<uint32_t>(1, k.writeback_rate_update_seconds.load());
  // bcache: the integral moves only when it can act — unwinding when below
  // target, growing when above target while writeback keeps up with the
  // rate (not when the backing device is the limit).
  bool keeping_up = now < next_io_ + 1'000'000;  // bcache: time_before(now, next + 1 ms): rate-limited, not behind
  if ((error < 0 && integral_ > 0) || (error > 0 && keeping_up)) integral_ += error * seconds;
  if (integral_ < 0) integral_ = 0;
  double i = integral_ / std::max<uint32_t>(1, k.writeback_rate_i_term_inverse.load());
  // Fragmentation: many partly dirty buckets fill the cache with little
  // dirty data each; bcache raises the rate by dirty-per-bucket x a term
  // that grows with the cache in use.
  double f = 0;
  unsigned in_use = d.set->in_use_percent();
  uint64_t dirty_buckets = b.dirty_buckets();
  if (in_use > kFragLow && dirty > 0 && dirty_buckets > 0) {
    double fragment = static_cast<double>(dirty_buckets * bucket) / dirty;
    int64_t term = in_use <= kFragMid    ? kFpTermLow * (in_use - kFragLow)
                   : in_use <= kFragHigh ? kFpTermMid * (in_use - kFragMid)
                                         : kFpTermHigh * (in_use - kFragHigh);
    if (fragment > 3) f = dirty / static_cast<double>(dirty_buckets) * static_cast<double>(term);
  }
  double rate = std::max(p, f) + i;
  uint64_t minimum = std::max<uint64_t>(1, k.writeback_rate_minimum.load());
  uint64_t nr = static_cast<uint64_t>(std::clamp(rate, static_cast<double>(minimum), static_cast<double>(kMaxRate)));
  uint64_t old = k.writeback_rate.load();
  k.writeback_rate.store(nr);
  dbg_dirty_ = static_cast<uint64_t>(dirty);
  dbg_target_ = static_cast<uint64_t>(target);
  dbg_p_ = static_cast<int64_t>(p);
  dbg_i_ = static_cast<int64_t>(i);
  dbg_f_ = static_cast<int64_t>(f);
  dbg_change_ = static_cast<int64_t>(nr) - static_cast<int64_t>(old);
}

Writeback::Lag Writeback::MeasureLag(uint64_t now) {
  last_lag_ = now;
  CacheKnobs& k = d_.set->knobs();
  Lag lag;
  // The clock before the index: with nothing dirty, every write
  // acknowledged before t_ms is on the device.
  const uint64_t t_ms = UnixMillis();
  lag.oldest = d_.set->index().OldestEpoch(d_.dev);
  d_.clock->Forget(lag.oldest ? *lag.oldest : d_.epoch->current());
  lag.as_of_ms = lag.oldest ? d_.clock->AsOf(*lag.oldest) : t_ms;
  const uint64_t target = k.writeback_lag_target.load();
  lag_ms_.store(d_.clock->LagMs(lag.oldest, t_ms));
  // Twice the target: the controller (UpdateRate) did not hold it.
  const bool over = d_.ordered->ordered() && lag.oldest && target > 0 &&
                    lag.as_of_ms + 2 * target * 1000 < t_ms;
  if (over != lag_over_.load())
    UB_INFO("{}: writeback lag {} twice writeback_lag_target ({} s){}", d_.spec, over ? "past" : "back under",
            target, over ? ": writing back at full speed" : "");
  lag_over_.store(over);
  return lag;
}

void Writeback::SuspendOrResumeOrder(uint64_t now) {
  OrderedGate* g = d_.ordered;
  CacheKnobs& k = d_.set->knobs();
  if (g->suspended()) {
    // Room again, below cutoff_writeback (not just the sync cutoff the
    // room test uses: no flapping at its edge), or the knobs say so.
    const bool room = d_.set->in_use_percent() <= k.cutoff_writeback.load() && !d_.set->index().epoch_state_full();
    if (room || !k.writeback_order_suspend.load() || k.writeback_order.load() != WritebackOrder::kFlush) {
      g->Resume();
      if (d_.super) d_.super->ResumeOrder();
      UB_INFO("{}: writeback order resumed ({}% of the cache in use): epochs from now on reach the backing "
              "device in order; consistent_as_of is recorded again once those before are written back",
              d_.spec, d_.set->in_use_percent());
    }
    return;
  }
  if (!g->suspend_wanted(now) || now - last_suspend_try_ < kNs) return;
  last_suspend_try_ = now;
  // Rule 17: the promise goes first — durably, before any write the gate
  // lets go out of order reaches the backing device.
  Status st = d_.super ? d_.super->SuspendOrder() : Status::OK();
  if (!st.ok()) {
    UB_WARN("{}: cannot suspend the writeback order ({}): writes the full cache turned away wait for "
            "writeback to reach their epoch",
            d_.spec, st.ToString());
    return;
  }
  g->Suspend();
  UB_WARN("{}: writeback order suspended: the cache is full of dirty epochs ({}% in use, {} dirty), and a "
          "write it turned away has waited a second for room. Writes go to the backing device at once and "
          "writeback runs in address order until the cache has room; the backing device promises no "
          "consistent time until these epochs are written back (writeback_order_suspend 0 waits instead)",
          d_.spec, d_.set->in_use_percent(), FormatSize(d_.set->index().DirtyBytes(d_.dev)));
}

void Writeback::NoteProgress(uint64_t now) {
  if (now - last_progress_ < kNs) return;
  last_progress_ = now;
  // The count before the order: a stretch of lba order, even one already
  // over, may have put any epoch up to the current one on the device out
  // of order — by writeback in address order, or by a write the gate let
  // through without waiting (cache/ordered_gate.h). A switch after this
  // read stops the record below (BackingSuper counts it first).
  const uint64_t switches = d_.super ? d_.super->lba_switches() : 0;
  const bool by_epoch = d_.ordered->ordered();  // suspended (rule 17): as lba
  if (!by_epoch || switches != seen_lba_switches_) {
    unordered_through_ = std::max(unordered_through_, d_.epoch->current());
    if (by_epoch) seen_lba_switches_ = switches;
  }
  const Lag lag = MeasureLag(now);
  const std::optional<uint64_t>& oldest = lag.oldest;
  const uint64_t as_of = lag.as_of_ms;
  // Rule 16: the backing superblock's consistent_as_of, at most once a
  // second, only in flush order, only once no epoch the device may hold
  // out of order is dirty, and only after the backing flush that put the
  // epochs before `oldest` on the media (a pass flushes before it marks
  // anything clean, rule 13; the superblock write flushes again first).
  if (!by_epoch || !d_.super || (oldest && *oldest <= unordered_through_) ||
      d_.super->state() != BackingState::kDirty || as_of / 1000 <= recorded_as_of_)
    return;
  Status st = d_.super->RecordConsistentAsOf(as_of / 1000, switches);
  if (st.ok())
    recorded_as_of_ = as_of / 1000;
  else
    UB_WARN("{}: cannot record consistent_as_of in the backing superblock: {}", d_.spec, st.ToString());
}

Writeback::RateDebug Writeback::rate_debug() const {
  CacheKnobs& k = d_.set->knobs();
  uint64_t now = NowNanos(), next = dbg_next_io_.load();
  return RateDebug{k.writeback_rate.load(),
                   d_.set->index().DirtyBytes(d_.dev),
                   dbg_target_.load(),
                   dbg_p_.load(),
                   dbg_i_.load(),
                   dbg_f_.load(),
                   dbg_change_.load(),
                   next > now ? (next - now) / 1'000'000 : 0,
                   lag_over_.load()};
}

uint64_t Writeback::Pass(bool full_speed) {
  PassState s;
  // writeback_order (and a suspension, rule 17), read once a pass: a pass
  // is wholly one or the other.
  const bool by_epoch = d_.ordered->ordered();
  // Address order has no use for kept versions: the newer dirty data of
  // their ranges goes back in address order like the rest.
  if (!by_epoch && d_.set->index().DropKeptVersions(d_.dev) > 0)
    UB_INFO("{}: writeback_order lba: kept versions of older epochs dropped", d_.spec);
  if (!(by_epoch ? CollectEpoch(s) : CollectDirty(s))) return 0;
  if (!s.pieces.empty() && !CommitBeforeWriteback(s)) return 1;
  ReadDirty(s);
  if (by_epoch && !s.pieces.empty()) FlushClientWrites(s);
  WriteDirty(s, full_speed);
  reactor_->RunUntil([&] { return s.inflight == 0 && s.reading == 0; });
  if (!s.flush_failed) FlushAndMarkClean(s);
  BucketAllocator& buckets = d_.set->buckets();
  for (auto& p : s.pieces) buckets.WriteDone(buckets.BucketOf(p->e.cache_offset));
  for (const auto& r : s.runs)
    if (r.start < r.end) d_.ranges->ReleaseWriteback(r.start, r.end);
  backoff_ns_ = s.failed ? std::clamp<uint64_t>(backoff_ns_ * 2, kNs / 10, kMaxBackoffNs) : 0;
  d_.ordered->Advance();  // writes waiting for an epoch this pass finished
  if (s.stale + s.stale_kept > 0)
    UB_INFO("{}: writeback: dropped {} stale dirty extents and {} stale kept versions (their buckets were reused)",
            d_.spec, s.stale, s.stale_kept);
  if (s.pieces.empty() && s.refused > 0) {
    // Foreground writes held every range it could take (in flush order the
    // oldest epoch is often one stripe): they hold it for one backing write,
    // so look again shortly, not after writeback_delay as when nothing is
    // dirty — that left the whole cache's writeback idle for 30 s.
    backoff_ns_ = std::max<uint64_t>(backoff_ns_, kNs / 100);
    return 1;
  }
  // Found something, even if nothing got cleaner (a stale pointer dropped
  // counts: the next pass may find the epoch after it).
  return s.bytes + (s.pieces.empty() && s.stale + s.stale_kept == 0 ? 0 : 1);
}

bool Writeback::CollectDirty(PassState& s) {
  const Parts& d = d_;
  ExtentIndex& index = d.set->index();
  const uint64_t stripe = index.stripe_bytes();
  std::vector<uint64_t> stripes = index.DirtyStripes(d.dev, cursor_, kStripesPerPass);
  if (stripes.empty() && cursor_ != 0) {
    cursor_ = 0;  // wrap: the next pass starts from the front
    stripes = index.DirtyStripes(d.dev, 0, kStripesPerPass);
  }
  if (stripes.empty()) return false;
  cursor_ = stripes.back() + 1;  // moved back below if the batch filled up early
  // One run per stripe, so a batch stops at kMaxBatchBytes (contiguous
  // pieces of neighbouring stripes still go out as one write below). Each
  // is claimed, then looked up (the order the foreground's
  // Invalidate-then-check relies on, RangeGuard::AfterWriteback).
  std::vector<Extent> found;
  uint64_t batch_bytes = ClaimRuns(s, stripes, [&](const Run& r) {
    uint64_t bytes = 0;
    if (index.Lookup(d.dev, r.start, r.end - r.start, &found).ok())
      for (const Extent& e : found)
        if (e.dirty) bytes += TakePiece(s, e, false);
    return bytes;
  });
  for (const auto& r : s.runs) {
    if (r.start == r.end && batch_bytes >= kMaxBatchBytes) {
      cursor_ = std::min(cursor_, r.start / stripe);  // not taken this pass: next one starts there
    }
  }
  return true;
}

uint64_t Writeback::ClaimRuns(PassState& s, const std::vector<uint64_t>& stripes,
                             const std::function<uint64_t(const Run&)>& take) {
  const uint64_t stripe = d_.set->index().stripe_bytes();
  const uint64_t size = d_.host->client_size();  // once: Grow may change it meanwhile
  for (uint64_t st : stripes) s.runs.push_back({st * stripe, std::min((st + 1) * stripe, size)});
  uint64_t batch_bytes = 0;
  for (auto& r : s.runs) {
    // A batch is marked clean at its end: bounded, so progress (and ctl
    // flush's report) moves in steps of at most kMaxBatchBytes.
    if (batch_bytes >= kMaxBatchBytes) {
      r.end = r.start;
      continue;
    }
    if (r.start >= r.end) continue;
    if (!d_.ranges->ClaimForWriteback(r.start, r.end)) {
      r.end = r.start;  // a foreground write owns part of it: next pass
      s.refused++;
      continue;
    }
    batch_bytes += take(r);
  }
  return batch_bytes;
}

uint64_t Writeback::TakePiece(PassState& s, const Extent& e, bool kept) {
  BucketAllocator& buckets = d_.set->buckets();
  buckets.Pin(buckets.BucketOf(e.cache_offset));
  if (!buckets.Valid(e.cache_offset, e.gen)) {
    buckets.WriteDone(buckets.BucketOf(e.cache_offset));
    // Its bucket was reused, so its data was rewritten or written back
    // before (a bucket is reclaimed only at zero dirty bytes, rule 15).
    // After a crash such a pointer can outlive its bucket: the bucket's new
    // gen is journaled straight away (CacheSet::PersistGens) while the
    // unkeep or mark-clean that freed it was still in a shard's unwritten
    // journal ops. Dropped here — in flush order it would stay the oldest
    // epoch's forever (rule 13): nothing later would ever be cleaned, and
    // the cache would fill with dirty data. Only the stale pointer itself
    // goes (GC's RemoveIfSame; Unkeep matches gen and place).
    uint64_t dropped = 0;
    Status st = kept ? d_.set->index().Unkeep(e, &dropped) : d_.set->index().RemoveIfSame(e);
    if (st.ok()) {
      (kept ? s.stale_kept : s.stale)++;
    } else {
      UB_WARN("{}: writeback: dropping a stale pointer: {}", d_.spec, st.ToString());
    }
    return 0;
  }
  auto p = std::make_unique<Piece>();
  p->e = e;
  p->kept = kept;
  s.pieces.push_back(std::move(p));
  return e.len;
}

bool Writeback::CommitBeforeWriteback(PassState& s) {
  // Rule 3, first half: the index entries of what is written back are
  // durable before the backing device gets their data: else a crash could
  // leave the backing device holding a write the recovered index never had,
  // under an older dirty copy that a later writeback or eviction would then
  // expose or overwrite.
  Status cst = d_.set->Commit();
  if (cst.ok()) return true;
  UB_WARN("{}: writeback: journal commit failed, nothing written back: {}", d_.spec, cst.ToString());
  BucketAllocator& buckets = d_.set->buckets();
  for (auto& p : s.pieces) buckets.WriteDone(buckets.BucketOf(p->e.cache_offset));
  for (const auto& r : s.runs)
    if (r.start < r.end) d_.ranges->ReleaseWriteback(r.start, r.end);
  backoff_ns_ = std::clamp<uint64_t>(backoff_ns_ * 2, kNs / 10, kMaxBackoffNs);
  return false;
}

void Writeback::ReadDirty(PassState& s) {
  // Contiguous pieces make one backing write. Every piece is read from the
  // cache device at once, into its place in its write's buffer, and a write
  // goes out as soon as its own pieces are read: reads and backing writes
  // overlap.
  for (auto& p : s.pieces) AppendPiece(s.writes, p.get());
  for (auto& w : s.writes) w->buf = PooledBuffer(w->len);
  for (auto& p : s.pieces) {
    Write* w = p->w;
    w->reading++;
    s.reading++;
    d_.set->cache_dev()->Read(p->e.cache_offset, p->e.len, w->buf.data() + (p->e.start - w->start),
                              [&s, pp = p.get()](Status st) {
                                pp->st = std::move(st);
                                pp->w->reading--;
                                s.reading--;
                              });
  }
}

void Writeback::SplitUnreadable(PassState& s, size_t i) {
  // A write with a part the cache device could not read goes out as the
  // writes of its readable parts; the unreadable ones stay dirty.
  Write* w = s.writes[i].get();
  std::vector<std::unique_ptr<Write>> parts;
  for (Piece* p : w->parts) {
    if (!p->st.ok()) {
      d_.set->CountIoError(p->st);
      UB_WARN("{}: writeback: cache read of dirty data failed: {}", d_.spec, p->st.ToString());
      errors_++;
      s.failed = true;
      continue;
    }
    AppendPiece(parts, p);
  }
  for (auto& part : parts) {  // each readable run's data, out of the old write's buffer
    part->buf = PooledBuffer(part->len);
    std::copy_n(w->buf.data() + (part->start - w->start), part->len, part->buf.data());
  }
  s.writes.erase(s.writes.begin() + static_cast<ptrdiff_t>(i));
  s.writes.insert(s.writes.begin() + static_cast<ptrdiff_t>(i), std::make_move_iterator(parts.begin()),
                  std::make_move_iterator(parts.end()));
}

void Writeback::FlushClientWrites(PassState& s) {
  // Rule 14: a client write that went to the backing device past the
  // ordered gate (cache/ordered_gate.h) belongs to an epoch no later than
  // this pass's writes, and is durable before they are issued: one backing
  // flush if any client write completed there since the last (rule 8's
  // count; none while the cache absorbs every write).
  bool done = false;
  Status st;
  d_.durability->FlushForClient([&](Status fst) {
    st = std::move(fst);
    done = true;
  });
  reactor_->RunUntil([&] { return done; });
  if (!st.ok()) {
    UB_WARN("{}: writeback: backing flush before epoch {} failed, nothing written: {}", d_.spec, s.epoch,
            st.ToString());
    s.flush_failed = s.failed = true;
  }
}

void Writeback::FlushAndMarkClean(PassState& s) {
  // Rule 3, second half: the backing device's copies are durable before any
  // is marked clean. Called about once a second during a pass, and at its
  // end, so dirty data (and ctl flush's report) goes down steadily even when
  // a batch takes long. A failed flush marks nothing and ends the pass.
  std::vector<Write*> done;
  bool any_ok = false;
  for (auto& w : s.writes) {
    if (w->cleaned || !w->complete()) continue;
    done.push_back(w.get());
    any_ok |= w->st.ok();
  }
  if (done.empty()) return;
  // Only writes complete before the flush is submitted are covered by it.
  Status fst = any_ok ? d_.durability->SyncFlush() : Status::OK();
  if (!fst.ok()) {
    UB_WARN("{}: writeback: backing flush failed, nothing marked clean: {}", d_.spec, fst.ToString());
    s.flush_failed = s.failed = true;
    return;
  }
  uint64_t cleaned_now = 0;
  for (Write* w : done) {
    w->cleaned = true;
    if (!w->st.ok()) {
      s.failed = true;
      errors_++;
      UB_WARN("{}: writeback of {}+{} failed, kept dirty: {}", d_.spec, w->start, w->len, w->st.ToString());
      continue;
    }
    for (Piece* p : w->parts) {
      // A tree extent is marked clean where it still maps to what was
      // written; the parts of it a later epoch replaced meanwhile were
      // kept, and go now (the same data, written and flushed); a kept
      // version, the same.
      uint64_t cleaned = 0, unkept = 0;
      Status st = p->kept ? Status::OK() : d_.set->index().MarkClean(p->e, &cleaned);
      if (st.ok() && p->e.dirty) st = d_.set->index().Unkeep(p->e, &unkept);
      if (!st.ok()) UB_WARN("{}: writeback: mark clean: {}", d_.spec, st.ToString());
      cleaned_now += cleaned + unkept;
    }
  }
  s.bytes += cleaned_now;
}

void Writeback::IssueChunk(PassState& s, Write* w, uint64_t chunk, bool yield, uint64_t now, uint64_t rate) {
  uint64_t off = w->issued, n = std::min(chunk, w->len - off);
  w->issued += n;
  w->outstanding++;
  if (w->issued == w->len) s.next++;
  s.inflight++;
  next_io_ = std::min(std::max(next_io_, now) + n * kNs / rate, now + kMaxRateDelayNs);
  dbg_next_io_ = next_io_;
  d_.backing->Write(w->start + off, n, w->buf.data() + off, 0,
                    [&s, w, yield, t0 = now, bt = d_.backing_time, n, &written = written_](Status st) {
                      uint64_t done_ns = NowNanos();
                      // What the backing device takes for a write: in
                      // writeback, often the only writes it sees (auto congestion).
                      if (st.ok()) bt->Observe(ServiceTime::Op::kWrite, n, done_ns - t0, done_ns);
                      // writeback_written: bytes the backing device took, as
                      // they complete — not what MarkClean later cleans, which
                      // is nothing where clients rewrote the range meanwhile.
                      if (st.ok()) written.fetch_add(n, std::memory_order_relaxed);
                      if (!st.ok() && w->st.ok()) w->st = std::move(st);
                      w->outstanding--;
                      s.inflight--;
                      if (yield) s.yield_until = done_ns + kReaderYield * (done_ns - t0);
                    });
}

void Writeback::WriteDirty(PassState& s, bool full_speed) {
  // Write back in backing order, bounded in flight, at the controller's rate.
  const Parts& d = d_;
  CacheKnobs& k = d.set->knobs();
  uint64_t last_clean = NowNanos();
  while ((s.next < s.writes.size() && !s.flush_failed) || s.inflight > 0) {
    uint64_t now = NowNanos();
    // The controller keeps running during a long pass, and a pause takes
    // effect at once (what is in flight completes; the rest stays dirty).
    if (now - last_update_ >= std::max<uint32_t>(1, k.writeback_rate_update_seconds.load()) * kNs) {
      UpdateRate(now);
      last_update_ = now;
    }
    if (now - last_clean >= kCleanIntervalNs) {
      FlushAndMarkClean(s);
      last_clean = now;
    }
    // A long pass (a slow rate, one big epoch) still sees the lag pass
    // writeback_lag_target (NoteProgress runs between passes).
    if (now - last_lag_ >= kNs) MeasureLag(now);
    if (!full_speed && !k.writeback_running.load()) {
      if (s.inflight == 0) break;
      reactor_->RunOnce(true);
      continue;
    }
    bool idle = now - d.activity->last_request_ns() > kIdleSeconds * kNs;
    // Near the cutoff (or past it, turning writes away), dirty data leaves
    // at full speed: a write burst then finds room in the cache instead of
    // the spindle's random-write speed.
    bool at_cutoff =
        d.activity->TurnedAwayRecently(now) || d.set->in_use_percent() + kCutoffMargin > k.cutoff_writeback.load();
    // writeback_order flush, the oldest epoch older than writeback_lag_target:
    // full speed too, until it is written back (NoteProgress).
    bool fast = full_speed || idle || at_cutoff || lag_over_.load(std::memory_order_relaxed);
    // Foreground reads of the backing device go first (bcache's writeback
    // starves readers of a spindle; the mmtests thread measured 38-90 %
    // lost): while one was seen in the last kReaderWindowNs, one write of
    // at most kReaderChunk at a time, and after each a pause of
    // kReaderYield times its latency, so writeback holds the device a
    // small share of the time (latency includes the wait behind a read).
    bool yield = !full_speed && now - d.activity->last_backing_read_ns() < kReaderWindowNs;
    // At the cutoff the spindle also serves the foreground's writethrough:
    // no deeper queue than at the PI rate, so those wait behind little.
    size_t limit = yield ? 1 : (full_speed || idle) ? 64 : 16;
    uint64_t chunk = yield ? kReaderChunk : kMaxRun;
    uint64_t rate = fast ? kMaxRate : std::max<uint64_t>(1, k.writeback_rate.load());
    while (!s.flush_failed && s.next < s.writes.size() && s.inflight < limit && (fast || now >= next_io_) &&
           (!yield || now >= s.yield_until)) {
      Write* w = s.writes[s.next].get();
      if (w->reading > 0) break;  // its data is still coming from the cache device
      if (w->issued == 0 && std::any_of(w->parts.begin(), w->parts.end(), [](Piece* p) { return !p->st.ok(); })) {
        SplitUnreadable(s, s.next);
        continue;
      }
      IssueChunk(s, w, chunk, yield, now, rate);
    }
    if (s.inflight > 0 || (s.next < s.writes.size() && s.writes[s.next]->reading > 0)) {
      reactor_->RunOnce(true);
    } else if (s.next < s.writes.size() && !s.flush_failed) {
      uint64_t wake = std::max(fast ? now : next_io_, yield ? s.yield_until : now);
      if (wake > now && !Sleep(std::min<uint64_t>(wake - now, 50'000'000))) break;  // stopping
    }
  }
}

void Writeback::Loop() {
  CacheKnobs& k = d_.set->knobs();
  bool nothing_last = false;
  uint64_t found_nothing_at = 0;
  while (true) {
    uint64_t now = NowNanos();
    StateTransitions();
    SuspendOrResumeOrder(now);
    NoteProgress(now);
    d_.ordered->Advance();  // the order or the cache's state may have changed
    if (now - last_update_ >= std::max<uint32_t>(1, k.writeback_rate_update_seconds.load()) * kNs) {
      UpdateRate(now);
      last_update_ = now;
    }
    // Writes waiting for older epochs (rule 14) drain them, as ctl flush.
    bool drain = draining_.load() > 0 || d_.ordered->waiting();
    // A failed cache device is not read again: its dirty data stays where it is.
    bool run = (drain || k.writeback_running.load()) && !d_.set->failed() && !d_.host->fenced();
    if (!run || (nothing_last && !drain)) {
      // bcache sleeps writeback_delay after a pass that found nothing; new
      // dirty data or a state change kicks it awake sooner only if asked.
      uint64_t delay = !run ? kNs : std::max<uint64_t>(1, k.writeback_delay.load()) * kNs;
      if (!Sleep(std::min<uint64_t>(delay, kNs))) return;
      if (nothing_last && NowNanos() - found_nothing_at >= std::max<uint64_t>(1, k.writeback_delay.load()) * kNs)
        nothing_last = false;  // writeback_delay has passed since the empty pass
      if (drain || d_.handshake->dirty_requested() || d_.activity->TurnedAwayRecently(NowNanos())) nothing_last = false;
      continue;
    }
    if (backoff_ns_ && !Sleep(backoff_ns_)) return;
    uint64_t found = Pass(drain);
    nothing_last = found == 0;
    if (nothing_last) found_nothing_at = NowNanos();
    {
      std::lock_guard<std::mutex> l(mu_);
      if (stop_) return;
    }
  }
}

Status Writeback::Drain(const std::function<void(const std::string&)>& progress,
                        const std::function<bool()>& cancelled) {
  draining_++;
  Kick();
  // The rate in the progress line is the average since the flush began:
  // written_ moves as backing writes complete, in bursts at the
  // controller's pace, so a per-line rate would swing.
  uint64_t t0 = NowNanos(), w0 = written_.load();
  Status result;
  for (;;) {
    uint64_t dirty = d_.set->index().DirtyBytes(d_.dev);
    bool clean = dirty == 0 && (!d_.super || d_.super->state() != BackingState::kDirty);
    if (d_.set->failed() && !clean) {
      result = Status::IoError(FormatSize(dirty) + " of dirty data is on a failed cache device");
      break;
    }
    if (d_.host->fenced()) {
      result = Status::Busy(d_.spec + " is fenced (" + d_.host->fence_reason() + "): " + FormatSize(dirty) +
                            " of dirty data is not written back");
      break;
    }
    uint64_t now = NowNanos();
    uint64_t w = written_.load();
    double rate = now > t0 ? static_cast<double>(w - w0) * 1e9 / static_cast<double>(now - t0) : 0;
    progress("flush " + d_.spec + ": " + FormatSize(dirty) + " dirty left, " +
             FormatSize(static_cast<uint64_t>(rate)) + "/s written back");
    if (clean) break;
    if (cancelled && cancelled()) {
      result = Status::Shutdown("flush: cancelled with " + FormatSize(dirty) +
                                " dirty left (the client went away, or the daemon stops)");
      UB_INFO("flush {}: cancelled with {} dirty left (the client went away, or the daemon stops); writeback "
              "goes on at its usual pace",
              d_.spec, FormatSize(dirty));
      break;
    }
    Kick();
    std::this_thread::sleep_for(std::chrono::milliseconds(dirty == 0 ? 50 : 1000));
    std::lock_guard<std::mutex> l(mu_);
    if (stop_) {
      result = Status::Busy("flush: the writeback thread stopped");
      break;
    }
  }
  draining_--;
  return result;
}

}  // namespace ubcache
