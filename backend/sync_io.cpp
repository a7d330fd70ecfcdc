// SPDX-License-Identifier: Apache-2.0
#include "backend/sync_io.h"

#include <optional>

#include "util/thread.h"

namespace ubcache {

Status SyncIo(BlockDevice& dev, const IoRequest& req) {
  AssertMayBlock("SyncIo");
  Reactor* r = Reactor::Current();
  std::optional<Status> result;
  dev.Submit(req, [&result](Status st) { result = std::move(st); });
  r->RunUntil([&] { return result.has_value(); });
  return std::move(*result);
}

}  // namespace ubcache
