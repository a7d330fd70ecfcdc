// SPDX-License-Identifier: Apache-2.0
#include "backend/fault_device.h"

#include <catch2/catch.hpp>

#include <algorithm>
#include <optional>
#include <string>
#include <vector>

#include "backend/mem_device.h"
#include "backend/sync_io.h"
#include "device_test_support.h"

using namespace ubcache;
using namespace ubcache::test;

namespace {

// A fault device opened from its spec, the way operators and tests use it.
struct Fault {
  std::unique_ptr<Reactor> reactor = BoundReactor();
  std::unique_ptr<BlockDevice> owner;
  FaultDevice* dev = nullptr;
  explicit Fault(const std::string& spec) {
    auto d = OpenDevice(spec);
    INFO(spec << ": " << d.status().ToString());
    REQUIRE(d.ok());
    owner = std::move(d).value();
    dev = dynamic_cast<FaultDevice*>(owner.get());
    REQUIRE(dev != nullptr);
  }
};

Status Read(BlockDevice& dev, uint64_t off, uint64_t len) {
  AlignedBuffer b(len);
  return SyncRead(dev, off, len, b.data());
}

Status Write(BlockDevice& dev, uint64_t off, uint64_t len, uint64_t seed = 1,
             uint32_t flags = 0) {
  AlignedBuffer b(len);
  FillPattern(b.data(), len, seed);
  return SyncWrite(dev, off, len, b.data(), flags);
}

// After a power cut, whether each kTearSector piece of [off, off + now.size())
// reads back as `now` (the torn write's data); every other piece must read
// `before`, whole.
std::vector<bool> SurvivingSectors(BlockDevice& dev, uint64_t off,
                                   const std::vector<uint8_t>& before,
                                   const std::vector<uint8_t>& now) {
  const std::vector<uint8_t> got = ReadBytes(dev, off, now.size());
  std::vector<bool> survived;
  const uint64_t end = off + now.size();
  for (uint64_t pos = off; pos < end;) {
    const uint64_t next = std::min(end, (pos / kTearSector + 1) * kTearSector);
    auto same = [&](const std::vector<uint8_t>& v) {
      return std::equal(got.begin() + (pos - off), got.begin() + (next - off),
                        v.begin() + (pos - off));
    };
    INFO("sector piece " << pos << "+" << next - pos);
    CHECK((same(now) || same(before)));
    survived.push_back(same(now));
    pos = next;
  }
  return survived;
}

}  // namespace

TEST_CASE("injected errors arrive as EIO on the configured range and not outside it") {
  Fault f("fault,eio=64k+8k:mem:1M");
  const uint64_t k = 1024;
  // Inside, and overlapping either edge.
  for (auto [off, len] : std::vector<std::pair<uint64_t, uint64_t>>{
           {64 * k, 4 * k}, {68 * k, 4 * k}, {60 * k, 8 * k}, {70 * k, 8 * k}, {0, 1024 * k}}) {
    INFO("read at " << off << "+" << len);
    Status st = Read(*f.dev, off, len);
    CHECK(st.IsIoError());
    CHECK(st.ToErrno() == EIO);
    CHECK_THAT(st.message(), Catch::Contains(f.dev->spec()));
  }
  CHECK(f.dev->injected_errors() == 5);
  // Adjacent but not touching.
  CHECK(Read(*f.dev, 60 * k, 4 * k).ok());
  CHECK(Read(*f.dev, 72 * k, 4 * k).ok());
  CHECK(Write(*f.dev, 72 * k, 4 * k).ok());
  CHECK(f.dev->injected_errors() == 5);
  // Writes, discards and write-zeroes into the range fail too (ops=rw is the default).
  CHECK(Write(*f.dev, 64 * k, 512).ToErrno() == EIO);
  CHECK(SyncIo(*f.dev, {IoOp::kDiscard, 0, 65 * k, 512, nullptr}).ToErrno() == EIO);
  CHECK(SyncIo(*f.dev, {IoOp::kWriteZeroes, 0, 71 * k, 512, nullptr}).ToErrno() == EIO);
  CHECK(f.dev->injected_errors() == 8);
}

