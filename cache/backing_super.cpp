// SPDX-License-Identifier: Apache-2.0
#include "cache/backing_super.h"

#include <ctime>

namespace ubcache {

BackingSuperblock BackingSuper::Get() const {
  MutexLock l(&mu_);
  return sb_;
}

BackingState BackingSuper::state() const {
  MutexLock l(&mu_);
  return sb_.state;
}

template <typename Fn>
Status BackingSuper::Change(Fn fn) {
  MutexLock l(&mu_);
  BackingSuperblock next = sb_;
  fn(next);
  if (next.state == sb_.state && next.set_uuid == sb_.set_uuid && next.cache_mode == sb_.cache_mode &&
      next.writeback_order == sb_.writeback_order && next.dirty_since == sb_.dirty_since &&
      next.consistent_as_of == sb_.consistent_as_of)
    return Status::OK();  // nothing to write
  next.seq++;
  // The in-memory copy changes only once the new one is durable, so a
  // failed write leaves both saying the same thing.
  UB_RETURN_IF_ERROR(WriteBackingSuperblock(*raw_, next));
  sb_ = next;
  return Status::OK();
}

Status BackingSuper::Attach(const Uuid& set_uuid) {
  return Change([&](BackingSuperblock& sb) {
    sb.set_uuid = set_uuid;
    if (sb.state != BackingState::kDirty) sb.state = BackingState::kClean;
  });
}

Status BackingSuper::Detach() {
  return Change([](BackingSuperblock& sb) {
    sb.set_uuid = Uuid{};
    sb.state = BackingState::kNone;
    sb.dirty_since = 0;
    sb.consistent_as_of = 0;
  });
}

Status BackingSuper::SetCacheMode(CacheMode m) {
  return Change([m](BackingSuperblock& sb) { sb.cache_mode = m; });
}

Status BackingSuper::SetWritebackOrder(WritebackOrder o) {
  // Counted first: a RecordConsistentAsOf from now on was decided before
  // this switch and must not record (rule 16).
  if (o == WritebackOrder::kLba) lba_switches_.fetch_add(1);
  return Change([o](BackingSuperblock& sb) {
    // Address order may put a newer block on the device before an older
    // one: from the first such write on, no time is promised. This write is
    // durable before the knob changes (control/attributes.cpp), so before
    // writeback writes anything in the new order. Back in flush order, only
    // the writeback thread may promise a time again (RecordConsistentAsOf),
    // once the epochs that lba order may have written out of order are gone.
    if (o == WritebackOrder::kLba) sb.consistent_as_of = 0;
    sb.writeback_order = o;
  });
}

Status BackingSuper::SuspendOrder() {
  lba_switches_.fetch_add(1);  // first, as SetWritebackOrder(lba)
  order_suspended_.store(true);
  Status st = Change([](BackingSuperblock& sb) { sb.consistent_as_of = 0; });
  if (!st.ok()) order_suspended_.store(false);  // not suspended: the writes still wait
  return st;
}

Status BackingSuper::MarkDirty() {
  return Change([this](BackingSuperblock& sb) {
    if (sb.state != BackingState::kDirty) {
      sb.dirty_since = static_cast<uint64_t>(std::time(nullptr));
      // Clean until now: everything acknowledged so far is on the device —
      // a promise only if what follows reaches it in order (not while
      // the order is suspended, rule 17).
      sb.consistent_as_of =
          sb.writeback_order == WritebackOrder::kFlush && !order_suspended_.load() ? sb.dirty_since : 0;
    }
    sb.state = BackingState::kDirty;
  });
}

Status BackingSuper::MarkClean() {
  return Change([](BackingSuperblock& sb) {
    if (sb.state == BackingState::kDirty) sb.state = BackingState::kClean;
    sb.dirty_since = 0;
    sb.consistent_as_of = 0;
  });
}

Status BackingSuper::RecordConsistentAsOf(uint64_t t, uint64_t lba_switches_seen) {
  return Change([this, t, lba_switches_seen](BackingSuperblock& sb) {
    if (sb.state == BackingState::kDirty && sb.writeback_order == WritebackOrder::kFlush &&
        t > sb.consistent_as_of && lba_switches_.load() == lba_switches_seen)
      sb.consistent_as_of = t;
  });
}

uint64_t BackingSuper::lba_switches() const { return lba_switches_.load(); }

}  // namespace ubcache
