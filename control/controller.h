// SPDX-License-Identifier: Apache-2.0
// Controller: runs control requests against the daemon's exports — show,
// get/set through the attribute table, stats, priority-stats, dirty-data,
// writeback-rate-debug, clear-stats, trigger-gc, flush, detach, attach,
// metrics, stop and resize. Transport-free, so unit tests call Execute()
// directly.
//
// Thread safety: commands that only read (show, get, stats, metrics, ...)
// may run on any thread, alongside one thread running the commands that
// change state or take long (RunsLong: set, flush, detach, attach,
// trigger-gc, resize). Those do their I/O (superblock writes, flush, GC)
// synchronously on the calling thread's Reactor, which must not be one
// that serves clients.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "control/attributes.h"
#include "control/protocol.h"

namespace ubcache::control {

class Controller {
 public:
  // `stop`: asks the daemon to stop as SIGTERM does (`delete_devices`: and
  // to delete its ublk devices); returns what will happen, for the reply.
  using StopHook = std::function<std::string(bool delete_devices)>;
  explicit Controller(std::vector<Target> targets, StopHook stop = nullptr)
      : targets_(std::move(targets)), stop_(std::move(stop)) {}

  // The body of the ok reply, or the error to send. `progress` receives
  // progress lines of long commands (flush, detach).
  // `cancelled` says when nobody waits for the answer any more (the client
  // went away, the daemon stops): a drain stops early.
  using Progress = std::function<void(const std::string&)>;
  using Cancelled = std::function<bool()>;
  Result<std::string> Execute(const Request& r, const Progress& progress, const Cancelled& cancelled = nullptr);
  // Commands that change state or may take long: the control server runs
  // them on its worker thread, one at a time, so that they never delay a
  // statistics read.
  static bool RunsLong(const Request& r);
  std::string Metrics() const;
  const std::vector<Target>& targets() const { return targets_; }

 private:
  Result<const Target*> Find(const std::string& device) const;
  std::string Show(const Target& t, bool json, std::optional<Group> only) const;
  Result<std::string> Flush(const Target& t, const Progress& progress, const Cancelled& cancelled);
  Result<std::string> Detach(const Target& t, const Progress& progress, const Cancelled& cancelled);
  Result<std::string> Attach(const Target& t, const std::string& cache);

  std::vector<Target> targets_;
  StopHook stop_;
};

}  // namespace ubcache::control