TEST_CASE("a failed write leaves the data below untouched") {
  Fault f("fault:mem:1M");
  REQUIRE(Write(*f.dev, 4096, 4096, 1).ok());
  FaultConfig c;
  c.eio_ranges.push_back({4096, 4096});
  f.dev->SetConfig(c);
  CHECK(Write(*f.dev, 4096, 4096, 2).IsIoError());
  f.dev->SetConfig(FaultConfig{});
  CHECK(Diff(ReadBytes(*f.dev, 4096, 4096), Pattern(4096, 1)) == "");
}

TEST_CASE("ops=r injects errors into reads only") {
  Fault f("fault,eio=0+64k,ops=r:mem:1M");
  CHECK(Write(*f.dev, 0, 4096).ok());
  CHECK(SyncIo(*f.dev, {IoOp::kWriteZeroes, 0, 8192, 4096, nullptr}).ok());
  CHECK(SyncIo(*f.dev, {IoOp::kDiscard, 0, 16384, 4096, nullptr}).ok());
  CHECK(f.dev->injected_errors() == 0);
  Status st = Read(*f.dev, 0, 4096);
  CHECK(st.IsIoError());
  CHECK(st.ToErrno() == EIO);
  CHECK(f.dev->injected_errors() == 1);
}

TEST_CASE("ops=w injects errors into writes, discards and write-zeroes only") {
  Fault f("fault,eio=0+64k,ops=w:mem:1M");
  CHECK(Read(*f.dev, 0, 4096).ok());
  CHECK(Write(*f.dev, 0, 4096).IsIoError());
  CHECK(SyncIo(*f.dev, {IoOp::kWriteZeroes, 0, 8192, 4096, nullptr}).IsIoError());
  CHECK(SyncIo(*f.dev, {IoOp::kDiscard, 0, 16384, 4096, nullptr}).IsIoError());
  CHECK(f.dev->injected_errors() == 3);
}

TEST_CASE("eio_p=1 fails every request and eio_p=0 fails none") {
  {
    Fault f("fault,eio_p=1:mem:1M");
    for (int i = 0; i < 50; i++) {
      INFO(i);
      CHECK(Read(*f.dev, i * 4096ull, 4096).ToErrno() == EIO);
      CHECK(Write(*f.dev, i * 4096ull, 4096).ToErrno() == EIO);
    }
    CHECK(f.dev->injected_errors() == 100);
  }
  {
    Fault f("fault,eio_p=0:mem:1M");
    for (int i = 0; i < 50; i++) {
      INFO(i);
      CHECK(Write(*f.dev, i * 4096ull, 4096).ok());
      CHECK(Read(*f.dev, i * 4096ull, 4096).ok());
    }
    CHECK(f.dev->injected_errors() == 0);
  }
}

TEST_CASE("eio_p between 0 and 1 fails a share of requests, repeatably for a seed") {
  auto run = [](const std::string& spec) {
    Fault f(spec);
    std::vector<bool> failed;
    for (int i = 0; i < 400; i++) failed.push_back(!Read(*f.dev, 0, 512).ok());
    CHECK(f.dev->injected_errors() == static_cast<uint64_t>(std::count(failed.begin(), failed.end(), true)));
    return failed;
  };
  auto a = run("fault,eio_p=0.25,seed=42:mem:1M");
  auto b = run("fault,eio_p=0.25,seed=42:mem:1M");
  auto c = run("fault,eio_p=0.25,seed=43:mem:1M");
  auto n = std::count(a.begin(), a.end(), true);
  CHECK(n > 60);  // 100 expected; bounds are > 5 sigma wide
  CHECK(n < 140);
  CHECK(a == b);
  CHECK(a != c);
}

