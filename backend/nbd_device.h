// SPDX-License-Identifier: Apache-2.0
// NbdDevice: a remote NBD export as a block device ("nbd:nbd+unix:///?socket=
// /run/x.sock", "nbd:nbd://10.0.0.5:10809/disk"), through libnbd's
// asynchronous API. This is how a ubcache cache fronts network storage.
//
// Each reactor thread gets its own connection (libnbd handle), opened on
// first use, whose socket is watched by io_uring poll requests on that
// reactor's ring; libnbd's state machine runs only on that thread. Requests
// therefore never cross threads. The connection made by Open() to learn the
// export's size is kept for the first reactor that asks.
//
// A flush goes to the calling thread's connection. With more than one
// reactor, that covers the other connections' writes only when the server
// advertises multi-conn; Open() logs a warning when it does not.
//
// Lifetime: destroy the device only when no reactor will run again with
// polls for it outstanding (i.e. after the reactors stop).
#pragma once

#include <array>
#include <memory>
#include <string>

#include "backend/block_device.h"
#include "util/thread_annotations.h"

struct nbd_handle;

namespace ubcache {

class NbdDevice final : public BlockDevice {
 public:
  // libnbd handles requests up to 64 MiB; servers commonly accept 32 MiB.
  static constexpr uint64_t kMaxRequest = 32u << 20;

  static Result<std::unique_ptr<NbdDevice>> Open(const std::string& spec, const std::string& uri,
                                                 const OpenOptions& opts);
  ~NbdDevice() override;
  std::string Describe() const override;

 protected:
  void DoSubmit(const IoRequest& req, IoDone done) override;

 private:
  class Conn;
  struct Caps {
    bool flush, fua, trim, zero, multi_conn;
  };
  NbdDevice(std::string spec, std::string uri, uint64_t size, uint32_t block_size, bool read_only,
            Caps caps, nbd_handle* first);
  Result<Conn*> GetConn();
  static Result<nbd_handle*> Connect(const std::string& spec, const std::string& uri,
                                     bool read_only);

  std::string uri_;
  Caps caps_;
  Mutex spare_mu_;
  nbd_handle* spare_ GUARDED_BY(spare_mu_);
  // One slot per reactor id; a slot is touched only by its own reactor.
  std::array<std::unique_ptr<Conn>, Reactor::kMaxReactors> conns_;
};

}  // namespace ubcache
