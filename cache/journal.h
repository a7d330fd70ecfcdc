// SPDX-License-Identifier: Apache-2.0
// Journal: the cache set's journal on the cache device — the superblock's
// journal buckets, written from their start as a chain of records, each a
// whole number of blocks (doc/format.md, "Journal records"). Block 0 is a
// start record carrying a random nonce; then one record per Append, each of
// a kind:
//   kIndex       one extent-index journal entry (btree/journal_format.h),
//                through BucketNodeStore's NodeStore journal calls;
//   kBucketGens  bucket generations bumped by reclaim (cache/bucket_allocator.h),
//                written before those buckets are reused;
//   kTable       the bucket table of a checkpoint (cache/bucket_table.h): the
//                first record of the journal that checkpoint starts.
// A record is valid when its checksum holds and it carries the set, the
// nonce, the next index and the checksum of the record before it; reading
// stops at the first that is not, so a torn append, or a record left from an
// older journal, is never taken for part of this one. Reset writes a new
// start record (new nonce), optionally followed by records carried over.
// The journal is linear: an append that does not fit returns NoSpace, and
// the cache set checkpoints (which resets it).
//
// Ordering (bcache's journal write is PREFLUSH | FUA, and for the same
// reason): Append first flushes the cache device, then writes the record
// with FUA. Every cached data write that completed before Append was called
// is therefore on media before the record that may point at it, and the
// record is on media when Append returns.
//
// A soft append writes its record with neither: on return the device has
// it, so it survives a crash of this process, but a power cut may lose it
// or keep it while losing data it points at, until the next flush — a hard
// Append's PREFLUSH, or Sync. Read marks the records written soft; those
// after the last hard record are the ones a power cut may have left without
// their data (the index's checked inserts let replay tell, see
// btree/journal_format.h).
//
// Thread safety: every method, from any thread; one mutex serialises them.
// The I/O is synchronous, through the function given at construction
// (BucketNodeStore's own I/O thread).
// Lock order: mu_ is held across that I/O, which takes only its own
// completion's lock; callers may hold CacheSet::gen_mu_ and what is above
// it (cache_set.h), and nothing here calls back out.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <vector>

#include "backend/block_device.h"
#include "util/status.h"
#include "util/thread_annotations.h"

namespace ubcache {

class Journal {
 public:
  enum class Kind : uint16_t { kStart = 0, kIndex = 1, kBucketGens = 2, kTable = 3 };
  struct Options {
    uint32_t block_size = 4096;
    uint64_t offset = 0;  // bytes on the device
    uint64_t bytes = 0;
    uint64_t set_id = 0;  // stamped into every record
  };
  struct Record {
    Kind kind;
    std::vector<uint8_t> payload;
    bool soft = false;  // written by a soft append
  };
  using IoFn = std::function<Status(const IoRequest&)>;

  Journal(IoFn io, Options o) : io_(std::move(io)), o_(o), capacity_(o.bytes) {}