TEST_CASE("flush is not subject to EIO injection") {
  Fault f("fault,eio_p=1:mem:1M");
  CHECK(SyncFlush(*f.dev).ok());
  CHECK(f.dev->injected_errors() == 0);
}

TEST_CASE("SetConfig at run time switches the injected errors on and off") {
  Fault f("fault:mem:1M");
  CHECK(Read(*f.dev, 0, 4096).ok());
  CHECK(f.dev->config().eio_ranges.empty());

  FaultConfig c;
  c.eio_ranges.push_back({0, 4096});
  c.eio_writes = false;
  f.dev->SetConfig(c);
  CHECK(f.dev->config().eio_ranges.size() == 1);
  CHECK_FALSE(f.dev->config().eio_writes);
  CHECK(Read(*f.dev, 0, 4096).IsIoError());
  CHECK(Write(*f.dev, 0, 4096).ok());
  CHECK(Read(*f.dev, 4096, 4096).ok());

  c.eio_ranges = {{4096, 4096}};
  f.dev->SetConfig(c);
  CHECK(Read(*f.dev, 0, 4096).ok());
  CHECK(Read(*f.dev, 4096, 4096).IsIoError());

  f.dev->SetConfig(FaultConfig{});
  CHECK(Read(*f.dev, 4096, 4096).ok());
  CHECK(f.dev->injected_errors() == 2);
}

TEST_CASE("SetConfig from another thread takes effect for the next request") {
  Fault f("fault:mem:1M");
  CHECK(Read(*f.dev, 0, 4096).ok());
  std::thread t([dev = f.dev] {
    FaultConfig c;
    c.eio_probability = 1;
    dev->SetConfig(c);
  });
  t.join();
  CHECK(Read(*f.dev, 0, 4096).IsIoError());
}

TEST_CASE("latency_us delays completion by at least that long") {
  Fault f("fault,latency_us=20000:mem:1M");
  uint64_t start = NowNanos();
  CHECK(Read(*f.dev, 0, 4096).ok());
  CHECK(NowNanos() - start >= 20'000'000);
  // Injected errors are delayed too.
  FaultConfig c = f.dev->config();
  c.eio_probability = 1;
  f.dev->SetConfig(c);
  start = NowNanos();
  CHECK(Read(*f.dev, 0, 4096).IsIoError());
  CHECK(NowNanos() - start >= 20'000'000);
}

TEST_CASE("drop_unflushed: writes then power loss read back the old data") {
  Fault f("fault,drop_unflushed=1:mem:1M");
  auto old_data = Pattern(16384, 1);
  auto new_data = Pattern(16384, 2);
  REQUIRE(WriteBytes(*f.dev, 8192, old_data, kIoFua).ok());
  CHECK(f.dev->unflushed_bytes() == 0);
  REQUIRE(WriteBytes(*f.dev, 8192, new_data).ok());
  CHECK(f.dev->unflushed_bytes() == 16384);
  CHECK(Diff(ReadBytes(*f.dev, 8192, 16384), new_data) == "");  // reads see the cache
  f.dev->PowerLoss();
  CHECK(f.dev->unflushed_bytes() == 0);
  CHECK(Diff(ReadBytes(*f.dev, 8192, 16384), old_data) == "");
}

TEST_CASE("drop_unflushed: writes, flush, then power loss read back the new data") {
  Fault f("fault,drop_unflushed=1:mem:1M");
  auto old_data = Pattern(16384, 1);
  auto new_data = Pattern(16384, 2);
  REQUIRE(WriteBytes(*f.dev, 8192, old_data, kIoFua).ok());
  REQUIRE(WriteBytes(*f.dev, 8192, new_data).ok());
  REQUIRE(SyncFlush(*f.dev).ok());
  CHECK(f.dev->unflushed_bytes() == 0);
  f.dev->PowerLoss();
  CHECK(Diff(ReadBytes(*f.dev, 8192, 16384), new_data) == "");
}

