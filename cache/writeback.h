// SPDX-License-Identifier: Apache-2.0
// Writeback: the thread that writes one cached device's dirty data back to
// its backing device, as bcache's writeback.c does, and owns the backing
// superblock's dirty/clean transitions.
//
// A pass takes the dirty stripes after a cursor in backing-offset order
// (ExtentIndex::DirtyStripes), looks their dirty extents up, coalesces
// contiguous ones, reads them from the cache device and writes them to the
// backing device with a bounded number in flight. Ordering, each rule a bug
// some cache shipped:
//  - The range of each write is registered (CachedDevice's writeback
//    ranges) BEFORE its extents are looked up, and a foreground write or
//    discard that goes to the backing device waits for a registered range
//    it overlaps. So a newer foreground write is never overtaken on the
//    backing device by writeback's older copy.
//  - The journal is committed before a batch's backing writes: the backing
//    device never holds data whose index entry a crash could take back.
//  - The backing device is flushed after writes complete and BEFORE the
//    index marks them clean (about once a second during a pass, and at its
//    end): a power cut never finds data marked clean that the backing
//    device had only in its volatile cache.
//  - MarkClean only cleans the parts still mapping to the data written, so
//    a range rewritten meanwhile stays dirty (its newer copy is written back
//    later).
//  - A backing write error keeps the extent dirty; it is counted, and the
//    next pass retries it after a backoff.
// Rate: bcache's PI controller (UpdateRate), every
// writeback_rate_update_seconds: target = writeback_percent of the cache,
// proportional = (dirty - target) / p_term_inverse, integral accumulated
// over (dirty - target) / i_term_inverse, a fragmentation term when many
// buckets are partly dirty, clamped to [writeback_rate_minimum, max]. Full
// speed when no foreground request arrived for kIdleSeconds, while a ctl
// flush drains, and while writes are being written through because dirty
// data has filled the cache to cutoff_writeback (in the last
// kCutoffWindowNs) or the cache in use is within kCutoffMargin points of
// it: bcache keeps its PI rate there, so a write burst larger than the
// cutoff went to the spindle as random writethrough while the dirty data
// in its way left at a few percent of the spindle's speed. Foreground
// reads of the backing device go first: while one was seen in the last
// kReaderWindowNs, one write of at most kReaderChunk at a time, each
// followed by a pause of kReaderYield times its latency, so writeback
// holds the spindle about 1/(1 + kReaderYield) of the time or less (a ctl
// flush does not yield).
//
// Superblock: MarkDirty when a writeback-mode write finds the backing
// superblock not yet dirty (the write waits for it); MarkClean once nothing
// is dirty or in flight and the backing device has been flushed (the
// handshake: cache/dirty_handshake.h).
//
// The device is reached only through the pieces in Writeback::Parts (its
// RangeGuard, DirtyHandshake, DeviceActivity, ...) and the WritebackHost
// interface for what is the device's own (fence, detach).
//
// Thread safety: the thread owns its Reactor and every field not marked
// otherwise; Kick/Drain/RateDebug from any thread.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "backend/reactor.h"
#include "util/status.h"

namespace ubcache {

class BackingDurability;

class BackingSuper;
class BlockDevice;
struct Extent;
class CacheSet;
class DeviceActivity;
class DirtyHandshake;
class EpochClock;
class OrderedGate;
class WriteEpoch;
class RangeGuard;
class ServiceTime;

// What the writeback thread asks of the device it writes back.
class WritebackHost {
 public:
  virtual bool fenced() const = 0;
  virtual std::string fence_reason() const = 0;
  virtual bool attached() const = 0;
  // Client-visible bytes: grows while the thread runs (CachedDevice::Grow),
  // so a pass reads it when it collects its runs.
  virtual uint64_t client_size() const = 0;
  // Drops the device's extents and serves it from the backing device alone.
  virtual Status Detach() = 0;

