// SPDX-License-Identifier: Apache-2.0
// NodeStore: where the extent index keeps its B-tree nodes and its journal.
//
// The cache layer implements it over blocks of cache-device buckets; tests use
// MemNodeStore. Every call is synchronous but ReadNodeAsync, the one call a
// serving reactor makes (extent_index.h, "Without I/O"). The index calls it from several
// threads at once (each shard under its own mutex, Commit/Checkpoint under the
// index's commit mutex), so an implementation must be thread-safe.
//
// Durability contract the index relies on (see doc/format.md, "btree node"):
//  - WriteNode(addr) only ever targets an address that no durable root can
//    reach: either freshly returned by AllocNode, or one the index allocated
//    after the last checkpoint. A crash in the middle of it is harmless.
//  - FreeNode(addr): the index calls it only once addr is unreachable from
//    every root that is or may become durable, so the address is reusable at
//    once. (A store may defer reuse further; it never needs to.)
//  - AppendJournal is durable on return and appends exactly `len` bytes right
//    after the previous append; ReadJournal returns those bytes back to back.
//  - AppendJournalSoft appends the same way but need only survive a crash of
//    the process: a power cut may lose it, or keep it and lose cache data
//    written before it. SyncJournal makes every soft append durable. A
//    store without the distinction makes soft appends durable.
//  - After a crash, the store's idea of which addresses are allocated may
//    include nodes nobody references any more (written after the last
//    checkpoint); a real store rebuilds its free map from the roots (GC).
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "util/callback.h"
#include "util/status.h"

namespace ubcache {

class NodeStore {
 public:
  virtual ~NodeStore() = default;
  // Bytes per node: every WriteNode/ReadNode moves exactly this many.
  virtual uint32_t node_size() const = 0;
  virtual Result<uint64_t> AllocNode() = 0;
  virtual void FreeNode(uint64_t addr) = 0;
  virtual Status WriteNode(uint64_t addr, const uint8_t* data) = 0;
  virtual Status ReadNode(uint64_t addr, uint8_t* data) = 0;
  // The node's node_size() bytes, handed to `done` (valid only during the
  // call; null with an error). A store on a real device submits the read on
  // the calling thread's reactor and calls `done` there when it completes,
  // without waiting; this default reads synchronously and calls `done`
  // before returning (a store in memory, whose reads never wait).
  using NodeReadDone = Callback<void(Status, const uint8_t* data)>;
  virtual void ReadNodeAsync(uint64_t addr, NodeReadDone done) {
    std::vector<uint8_t> buf(node_size());
    Status st = ReadNode(addr, buf.data());
    done(st, st.ok() ? buf.data() : nullptr);
  }
  virtual Status AppendJournal(const uint8_t* data, size_t len) = 0;
  virtual Status AppendJournalSoft(const uint8_t* data, size_t len) { return AppendJournal(data, len); }
  virtual Status SyncJournal() { return Status::OK(); }
  // Everything appended since the last TrimJournal (or DiscardJournalTail).
  virtual Status ReadJournal(std::vector<uint8_t>* all) = 0;
  // The same; *unconfirmed = where the bytes begin that a power cut may have
  // kept without the cache data they point at (soft appends not known to be
  // flushed), all->size() when there are none.
  virtual Status ReadJournal(std::vector<uint8_t>* all, size_t* unconfirmed) {
    UB_RETURN_IF_ERROR(ReadJournal(all));
    *unconfirmed = all->size();
    return Status::OK();
  }
  // Drops the whole journal: called after a checkpoint's root is durable.
  virtual Status TrimJournal() = 0;
  // Open() found only the first `valid_bytes` of ReadJournal's bytes to be
  // whole, checksummed entries (the rest is a torn tail of a crash): drop the
  // rest, so the next AppendJournal lands right after the valid entries and a
  // later replay does not stop at the old garbage.
  virtual Status DiscardJournalTail(size_t valid_bytes) = 0;
};

}  // namespace ubcache