TEST_CASE("drop_unflushed: a FUA write survives power loss, unflushed neighbours do not") {
  Fault f("fault,drop_unflushed=1:mem:1M");
  auto a = Pattern(4096, 1), b = Pattern(4096, 2), c = Pattern(4096, 3);
  REQUIRE(WriteBytes(*f.dev, 0, a).ok());         // volatile
  REQUIRE(WriteBytes(*f.dev, 4096, b, kIoFua).ok());  // durable
  REQUIRE(WriteBytes(*f.dev, 0 + 8192, c).ok());  // volatile
  f.dev->PowerLoss();
  CHECK(IsZero(ReadBytes(*f.dev, 0, 4096).data(), 4096));
  CHECK(Diff(ReadBytes(*f.dev, 4096, 4096), b) == "");
  CHECK(IsZero(ReadBytes(*f.dev, 8192, 4096).data(), 4096));
}

TEST_CASE("drop_unflushed: a FUA write over an unflushed one wins after power loss") {
  Fault f("fault,drop_unflushed=1:mem:1M");
  auto a = Pattern(4096, 1), b = Pattern(4096, 2);
  REQUIRE(WriteBytes(*f.dev, 0, a).ok());
  REQUIRE(WriteBytes(*f.dev, 0, b, kIoFua).ok());
  CHECK(Diff(ReadBytes(*f.dev, 0, 4096), b) == "");
  f.dev->PowerLoss();
  CHECK(Diff(ReadBytes(*f.dev, 0, 4096), b) == "");
}

TEST_CASE("drop_unflushed: an unflushed discard is undone by power loss") {
  Fault f("fault,drop_unflushed=1:mem:1M");
  auto a = Pattern(8192, 1);
  REQUIRE(WriteBytes(*f.dev, 0, a, kIoFua).ok());
  REQUIRE(SyncIo(*f.dev, {IoOp::kDiscard, 0, 0, 8192, nullptr}).ok());
  CHECK(IsZero(ReadBytes(*f.dev, 0, 8192).data(), 8192));
  f.dev->PowerLoss();
  CHECK(Diff(ReadBytes(*f.dev, 0, 8192), a) == "");
}

// Regression: a FUA write that completed while a flush was still writing the
// volatile cache out was hidden from reads by the older data being flushed.
TEST_CASE("drop_unflushed: a FUA write over a block a flush is writing out waits for it, and wins") {
  auto reactor = BoundReactor();
  auto mem = MemDevice::Create("mem:1M", 1 << 20);
  REQUIRE(mem.ok());
  // The lower fault device only slows the flush down, so that it is still
  // running when the FUA write and the read complete.
  auto lower = std::make_unique<FaultDevice>("fault:mem:1M", std::move(mem).value(), FaultConfig{});
  FaultDevice* slow = lower.get();
  FaultConfig cfg;
  cfg.drop_unflushed = true;
  FaultDevice dev("fault,drop_unflushed=1:fault:mem:1M", std::move(lower), cfg);

  AlignedBuffer a(4096), b(4096), r(4096);
  FillPattern(a.data(), 4096, 1);
  FillPattern(b.data(), 4096, 2);
  REQUIRE(SyncWrite(dev, 0, 4096, a.data()).ok());  // held in the volatile cache

  FaultConfig slow_cfg;
  slow_cfg.latency_us = 200'000;
  slow->SetConfig(slow_cfg);
  std::optional<Status> flushed, written, read;
  dev.Flush([&](Status s) { flushed = s; });  // its write-out of `a` takes 200 ms
  slow->SetConfig(FaultConfig{});
  dev.Write(0, 4096, b.data(), kIoFua, [&](Status s) {
    written = s;
    std::memset(r.data(), 0xEE, 4096);
    dev.Read(0, 4096, r.data(), [&](Status s2) { read = s2; });
  });
  reactor->RunUntil([&] { return read.has_value(); });
  // Written below at once, the FUA write could land before the flush's older
  // copy of the block and lose to it: it waited for the flush.
  CHECK(flushed.has_value());
  CHECK(written->ok());
  CHECK(read->ok());
  CHECK(Diff(std::vector<uint8_t>(r.data(), r.data() + 4096), Pattern(4096, 2)) == "");

  reactor->RunUntil([&] { return flushed.has_value(); });
  CHECK(flushed->ok());
  dev.PowerLoss();
  CHECK(Diff(ReadBytes(dev, 0, 4096), Pattern(4096, 2)) == "");
}

