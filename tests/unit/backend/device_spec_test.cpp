// SPDX-License-Identifier: Apache-2.0
// OpenDevice(): the spec grammar, and errors that name the spec.
#include <catch2/catch.hpp>

#include <string>
#include <utility>
#include <vector>

#include "backend/block_device.h"
#include "backend/fault_device.h"
#include "backend/model_device.h"
#include "backend/rbd_device.h"
#include "backend/uring_device.h"
#include "device_test_support.h"

using namespace ubcache;
using namespace ubcache::test;

namespace {

Status OpenError(const std::string& spec) {
  auto d = OpenDevice(spec);
  if (d.ok()) return Status::OK();
  return d.status();
}

}  // namespace

TEST_CASE("an unknown scheme is an error that names the spec and lists the schemes") {
  auto reactor = BoundReactor();
  Status st = OpenError("bogus:foo");
  CHECK(st.IsInvalidArgument());
  CHECK_THAT(st.message(), Catch::Contains("bogus:foo"));
  CHECK_THAT(st.message(), Catch::Contains("unknown scheme"));
  CHECK_THAT(st.message(), Catch::Contains("mem:"));
}

TEST_CASE("a missing file is NotFound and the message names the spec") {
  auto reactor = BoundReactor();
  for (std::string spec : {"/var/tmp/ubcache-no-such-file-8c1f", "file:/var/tmp/ubcache-no-such-file-8c1f",
                           "sas:/var/tmp/ubcache-no-such-file-8c1f"}) {
    INFO(spec);
    Status st = OpenError(spec);
    CHECK(st.IsNotFound());
    CHECK(st.ToErrno() == ENOENT);
    CHECK_THAT(st.message(), Catch::Contains(spec));
  }
}

TEST_CASE("a bad mem size is an error that names the spec") {
  auto reactor = BoundReactor();
  for (std::string spec : {"mem:xyz", "mem:", "mem:0", "mem:1000", "mem:-1M", "fault:mem:xyz"}) {
    INFO(spec);
    Status st = OpenError(spec);
    CHECK(st.IsInvalidArgument());
    CHECK_THAT(st.message(), Catch::Contains(spec));
  }
  CHECK_THAT(OpenError("mem:xyz").message(), Catch::Contains("bad size"));
}

TEST_CASE("an unreachable NBD server is an error that names the spec") {
  auto reactor = BoundReactor();
  std::string spec = "nbd:nbd+unix:///?socket=/nonexistent";
  Status st = OpenError(spec);
  CHECK_FALSE(st.ok());
  CHECK_THAT(st.message(), Catch::Contains(spec));
  CHECK_THAT(st.message(), Catch::Contains("connect"));
  Status empty = OpenError("nbd:");
  CHECK(empty.IsInvalidArgument());
  CHECK_THAT(empty.message(), Catch::Contains("URI"));
}

TEST_CASE("other malformed specs are errors that name the spec") {
  auto reactor = BoundReactor();
  for (std::string spec : {"", "mem,x=1:1M", "file,x=1:/var/tmp/x", "nbd,x=1:nbd://localhost",
                           "fault,eio=1:mem:1M", "fault:bogus:1M", "sas:", "/var/tmp"}) {
    INFO("'" << spec << "'");
    Status st = OpenError(spec);
    CHECK_FALSE(st.ok());
    CHECK_THAT(st.message(), Catch::Contains("'" + spec + "'"));
  }
}

TEST_CASE("mem:SIZE opens RAM of that size with 512-byte blocks") {
  auto reactor = BoundReactor();
  auto d = OpenDevice("mem:1.5M");
  REQUIRE(d.ok());
  CHECK((*d)->size() == 3 << 19);
  CHECK((*d)->logical_block_size() == 512);
  CHECK_FALSE((*d)->read_only());
  CHECK((*d)->spec() == "mem:1.5M");
}

