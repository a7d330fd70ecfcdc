// SPDX-License-Identifier: Apache-2.0
#include "cache/backing_durability.h"

#include "backend/sync_io.h"
#include "cache/cache_set.h"
#include "util/log.h"

namespace ubcache {

BackingDurability::BackingDurability(std::string spec, CacheSet* set, uint32_t dev,
                                     BlockDevice* backing)
    : spec_(std::move(spec)), set_(set), dev_(dev), backing_(backing) {
  // Copies an earlier run of this power domain left provisional are in the
  // tree as if covered; they are not durable until a flush of this run: one
  // uncovered insert makes the first checkpoint flush first (rule 9).
  if (set_->index().kept_on_power() > 0) provisional_.store(1, std::memory_order_seq_cst);
  set_->RegisterBacking(dev_, this);
}

BackingDurability::~BackingDurability() { set_->UnregisterBacking(dev_, this); }

void BackingDurability::WriteIssuing(uint64_t offset, uint64_t len) {
  set_->index().BackingWriteBegins(dev_, offset, len);
  issued_.fetch_add(1, std::memory_order_seq_cst);
}

void BackingDurability::WriteSettled(uint64_t offset, uint64_t len) {
  set_->index().BackingWriteEnds(dev_, offset, len);
}

void BackingDurability::AdvanceTo(std::atomic<uint64_t>& a, uint64_t v) {
  uint64_t seen = a.load(std::memory_order_seq_cst);
  while (seen < v && !a.compare_exchange_weak(seen, v, std::memory_order_seq_cst)) {
  }
}

BackingDurability::FlushMark BackingDurability::Mark() const {
  FlushMark m;
  m.seq = set_->index().written_seq();
  m.provisional = provisional_.load(std::memory_order_seq_cst);
  // Completed before issued: if they are equal, every write issued by the
  // time `completed` was read had completed then.
  m.completed = completed_.load(std::memory_order_seq_cst);
  m.quiet = issued_.load(std::memory_order_seq_cst) == m.completed;
  return m;
}

void BackingDurability::Flushed(const FlushMark& m) {
  AdvanceTo(flushed_, m.completed);
  if (m.quiet) AdvanceTo(quiet_flushed_, m.completed);
  AdvanceTo(provisional_flushed_, m.provisional);
  // Rule 9's record: only when an entry it covers may hold a provisional
  // insert, so a writeback-mode journal without any gets no extra ops.
  ExtentIndex& index = set_->index();
  uint64_t from = index.run_first_seq(), last = recorded_seq_.load(std::memory_order_seq_cst);
  if (m.seq < from || m.seq <= last || index.last_provisional_seq() <= last) return;
  index.JournalBackingFlushed(dev_, from, m.seq);
  AdvanceTo(recorded_seq_, m.seq);
}

void BackingDurability::Flush(IoDone done) {
  FlushMark m = Mark();
  backing_->Flush([this, m, done = std::move(done)](Status st) mutable {
    if (st.ok()) Flushed(m);
    done(std::move(st));
  });
}

Status BackingDurability::SyncFlush() {
  FlushMark m = Mark();
  Status st = ubcache::SyncFlush(*backing_);
  if (st.ok()) Flushed(m);
  return st;
}

void BackingDurability::FlushForClient(IoDone done) {
  // Sampled after the FLUSH arrived: every write acknowledged before it
  // counted itself before its acknowledgement (WriteDone).
  if (completed_.load(std::memory_order_seq_cst) <= flushed_.load(std::memory_order_seq_cst)) {
    done(Status::OK());
    return;
  }
  Flush(std::move(done));
}

Status BackingDurability::FlushForCheckpoint() {
  if (!set_->persistent() ||
      provisional_.load(std::memory_order_seq_cst) <= provisional_flushed_.load(std::memory_order_seq_cst))
    return Status::OK();
  FlushMark m = Mark();
  Status st = set_->SyncIoOn(backing_, {IoOp::kFlush, 0, 0, 0, nullptr});
  if (st.ok())
    Flushed(m);
  else
    UB_WARN("{}: backing flush before a checkpoint failed (the checkpoint waits): {}", spec_, st.ToString());
  return st;
}

bool BackingDurability::CleanCopyDurable() const {
  // Issued first: a flush that covered that many, issued with none in
  // flight, covered every write issued up to now.
  uint64_t issued = issued_.load(std::memory_order_seq_cst);
  return quiet_flushed_.load(std::memory_order_seq_cst) >= issued;
}

bool BackingDurability::Provisional(bool durable) {
  if (durable || !set_->persistent()) return false;
  // Counted before the insert: a checkpoint whose snapshot holds it sees it.
  provisional_.fetch_add(1, std::memory_order_seq_cst);
  return true;
}

Status BackingDurability::InsertClean(const Extent& e, bool durable) {
  return set_->index().Insert(e, nullptr, Provisional(durable));
}

Status BackingDurability::InsertFill(const Extent& e, uint64_t since, bool* inserted) {
  return set_->index().InsertIfUnchanged(e, since, inserted, Provisional(CleanCopyDurable()));
}

}  // namespace ubcache