  // Reads the journal on the device and positions appends after its last
  // valid record. NotFound when there is no valid start record.
  Status Open() EXCLUDES(mu_);
  // Starts an empty journal (a new start record), then appends `carry`.
  Status Reset(const std::vector<Record>& carry = {}) EXCLUDES(mu_);
  // The same at another place on the device (`bytes` long), which becomes
  // this journal's area; or, with `scan`, opens the journal found there.
  Status SwitchTo(uint64_t offset, uint64_t bytes, const std::vector<Record>& carry, bool scan = false)
      EXCLUDES(mu_);
  uint64_t offset() const EXCLUDES(mu_);
  // Durable on return (see "Ordering" above); with `soft`, only written.
  Status Append(Kind kind, const uint8_t* data, size_t len, bool soft = false) EXCLUDES(mu_);
  // An asynchronous soft append, in two steps. BeginAsync claims the one
  // slot for a record in flight without waiting (false: the journal is busy
  // or closed; append another way). Then exactly one of: CancelAsync
  // (nothing to write), or AppendAsync, which places the record, writes it
  // through `submit` and calls `done` once it is on the device (as a soft
  // Append's return); on failure the record is taken back. Until then the
  // other methods wait. `done` runs exactly once: at once, with NoSpace or
  // InvalidArgument, when nothing could be submitted.
  using SubmitFn = std::function<void(const IoRequest&, Callback<void(Status)>)>;
  bool BeginAsync() EXCLUDES(mu_);
  void CancelAsync() EXCLUDES(mu_);
  void AppendAsync(Kind kind, const uint8_t* data, size_t len, const SubmitFn& submit,
                   Callback<void(Status)> done) EXCLUDES(mu_);
  // Flushes the device if a soft append (or a reopen) may have left records
  // not yet durable: afterwards every record appended so far is.
  Status Sync() EXCLUDES(mu_);
  // Every valid record since the start record, as on the device now.
  Status Read(std::vector<Record>* out) EXCLUDES(mu_);
  // Keeps the records before `keep` and, if `partial` is given, replaces
  // record `keep` with one of the same kind holding `partial`; everything
  // after is dropped durably (it never chains on again).
  Status Truncate(size_t keep, const std::vector<uint8_t>* partial) EXCLUDES(mu_);

  // Both without mu_ (CacheSet::EndSoftCommit asks them on a serving
  // reactor, while another thread may hold mu_ across a record write).
  uint64_t capacity() const { return capacity_.load(std::memory_order_relaxed); }
  uint64_t used() const { return used_.load(std::memory_order_relaxed); }  // start record included
  bool open() const EXCLUDES(mu_);

 private:
  struct Placed {  // one valid record: where it is
    uint64_t pos;
    uint64_t blocks;
    uint64_t csum;
  };
  Status WriteRecord(uint64_t pos, Kind kind, uint64_t index, uint64_t prev_csum,
                     const uint8_t* payload, size_t len, bool soft, uint64_t* csum, uint64_t* blocks)
      REQUIRES(mu_);
  Status Scan(std::vector<Record>* out) REQUIRES(mu_);
  Status AppendLocked(Kind kind, const uint8_t* data, size_t len, bool soft) REQUIRES(mu_);
  Status ResetLocked(const std::vector<Record>& carry) REQUIRES(mu_);
  // Every method but the asynchronous ones starts here: the record in
  // flight, if any, is on the device (or taken back) first.
  void WaitAsyncLocked() REQUIRES(mu_);
  // NoSpace unless a record of `len` payload bytes (`bytes` on the device)
  // fits at `pos`.
  Status FitsLocked(uint64_t pos, uint64_t bytes, size_t len) const REQUIRES(mu_);
  // Fills p (`bytes`, whole blocks) with the record; returns its checksum.
  uint64_t EncodeRecord(uint8_t* p, uint64_t bytes, Kind kind, uint64_t index, uint64_t prev_csum,
                        const uint8_t* payload, size_t len, bool soft) REQUIRES(mu_);

  const IoFn io_;
  Options o_;  // offset and bytes change only under mu_ (SwitchTo)
  mutable Mutex mu_;
  bool open_ GUARDED_BY(mu_) = false;
  uint64_t nonce_ GUARDED_BY(mu_) = 0;
  uint64_t tail_ GUARDED_BY(mu_) = 0;        // journal byte of the next record
  std::atomic<uint64_t> capacity_;            // o_.bytes, for capacity() without mu_
  std::atomic<uint64_t> used_{0};             // tail_, for used() without mu_
  void SetTailLocked(uint64_t tail) REQUIRES(mu_) {
    tail_ = tail;
    used_.store(tail, std::memory_order_relaxed);
  }
  uint64_t start_csum_ GUARDED_BY(mu_) = 0;  // csum of the start record
  bool unflushed_ GUARDED_BY(mu_) = false;   // a record may not be durable yet
  std::vector<Placed> placed_ GUARDED_BY(mu_);  // records after the start record
  bool async_ GUARDED_BY(mu_) = false;          // a record in flight (BeginAsync)
  CondVar async_cv_;                             // async_ cleared
};

}  // namespace ubcache
