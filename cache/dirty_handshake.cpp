// SPDX-License-Identifier: Apache-2.0
#include "cache/dirty_handshake.h"

namespace ubcache {

void DirtyHandshake::ParkLocked(Callback<void(bool refused)> retry) {
  parked_.push_back({Reactor::Current(), [this, retry = std::move(retry)]() mutable {
                       inflight_.fetch_sub(1, std::memory_order_seq_cst);
                       // Woken with dirty_ok_ still false: marking failed.
                       retry(!dirty_ok_.load(std::memory_order_seq_cst));
                     }});
  want_dirty_ = true;
}

void DirtyHandshake::SetDirtyOk(bool ok) {
  std::vector<Parked> ready;
  {
    MutexLock l(&mu_);
    dirty_ok_.store(ok, std::memory_order_seq_cst);
    if (ok || !want_dirty_.load()) ready.swap(parked_);
  }
  for (Parked& p : ready) p.reactor->Post(std::move(p.fn));
}

}  // namespace ubcache