TEST_CASE("a path and file:PATH open the file through io_uring with O_DIRECT") {
  auto reactor = BoundReactor();
  TempFile f((4 << 20) + 100);  // a partial last block is not addressable
  for (std::string spec : {f.path(), "file:" + f.path()}) {
    INFO(spec);
    auto d = OpenDevice(spec);
    REQUIRE(d.ok());
    auto* u = dynamic_cast<UringDevice*>(d->get());
    REQUIRE(u != nullptr);
    CHECK(u->direct());
    CHECK_FALSE(u->is_block_device());
    CHECK(u->size() == 4 << 20);
    CHECK(u->size() % u->logical_block_size() == 0);
    CHECK(u->spec() == spec);
  }
}

TEST_CASE("wrappers nest: fault over sas over mem") {
  auto reactor = BoundReactor();
  auto d = OpenDevice("fault,eio=0+4k,ops=r,latency_us=7,drop_unflushed=1,seed=3:sas:mem:2M");
  REQUIRE(d.ok());
  auto* f = dynamic_cast<FaultDevice*>(d->get());
  REQUIRE(f != nullptr);
  FaultConfig c = f->config();
  REQUIRE(c.eio_ranges.size() == 1);
  CHECK(c.eio_ranges[0].len == 4096);
  CHECK(c.eio_reads);
  CHECK_FALSE(c.eio_writes);
  CHECK(c.latency_us == 7);
  CHECK(c.drop_unflushed);
  CHECK(c.seed == 3);
  CHECK(f->size() == 2 << 20);
  CHECK_THAT(f->Describe(), Catch::Contains("spindle model"));
  CHECK_THAT(f->Describe(), Catch::Contains("RAM"));
}

TEST_CASE("fault,tear_unflushed=1,seed=N parses, alone and with the other fault options") {
  auto reactor = BoundReactor();
  for (std::string spec :
       {"fault,tear_unflushed=1,seed=5:mem:1M",
        "fault,eio=0+4k,eio_p=0.01,latency_us=3,drop_unflushed=1,tear_unflushed=1,seed=5:"
        "sas:mem:2M"}) {
    INFO(spec);
    auto d = OpenDevice(spec);
    REQUIRE(d.ok());
    auto* f = dynamic_cast<FaultDevice*>(d->get());
    REQUIRE(f != nullptr);
    CHECK(f->config().tear_unflushed);
    CHECK(f->config().seed == 5);
  }
}

TEST_CASE("the spec help mentions every scheme") {
  std::string help = DeviceSpecHelp();
  for (const char* s :
       {"file:", "mem:", "nbd:", "rbd:", "rbd,conf=", "sas:", "hdd,", "fault,", "drop_unflushed", "tear_unflushed"})
    CHECK_THAT(help, Catch::Contains(s));
}

TEST_CASE("rbd specs: [POOL/]IMAGE and the wrapper's options") {
  auto plain = ParseRbdSpec({}, "disk");
  REQUIRE(plain.ok());
  CHECK(plain->pool == "rbd");
  CHECK(plain->image == "disk");
  CHECK(plain->conf.empty());
  CHECK(plain->timeout_s == 30);
  auto full = ParseRbdSpec({"conf=/etc/ceph/ceph.conf", "id=client.ubcache", "cluster=prod", "keyring=/k", "timeout=5"},
                           "vms/disk-1");
  REQUIRE(full.ok());
  CHECK(full->pool == "vms");
  CHECK(full->image == "disk-1");
  CHECK(full->conf == "/etc/ceph/ceph.conf");
  CHECK(full->id == "ubcache");  // "client." is optional
  CHECK(full->cluster == "prod");
  CHECK(full->keyring == "/k");
  CHECK(full->timeout_s == 5);
  for (auto [opts, rest] : std::vector<std::pair<std::vector<std::string>, std::string>>{
           {{}, ""}, {{}, "/disk"}, {{}, "pool/"}, {{}, "a/b/c"}, {{}, "rbd/disk@snap"}, {{"conf"}, "disk"},
           {{"conf="}, "disk"}, {{"bogus=1"}, "disk"}, {{"timeout=0"}, "disk"}, {{"timeout=x"}, "disk"}}) {
    INFO(rest);
    CHECK(ParseRbdSpec(opts, rest).status().IsInvalidArgument());
  }
}
