// SPDX-License-Identifier: Apache-2.0
#include "cache/request_timing.h"

#include "backend/reactor.h"
#include "cache/recycled.h"
#include "util/clock.h"

namespace ubcache {

namespace {
struct Timed {
  RequestStats* stats = nullptr;
  RequestStats::Op op = RequestStats::kRead;
  uint64_t len = 0;
  uint64_t start_ns = 0;
  IoDone done;
};
}  // namespace

IoDone TimeRequest(RequestStats* stats, RequestStats::Op op, uint64_t len, uint64_t start_ns,
                   IoDone done) {
  Timed* t = Recycled<Timed>::New();
  t->stats = stats;
  t->op = op;
  t->len = len;
  t->start_ns = start_ns;
  t->done = std::move(done);
  return [t](Status st) {
    // Recorded by the completing thread, into its own shard: the one that
    // submitted, as completions run where they were submitted.
    t->stats->Record(Reactor::Current()->id(), t->op, t->len, NowNanos() - t->start_ns, st.ok());
    IoDone client = std::move(t->done);
    Recycled<Timed>::Recycle(t);
    client(std::move(st));
  };
}

}  // namespace ubcache