TEST_CASE("fault options parse, and bad ones are rejected with the option named") {
  auto c = ParseFaultOptions({"eio=4k+8k", "eio=1M+512", "eio_p=0.5", "ops=w", "latency_us=250",
                              "drop_unflushed=1", "tear_unflushed=1", "seed=9"});
  REQUIRE(c.ok());
  REQUIRE(c->eio_ranges.size() == 2);
  CHECK(c->eio_ranges[0].offset == 4096);
  CHECK(c->eio_ranges[0].len == 8192);
  CHECK(c->eio_ranges[1].offset == 1 << 20);
  CHECK(c->eio_ranges[1].len == 512);
  CHECK(c->eio_probability == 0.5);
  CHECK_FALSE(c->eio_reads);
  CHECK(c->eio_writes);
  CHECK(c->latency_us == 250);
  CHECK(c->drop_unflushed);
  CHECK(c->tear_unflushed);
  CHECK(c->seed == 9);

  for (auto [opt, word] : std::vector<std::pair<std::string, std::string>>{
           {"eio=4096", "eio"},
           {"eio=x+1", "bad size"},
           {"eio_p=1.5", "eio_p"},
           {"eio_p=", "eio_p"},
           {"ops=x", "ops"},
           {"latency_us=-1", "latency_us"},
           {"drop_unflushed=2", "drop_unflushed"},
           {"tear_unflushed=2", "tear_unflushed"},
           {"bogus=1", "tear_unflushed"},  // the known options are listed
           {"bogus=1", "bogus"},
           {"eio", "needs =VALUE"}}) {
    INFO(opt);
    auto r = ParseFaultOptions({opt});
    REQUIRE_FALSE(r.ok());
    CHECK(r.status().IsInvalidArgument());
    CHECK_THAT(r.status().message(), Catch::Contains(word));
  }
}

TEST_CASE(
    "tear_unflushed: power loss keeps some 4 KiB sectors of an unflushed write and loses the "
    "others") {
  Fault f("fault,tear_unflushed=1,seed=7:mem:1M");
  // 512-byte blocks below, and a start that is not on a sector boundary:
  // the write is still kept or lost in whole 4 KiB sectors.
  const uint64_t off = 8192 + 1024;
  auto old_data = Pattern(64 * 1024, 1), new_data = Pattern(64 * 1024, 2);
  REQUIRE(WriteBytes(*f.dev, off, old_data, kIoFua).ok());
  REQUIRE(WriteBytes(*f.dev, off, new_data).ok());
  const uint64_t held = f.dev->unflushed_bytes();
  f.dev->PowerLoss();
  CHECK(f.dev->unflushed_bytes() == 0);
  auto survived = SurvivingSectors(*f.dev, off, old_data, new_data);
  REQUIRE(survived.size() == 17);
  auto kept = std::count(survived.begin(), survived.end(), true);
  CHECK(kept > 0);
  CHECK(kept < 17);
  // What was held is exactly what was lost: the first and last pieces are 3 KiB and 1 KiB.
  uint64_t lost = 0;
  for (size_t i = 0; i < survived.size(); i++)
    if (!survived[i]) lost += i == 0 ? 3072 : i == 16 ? 1024 : kTearSector;
  CHECK(held == lost);
}