 protected:
  ~WritebackHost() = default;
};

class Writeback {
 public:
  static constexpr uint64_t kIdleSeconds = 3;
  // ... and while the cache in use is within this many points of cutoff_writeback.
  static constexpr unsigned kCutoffMargin = 5;
  static constexpr uint64_t kReaderWindowNs = 100'000'000;  // 100 ms
  static constexpr uint64_t kMaxRun = 1 << 20;               // bytes per backing write
  static constexpr size_t kStripesPerPass = 64;
  static constexpr uint64_t kMaxBatchBytes = 4 << 20;  // looked up and read from the cache per pass
  static constexpr uint64_t kCleanIntervalNs = 1'000'000'000;  // flush + mark clean during a pass
  // While a foreground read of the backing device was seen in the last
  // kReaderWindowNs: one write of at most kReaderChunk in flight, then a
  // pause of kReaderYield times its latency.
  static constexpr uint64_t kReaderChunk = 256 << 10;
  static constexpr uint64_t kReaderYield = 10;

  // The device's pieces the thread works with; all outlive it.
  struct Parts {
    std::string spec;
    CacheSet* set;
    uint32_t dev;  // the index's device number
    BlockDevice* backing;
    BackingSuper* super;
    RangeGuard* ranges;
    DirtyHandshake* handshake;
    const DeviceActivity* activity;
    ServiceTime* backing_time;  // fed with the thread's backing writes
    WritebackHost* host;
    // The backing flushes go through it: they count for rules 8 and 9.
    BackingDurability* durability;
    // Writes waiting for writeback to reach their epoch (rule 14): told of
    // every pass, and they keep the thread running at full speed.
    OrderedGate* ordered;
    // The device's epochs and when they began (cache/epoch_clock.h): the
    // lag, and the backing superblock's consistent_as_of (rule 16).
    const WriteEpoch* epoch;
    EpochClock* clock;
  };
  explicit Writeback(Parts parts);
  ~Writeback();  // stops the thread; dirty data stays dirty
  void Start();
  void Kick();
  // ctl flush: writes everything back at full speed (even while
  // writeback_running is 0) until nothing is dirty and the backing
  // superblock says clean; `progress` gets a line about once a second.
  // Stops early (the dirty data is written back at the usual pace) once
  // `cancelled` says so: the client went away, or the daemon stops.
  Status Drain(const std::function<void(const std::string&)>& progress,
               const std::function<bool()>& cancelled = nullptr);

  struct RateDebug {
    uint64_t rate, dirty, target;
    int64_t proportional, integral, fragment, change;
    uint64_t next_io_ms;
    bool lag_over_target;  // twice writeback_lag_target passed: full speed, whatever the rate says
  };
  RateDebug rate_debug() const;
  uint64_t errors() const { return errors_.load(std::memory_order_relaxed); }
  uint64_t written_bytes() const { return written_.load(std::memory_order_relaxed); }

  // A dirty extent read for writeback, and a backing write of contiguous
  // ones (defined in writeback.cpp).
  struct Piece;
  struct Write;

