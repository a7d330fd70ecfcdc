// SPDX-License-Identifier: Apache-2.0
// Synchronous I/O for tools and tests: submit on the calling thread's
// reactor and turn it until the request completes. Never on a reactor that
// serves clients (it would stall them).
#pragma once

#include "backend/block_device.h"

namespace ubcache {

Status SyncIo(BlockDevice& dev, const IoRequest& req);
inline Status SyncRead(BlockDevice& dev, uint64_t off, uint64_t len, void* buf) {
  return SyncIo(dev, {IoOp::kRead, 0, off, len, buf});
}
inline Status SyncWrite(BlockDevice& dev, uint64_t off, uint64_t len, const void* buf,
                        uint32_t flags = 0) {
  return SyncIo(dev, {IoOp::kWrite, flags, off, len, const_cast<void*>(buf)});
}
inline Status SyncFlush(BlockDevice& dev) { return SyncIo(dev, {IoOp::kFlush, 0, 0, 0, nullptr}); }

}  // namespace ubcache