TEST_CASE("tear_unflushed: over many writes about half the sectors survive power loss") {
  Fault f("fault,tear_unflushed=1,seed=11:mem:4M");
  const uint64_t n = 1000;
  for (uint64_t i = 0; i < n; i++) REQUIRE(Write(*f.dev, i * kTearSector, kTearSector, i + 1).ok());
  f.dev->PowerLoss();
  uint64_t kept = 0;
  for (uint64_t i = 0; i < n; i++) {
    auto got = ReadBytes(*f.dev, i * kTearSector, kTearSector);
    INFO("sector " << i);
    CHECK((got == Pattern(kTearSector, i + 1) || IsZero(got.data(), got.size())));
    kept += got == Pattern(kTearSector, i + 1);
  }
  CHECK(kept > 420);  // 500 expected; bounds are > 5 sigma wide
  CHECK(kept < 580);
}

TEST_CASE("tear_unflushed: everything written before a completed flush survives power loss") {
  Fault f("fault,tear_unflushed=1,seed=3:mem:1M");
  auto a = Pattern(256 * 1024, 1), b = Pattern(64 * 1024, 2);
  REQUIRE(WriteBytes(*f.dev, 512 * 1024, b, kIoFua).ok());
  REQUIRE(WriteBytes(*f.dev, 0, a).ok());
  REQUIRE(SyncIo(*f.dev, {IoOp::kWriteZeroes, 0, 512 * 1024, 64 * 1024, nullptr}).ok());
  CHECK(f.dev->unflushed_bytes() > 0);
  REQUIRE(SyncFlush(*f.dev).ok());
  CHECK(f.dev->unflushed_bytes() == 0);
  REQUIRE(WriteBytes(*f.dev, 0, Pattern(64 * 1024, 3)).ok());  // after the flush: may tear
  f.dev->PowerLoss();
  SurvivingSectors(*f.dev, 0, std::vector<uint8_t>(a.begin(), a.begin() + 64 * 1024),
                   Pattern(64 * 1024, 3));
  CHECK(Diff(ReadBytes(*f.dev, 64 * 1024, 192 * 1024),
             std::vector<uint8_t>(a.begin() + 64 * 1024, a.end())) == "");
  CHECK(IsZero(ReadBytes(*f.dev, 512 * 1024, 64 * 1024).data(), 64 * 1024));
}

TEST_CASE("tear_unflushed: a FUA write survives power loss whole, over an unflushed one") {
  Fault f("fault,tear_unflushed=1,seed=5:mem:1M");
  auto a = Pattern(64 * 1024, 1), b = Pattern(64 * 1024, 2), c = Pattern(64 * 1024, 3);
  REQUIRE(WriteBytes(*f.dev, 0, a).ok());  // torn
  REQUIRE(f.dev->unflushed_bytes() > 0);
  REQUIRE(WriteBytes(*f.dev, 0, b, kIoFua).ok());  // newer than a's held sectors, which go
  CHECK(f.dev->unflushed_bytes() == 0);
  REQUIRE(WriteBytes(*f.dev, 64 * 1024, c, kIoFua).ok());
  CHECK(Diff(ReadBytes(*f.dev, 0, 64 * 1024), b) == "");
  f.dev->PowerLoss();
  CHECK(Diff(ReadBytes(*f.dev, 0, 64 * 1024), b) == "");
  CHECK(Diff(ReadBytes(*f.dev, 64 * 1024, 64 * 1024), c) == "");
}

TEST_CASE("tear_unflushed: before the cut, reads see every write whether held or written through") {
  Fault f("fault,tear_unflushed=1,seed=9:mem:1M");
  const uint64_t span = 64 * 1024;
  std::vector<uint8_t> expect(span, 0);
  // Rewrites of one range, each torn differently: every sector meets every
  // order of held and written-through copies.
  for (uint64_t i = 1; i <= 8; i++) {
    const uint64_t off = i % 2 ? 0 : 4096 + 512, len = i % 2 ? span : span / 2;
    auto data = Pattern(len, i);
    REQUIRE(WriteBytes(*f.dev, off, data).ok());
    std::copy(data.begin(), data.end(), expect.begin() + off);
    INFO("after write " << i);
    CHECK(Diff(ReadBytes(*f.dev, 0, span), expect) == "");
  }
  REQUIRE(SyncIo(*f.dev, {IoOp::kWriteZeroes, 0, 8192, 16384, nullptr}).ok());
  REQUIRE(SyncIo(*f.dev, {IoOp::kDiscard, 0, 32768, 8192 + 512, nullptr}).ok());
  std::fill(expect.begin() + 8192, expect.begin() + 8192 + 16384, 0);
  std::fill(expect.begin() + 32768, expect.begin() + 32768 + 8192 + 512, 0);
  CHECK(Diff(ReadBytes(*f.dev, 0, span), expect) == "");
}