 private:
  void Loop();
  // One batch of dirty stripes; returns the bytes written back (0: none
  // found). Its stages, in order, over one PassState (bcache's read_dirty
  // -> write_dirty -> write_dirty_finish):
  struct PassState;
  struct Run {  // a claimed stripe of a pass (start == end: not taken)
    uint64_t start, end;
  };
  uint64_t Pass(bool full_speed);
  // Claims the next dirty stripes and looks their dirty extents up (pinned);
  // false when nothing is dirty.
  bool CollectDirty(PassState& s);
  // writeback_order flush (writeback_epochs.cpp): the same, for the oldest
  // epoch's dirty extents and kept versions only (rule 13).
  bool CollectEpoch(PassState& s);
  // One run per stripe (clipped to the client size), claimed against the
  // foreground (RangeGuard::ClaimForWriteback) and then looked up by
  // `take`, which returns the bytes it took, until kMaxBatchBytes; a run not
  // claimed or past the batch is left empty (start == end). Returns the
  // batch's bytes.
  uint64_t ClaimRuns(PassState& s, const std::vector<uint64_t>& stripes,
                     const std::function<uint64_t(const Run&)>& take);
  // Pins e's bucket and adds it to the pass; its bytes (0: the bucket was
  // reused, so e was rewritten or written back — a stale pointer, dropped).
  uint64_t TakePiece(PassState& s, const Extent& e, bool kept);
  // Rule 3's first half; false (everything released) when the commit failed.
  bool CommitBeforeWriteback(PassState& s);
  // Coalesces the pieces into backing writes and reads them from the cache.
  void ReadDirty(PassState& s);
  // Issues the backing writes at the controller's pace, yielding to readers,
  // flushing and marking clean about once a second.
  void WriteDirty(PassState& s, bool full_speed);
  void SplitUnreadable(PassState& s, size_t i);
  void IssueChunk(PassState& s, Write* w, uint64_t chunk, bool yield, uint64_t now, uint64_t rate);
  // Rule 3's second half: flush the backing device, then mark clean.
  // Flush order: client writes that reached the backing device since its
  // last flush are made durable before the pass writes (rule 14).
  void FlushClientWrites(PassState& s);
  void FlushAndMarkClean(PassState& s);
  void UpdateRate(uint64_t now);
  void StateTransitions();
  // Rule 17 (cache/ordered_gate.h): suspends flush order when a write the
  // full cache turned away asks for it (the backing superblock's promise
  // cleared first, durably), and resumes it once the cache has room.
  void SuspendOrResumeOrder(uint64_t now);
  // About once a second: forgets the stamps of epochs written back, checks
  // the lag against writeback_lag_target, and records consistent_as_of in
  // the backing superblock (rule 16).
  void NoteProgress(uint64_t now);
  // The oldest dirty epoch and when it began (unix ms; now if none), with
  // the stamps before it forgotten and lag_over_ set from
  // writeback_lag_target.
  struct Lag {
    std::optional<uint64_t> oldest;
    uint64_t as_of_ms = 0;
  };
  Lag MeasureLag(uint64_t now);
  bool Sleep(uint64_t ns);  // false when stopping

  const Parts d_;
  std::unique_ptr<Reactor> reactor_;
  std::thread thread_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;     // under mu_
  bool kicked_ = false;   // under mu_
  std::atomic<int> draining_{0};
  uint64_t cursor_ = 0;   // next stripe
  uint64_t stuck_logged_ns_ = 0;  // CollectEpoch's last "none taken" line
  uint64_t next_io_ = 0;  // ns: when the rate allows the next write
  uint64_t last_update_ = 0;
  uint64_t backoff_ns_ = 0;
  double integral_ = 0;
  bool fence_recorded_ = false;
  uint64_t last_progress_ = 0;  // ns: NoteProgress's last run
  uint64_t last_lag_ = 0;       // ns: MeasureLag's last run
  // Epochs up to this one may have reached the backing device in address
  // order (writeback_order lba, now or before a restart): no time is
  // promised until they are all written back (rule 16).
  uint64_t unordered_through_ = 0;
  uint64_t seen_lba_switches_ = 0;  // BackingSuper::lba_switches as last handled
  uint64_t last_suspend_try_ = 0;   // SuspendOrResumeOrder's superblock write, at most once a second
  uint64_t recorded_as_of_ = 0;  // unix s: the last consistent_as_of written
  std::atomic<bool> lag_over_{false};  // past twice writeback_lag_target: full speed
  std::atomic<uint64_t> lag_ms_{0};    // MeasureLag's last reading, for UpdateRate
  std::atomic<uint64_t> errors_{0}, written_{0};
  // For RateDebug (written by the thread).
  std::atomic<uint64_t> dbg_dirty_{0}, dbg_target_{0}, dbg_next_io_{0};
  std::atomic<int64_t> dbg_p_{0}, dbg_i_{0}, dbg_f_{0}, dbg_change_{0};
};

}  // namespace ubcache
