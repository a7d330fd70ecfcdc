// SPDX-License-Identifier: Apache-2.0
// OpenDevice(): the device spec grammar, in one place.
//
//   spec    := wrapper ":" spec | "mem:" SIZE | "nbd:" URI | rbd ":" [POOL "/"] IMAGE
//            | "file:" PATH | PATH
//   wrapper := name ("," key "=" value)*     name: sas, hdd, fault
//   rbd     := "rbd" ("," key "=" value)*    key: conf, id, cluster, keyring, timeout
//
// A scheme name containing '/' is always a path, so "/mnt/a:b" opens a
// file (options may hold paths: "rbd,conf=/etc/ceph/ceph.conf:rbd/disk").
#include <sys/stat.h>

#include <string>
#include <vector>

#include "backend/block_device.h"
#include "backend/fault_device.h"
#include "backend/mem_device.h"
#include "backend/model_device.h"
#include "backend/nbd_device.h"
#include "backend/rbd_device.h"
#include "backend/uring_device.h"
#include "util/size.h"

namespace ubcache {

namespace {

std::vector<std::string> SplitCommas(const std::string& s) {
  std::vector<std::string> out;
  size_t start = 0;
  while (true) {
    size_t comma = s.find(',', start);
    out.push_back(s.substr(start, comma - start));
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  return out;
}

Result<double> ParseDouble(const std::string& key, const std::string& val, double min, double max) {
  char* end = nullptr;
  double v = std::strtod(val.c_str(), &end);
  if (val.empty() || *end != '\0' || !(v >= min && v <= max))
    return Status::InvalidArgument("option " + key + "=" + val + ": expected a number in [" +
                                   std::to_string(min) + ", " + std::to_string(max) + "]");
  return v;
}

Result<SpindleParams> ParseSpindle(const std::string& name, const std::vector<std::string>& opts) {
  SpindleParams p;  // defaults are the SAS spindle of DESIGN.md §7
  if (name == "sas" && !opts.empty())
    return Status::InvalidArgument("sas: takes no options; use hdd,rpm=...,seek_ms=...: instead");
  for (const std::string& opt : opts) {
    auto eq = opt.find('=');
    if (eq == std::string::npos) return Status::InvalidArgument("option '" + opt + "' needs =VALUE");
    std::string key = opt.substr(0, eq), val = opt.substr(eq + 1);
    if (key == "rpm") {
      UB_ASSIGN_OR_RETURN(p.rpm, ParseDouble(key, val, 1000, 30000));
    } else if (key == "seek_ms") {
      UB_ASSIGN_OR_RETURN(p.avg_seek_ms, ParseDouble(key, val, 0, 100));
    } else if (key == "mbps") {
      UB_ASSIGN_OR_RETURN(p.mbps, ParseDouble(key, val, 1, 100000));
    } else if (key == "seed") {
      UB_ASSIGN_OR_RETURN(p.seed, ParseUint(val, 0, UINT64_MAX, "option seed"));
    } else {
      return Status::InvalidArgument("unknown hdd option '" + key + "' (rpm, seek_ms, mbps, seed)");
    }
  }
  return p;
}

Result<std::unique_ptr<BlockDevice>> Open(const std::string& spec, const OpenOptions& opts) {
  auto colon = spec.find(':');
  std::string head = colon == std::string::npos ? spec : spec.substr(0, colon);
  std::string rest = colon == std::string::npos ? "" : spec.substr(colon + 1);
  std::vector<std::string> parts = SplitCommas(head);
  const std::string& name = parts[0];
  std::vector<std::string> options(parts.begin() + 1, parts.end());

  if (colon == std::string::npos || name.find('/') != std::string::npos) {
    if (spec.empty()) return Status::InvalidArgument("empty device spec");
    UB_ASSIGN_OR_RETURN(auto dev, UringDevice::Open(spec, spec, opts));
    return std::unique_ptr<BlockDevice>(std::move(dev));
  }
  auto no_options = [&]() -> Status {
    if (!options.empty()) return Status::InvalidArgument(name + ": takes no options");
    return Status::OK();
  };
  if (name == "file") {
    UB_RETURN_IF_ERROR(no_options());
    UB_ASSIGN_OR_RETURN(auto dev, UringDevice::Open(spec, rest, opts));
    return std::unique_ptr<BlockDevice>(std::move(dev));
  }
  if (name == "mem") {
    UB_RETURN_IF_ERROR(no_options());
    UB_ASSIGN_OR_RETURN(uint64_t size, ParseSize(rest));
    UB_ASSIGN_OR_RETURN(auto dev, MemDevice::Create(spec, size));
    return std::unique_ptr<BlockDevice>(std::move(dev));
  }
  if (name == "nbd") {
    UB_RETURN_IF_ERROR(no_options());
    if (rest.empty()) return Status::InvalidArgument("nbd: needs a URI, e.g. nbd+unix:///?socket=/tmp/x.sock");
    UB_ASSIGN_OR_RETURN(auto dev, NbdDevice::Open(spec, rest, opts));
    return std::unique_ptr<BlockDevice>(std::move(dev));
  }
  if (name == "rbd") {
    UB_ASSIGN_OR_RETURN(RbdSpec rbd, ParseRbdSpec(options, rest));
    UB_ASSIGN_OR_RETURN(auto dev, RbdDevice::Open(spec, rbd, opts));
    return std::unique_ptr<BlockDevice>(std::move(dev));
  }
  if (name == "sas" || name == "hdd") {
    UB_ASSIGN_OR_RETURN(SpindleParams p, ParseSpindle(name, options));
    UB_ASSIGN_OR_RETURN(auto lower, Open(rest, opts));
    return std::unique_ptr<BlockDevice>(new ModelDevice(spec, std::move(lower), p));
  }
  if (name == "fault") {
    UB_ASSIGN_OR_RETURN(FaultConfig c, ParseFaultOptions(options));
    UB_ASSIGN_OR_RETURN(auto lower, Open(rest, opts));
    UB_RETURN_IF_ERROR(CheckFaultConfig(c, lower->logical_block_size()));
    return std::unique_ptr<BlockDevice>(new FaultDevice(spec, std::move(lower), std::move(c)));
  }
  return Status::InvalidArgument("unknown scheme '" + name +
                                 "' (PATH, file:, mem:, nbd:, rbd:, sas:, hdd,...:, fault,...:)");
}

}  // namespace

Result<std::unique_ptr<BlockDevice>> OpenDevice(std::string_view spec, const OpenOptions& opts) {
  std::string s(spec);
  auto dev = Open(s, opts);
  if (!dev.ok()) {
    const Status& st = dev.status();
    // Keep the code (a missing file stays NotFound) and name the whole spec once.
    std::string msg = "device '" + s + "': " + st.message();
    switch (st.code()) {
      case Status::Code::kNotFound: return Status::NotFound(msg);
      case Status::Code::kPermission: return Status::Permission(msg);
      case Status::Code::kNotSupported: return Status::NotSupported(msg);
      case Status::Code::kIoError: return Status::IoError(msg);
      default: return Status::InvalidArgument(msg);
    }
  }
  return dev;
}

const char* DeviceSpecHelp() {
  return R"(Device specs:
  PATH, file:PATH       a file or block device (io_uring, O_DIRECT)
  mem:SIZE              RAM, e.g. mem:1G
  nbd:URI               a remote NBD export, e.g. nbd:nbd+unix:///?socket=/tmp/x.sock
                        or nbd:nbd://127.0.0.1:10809/name; over TLS, e.g.
                        nbd:nbds://HOST/name?tls-certificates=DIR or
                        nbd:nbds+unix://USER@/?socket=S&tls-psk-file=F
  rbd:[POOL/]IMAGE      a Ceph RBD image through librbd (pool default: rbd), e.g.
                        rbd,conf=/etc/ceph/ceph.conf,id=ubcache,keyring=K,timeout=30:rbd/disk
                        (cluster=NAME too; timeout: seconds before a request to
                        an unreachable cluster or a stuck OSD fails with EIO)
  sas:SPEC              a 10k rpm SAS spindle (3.5 ms seek, 180 MB/s) modelled over SPEC
  hdd,rpm=R,seek_ms=S,mbps=M,seed=N:SPEC
                        a spindle model with your numbers
  fault,eio=OFF+LEN,eio_p=P,ops=r|w|rw,latency_us=N,drop_unflushed=1,tear_unflushed=1,seed=N:SPEC
                        error and latency injection over SPEC; tear_unflushed=1
                        loses a random half of unflushed 4 KiB sectors at a power cut
)";
}

}  // namespace ubcache
