// SPDX-License-Identifier: Apache-2.0
#include "cache/index_call.h"

#include "backend/reactor.h"
#include "cache/cache_set.h"

namespace ubcache {

void CallIndex(CacheSet* set, Callback<Status()> call, Callback<void(Status)> done) {
  Status st = call();
  if (!st.IsWouldBlock()) {
    done(std::move(st));
    return;
  }
  ExtentIndex& index = set->index();
  if (index.HasMissingNode()) {
    index.LoadMissing([set, call = std::move(call), done = std::move(done)](Status loaded) mutable {
      if (!loaded.ok()) {
        done(std::move(loaded));
        return;
      }
      CallIndex(set, std::move(call), std::move(done));
    });
    return;
  }
  // Too large to make without I/O: on a thread that may wait, then back here.
  Reactor* here = Reactor::Current();
  set->RunMayWait([here, call = std::move(call), done = std::move(done)]() mutable {
    Status result = call();
    here->Post([done = std::move(done), result = std::move(result)]() mutable {
      done(std::move(result));
    });
  });
}

}  // namespace ubcache
