// SPDX-License-Identifier: Apache-2.0
// UblkQueue: one hardware queue of a ublk device, served by one thread.
//
// The thread owns one Reactor. Its io_uring carries both the ublk commands
// for the queue's tags (FETCH_REQ once, then COMMIT_AND_FETCH_REQ after each
// request) and the backend I/O those requests turn into, so a request never
// leaves the thread. Requests are read from the descriptor array the driver
// maps from /dev/ublkcN and turned into BlockDevice calls; the frontend holds
// no policy (the device is the cache or a plain backing device).
//
// Data moves in one of two ways, chosen when the device was added:
//  - USER_COPY: pread()/pwrite() on /dev/ublkcN copy between the request's
//    pages and the tag's buffer only when the request is handled;
//  - otherwise each FETCH/COMMIT names the tag's buffer and the driver copies
//    write data into it before the fetch completes, read data out of it at
//    commit.
//
// A tag ends when the driver answers its fetch with ABORT (STOP_DEV, or the
// ring going away). The queue is drained when every tag has ended and no
// backend request is in flight.
//
// Hold() is the other way to stop, for a hand-over to the next server: the
// requests in flight finish and are committed, but every request fetched from
// then on is held — never turned into backend I/O, never answered. When the
// thread stops and its ring closes, the driver (USER_RECOVERY_REISSUE) takes
// the held requests back and reissues them to the server that recovers the
// device.
//
// Thread safety: Start()/Post()/Stop()/drained() from any thread; the rest
// runs on the queue's thread.
#pragma once

#include <atomic>
#include <future>
#include <memory>
#include <thread>
#include <vector>

#include "backend/block_device.h"
#include "backend/reactor.h"
#include "frontend/ublk_uapi.h"
#include "util/aligned_buffer.h"

namespace ubcache {

struct UblkQueueConfig {
  BlockDevice* device = nullptr;
  int char_fd = -1;  // /dev/ublkcN, shared by the device's queues
  uint16_t q_id = 0;
  uint16_t depth = 0;
  uint32_t max_io_bytes = 0;
  bool user_copy = false;
};

class UblkQueue {
 public:
  explicit UblkQueue(UblkQueueConfig config);
  ~UblkQueue();  // Stop()s and joins
  UblkQueue(const UblkQueue&) = delete;
  UblkQueue& operator=(const UblkQueue&) = delete;

  // Starts the thread; returns once every tag's FETCH_REQ is submitted, so
  // START_DEV / END_USER_RECOVERY can be issued next.
  Status Start();
  // True once every tag has ended and the backend is idle.
  bool drained() const { return drained_.load(std::memory_order_acquire); }
  // True while no backend request is in flight (the thread may be stopped
  // without losing a completion).
  bool backend_idle() const { return backend_idle_.load(std::memory_order_acquire); }
  // True once the driver refused one of our commands (not an ABORT): a
  // device waiting for this queue's fetches would wait forever.
  bool failed() const { return failed_.load(std::memory_order_acquire); }
  Reactor* reactor() const { return reactor_; }
  // Stops handing new requests to the device (see above); quiesced() once
  // the thread saw it and no backend request is in flight.
  void Hold();
  bool quiesced() const { return quiesced_.load(std::memory_order_acquire); }
  // Requests held since Hold() (read after quiesced(); for the log).
  unsigned held() const { return held_.load(std::memory_order_acquire); }
  // Ends the thread (after drained(), or to abandon the queue).
  void Stop();

 private:
  struct Tag final : IoCompletion {
    UblkQueue* queue = nullptr;
    uint16_t tag = 0;
    AlignedBuffer buf;
    void Complete(int32_t res, uint32_t) override { queue->OnCommand(this, res); }
  };

  void ThreadMain(std::promise<Status>* started);
  void SubmitCommand(Tag* t, uint32_t op, int32_t result);
  void OnCommand(Tag* t, int32_t res);
  void Handle(Tag* t);
  void Commit(Tag* t, Status st, int32_t ok_result);
  void CheckDrained();

  UblkQueueConfig cfg_;
  std::thread thread_;
  Reactor* reactor_ = nullptr;  // owned by the thread
  const ublk::IoDesc* descs_ = nullptr;
  size_t descs_len_ = 0;
  std::vector<Tag> tags_;
  unsigned live_tags_ = 0;
  unsigned backend_inflight_ = 0;
  bool holding_ = false;  // the queue thread's copy of Hold()
  std::atomic<unsigned> held_{0};
  std::atomic<bool> quiesced_{false};
  std::atomic<bool> drained_{false};
  std::atomic<bool> backend_idle_{true};
  std::atomic<bool> failed_{false};
};

}  // namespace ubcache