TEST_CASE(
    "tear_unflushed: a sector written through is not overwritten at flush by an older held copy") {
  Fault f("fault,tear_unflushed=1,seed=1:mem:1M");
  // Rewrite one sector until a held copy is followed by a write that goes through.
  uint64_t seed = 0;
  bool held_then_through = false;
  while (!held_then_through && seed < 64) {
    bool was_held = f.dev->unflushed_bytes() > 0;
    REQUIRE(Write(*f.dev, 0, kTearSector, ++seed).ok());
    held_then_through = was_held && f.dev->unflushed_bytes() == 0;
  }
  REQUIRE(held_then_through);
  CHECK(Diff(ReadBytes(*f.dev, 0, kTearSector), Pattern(kTearSector, seed)) == "");
  REQUIRE(SyncFlush(*f.dev).ok());
  f.dev->PowerLoss();
  CHECK(Diff(ReadBytes(*f.dev, 0, kTearSector), Pattern(kTearSector, seed)) == "");
}

TEST_CASE("tear_unflushed: unflushed write-zeroes and discards are torn too") {
  for (IoOp op : {IoOp::kWriteZeroes, IoOp::kDiscard}) {
    INFO(IoOpName(op));
    Fault f("fault,tear_unflushed=1,seed=13:mem:1M");
    auto old_data = Pattern(64 * 1024, 1);
    REQUIRE(WriteBytes(*f.dev, 0, old_data, kIoFua).ok());
    REQUIRE(SyncIo(*f.dev, {op, 0, 0, 64 * 1024, nullptr}).ok());
    CHECK(IsZero(ReadBytes(*f.dev, 0, 64 * 1024).data(), 64 * 1024));
    f.dev->PowerLoss();
    auto survived = SurvivingSectors(*f.dev, 0, old_data, std::vector<uint8_t>(64 * 1024, 0));
    auto kept = std::count(survived.begin(), survived.end(), true);
    CHECK(kept > 0);
    CHECK(kept < 16);
  }
}

TEST_CASE("tear_unflushed: the same seed tears the same sectors, another seed others") {
  auto run = [](const std::string& spec) {
    Fault f(spec);
    auto data = Pattern(256 * 1024, 1);
    REQUIRE(WriteBytes(*f.dev, 0, data).ok());
    f.dev->PowerLoss();
    return SurvivingSectors(*f.dev, 0, std::vector<uint8_t>(data.size(), 0), data);
  };
  auto a = run("fault,tear_unflushed=1,seed=42:mem:1M");
  auto b = run("fault,tear_unflushed=1,seed=42:mem:1M");
  auto c = run("fault,tear_unflushed=1,seed=43:mem:1M");
  CHECK(a == b);
  CHECK(a != c);
}

TEST_CASE("tear_unflushed is refused over a device whose blocks do not divide its 4 KiB sector") {
  FaultConfig c;
  c.tear_unflushed = true;
  CHECK(CheckFaultConfig(c, 512).ok());
  CHECK(CheckFaultConfig(c, 4096).ok());
  Status st = CheckFaultConfig(c, 8192);
  CHECK(st.IsInvalidArgument());
  CHECK_THAT(st.message(), Catch::Contains("tear_unflushed"));
  CHECK_THAT(st.message(), Catch::Contains("8192"));
  CHECK(CheckFaultConfig(FaultConfig{}, 8192).ok());
}
