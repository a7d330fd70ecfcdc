// SPDX-License-Identifier: Apache-2.0
// BackingDurability: what the cache knows of one backing device's volatile
// write cache — which client writes and discards reached the device, and
// which of them a completed backing flush made durable — and the two
// ordering rules of doc/design.md that rest on it:
//
//  - Rule 8: a FLUSH covers every client write or discard the backing device
//    completed before it arrived. Each counts itself before its ack
//    (WriteDone); FlushForClient flushes the backing device unless the last
//    completed backing flush was issued after that count was reached. Every
//    backing flush that goes through here counts (a client FLUSH's,
//    writeback's, a checkpoint's). The counts start one apart: the first
//    FLUSH also flushes what an earlier daemon left in the device's cache.
//
//  - Rule 9: a clean copy never outlives, across a power cut, the backing
//    data it mirrors. A clean insert whose backing data may still be only in
//    the device's volatile cache — a write-through write's copy (unless the
//    write was FUA), a fill or a moving-GC move while a client write is not
//    known durable — is journaled provisional (InsertClean, InsertFill,
//    CleanCopyDurable); a fill is not inserted at all while a client write
//    over its range is in flight (WriteIssuing .. WriteSettled). After a
//    backing flush, if provisional inserts were journaled since the last
//    record, the flush is recorded in the journal
//    (ExtentIndex::JournalBackingFlushed: this run's entries up to the last
//    one written before the flush was issued); replay applies a provisional
//    insert only when a record of its run covers its entry, else it replays
//    as an invalidation (ExtentIndex::ApplyFlushCoverage) — unless no power
//    cut came between (same power domain, util/power_domain.h: a kill -9
//    restarts warm); such copies count as one uncovered provisional insert
//    here, so the first checkpoint flushes first. A checkpoint's
//    nodes keep no provisional mark, so CacheSet's checkpoint flushes every
//    device with uncovered provisional inserts before its superblock write
//    (FlushForCheckpoint).
//
// Writeback's own writes are not counted: their range stays dirty in the
// index, so read from the cache and never filled, until rule 3's flush.
//
// Thread safety: the counts are seq_cst atomics, any thread. Flush from a
// reactor; SyncFlush on the calling thread's reactor (the writeback
// thread); FlushForCheckpoint from any thread that is not a reactor (it
// waits on the cache set's I/O thread).
#pragma once

#include <atomic>
#include <cstdint>
#include <string>

#include "backend/block_device.h"
#include "btree/extent.h"

namespace ubcache {

class CacheSet;

class BackingDurability {
 public:
  // Registers with `set` (its checkpoints and moving GC ask it).
  BackingDurability(std::string spec, CacheSet* set, uint32_t dev, BlockDevice* backing);
  // Unregisters. Nothing is flushed: destroying it is a crash, unless the
  // set's Shutdown checkpoint (which flushes what it must) came first — as
  // serve does, whose cached devices live as long as the set.
  ~BackingDurability();
  BackingDurability(const BackingDurability&) = delete;
  BackingDurability& operator=(const BackingDurability&) = delete;

  // A client write or discard of [offset, offset+len) is about to be
  // submitted to the backing device (rule 9: from here on a fill may read
  // its data; fills of the range are refused until WriteSettled).
  void WriteIssuing(uint64_t offset, uint64_t len);
  // It completed; called before its ack (rule 8's count).
  void WriteDone() { completed_.fetch_add(1, std::memory_order_seq_cst); }
  // Its completion has changed the index (insert or invalidate).
  void WriteSettled(uint64_t offset, uint64_t len);

  // Rule 8: the backing part of a client FLUSH.
  void FlushForClient(IoDone done);
  // A backing flush that counts for both rules (writeback's, a discard's).
  void Flush(IoDone done);
  Status SyncFlush();
  // Rule 9, a checkpoint's step: flushes the backing device if a provisional
  // insert made so far is not covered by a completed flush. Not on a reactor.
  Status FlushForCheckpoint();

  // Rule 9: whether every client write issued so far is durable on the
  // backing device, so a clean copy of what it holds now is durable too.
  bool CleanCopyDurable() const;
  // Rule 9's insert of a clean copy: a write-through write's (`durable`:
  // the backing write was FUA), or a fill's (InsertIfUnchanged).
  // Index calls: on a serving reactor either may return WouldBlock having
  // changed nothing (a node not in memory), so engines make them through
  // CallIndex (cache/index_call.h). A pass that parked still counted its
  // provisional insert: at most one needless backing flush at a checkpoint.
  Status InsertClean(const Extent& e, bool durable);
  Status InsertFill(const Extent& e, uint64_t since, bool* inserted);

 private:
  // What a backing flush covers, sampled before it is issued.
  struct FlushMark {
    uint64_t seq;          // the last journal entry written
    uint64_t provisional;  // provisional inserts made
    uint64_t completed;    // client writes completed
    bool quiet;            // and none in flight: all issued ones completed
  };
  FlushMark Mark() const;
  // The flush issued after `m` completed: advance the counts, record it.
  void Flushed(const FlushMark& m);
  bool Provisional(bool durable);  // counts it when it is
  static void AdvanceTo(std::atomic<uint64_t>& a, uint64_t v);

  const std::string spec_;
  CacheSet* const set_;
  const uint32_t dev_;
  BlockDevice* const backing_;
  // Client writes issued and completed; `flushed_`: how many had completed
  // when the last completed flush was issued (rule 8); `quiet_flushed_`:
  // the same, of flushes issued with none in flight (rule 9).
  std::atomic<uint64_t> issued_{1}, completed_{1}, flushed_{0}, quiet_flushed_{0};
  // Provisional inserts made, and how many a completed flush covers.
  std::atomic<uint64_t> provisional_{0}, provisional_flushed_{0};
  std::atomic<uint64_t> recorded_seq_{0};  // the last entry a journaled record covers
};

}  // namespace ubcache
