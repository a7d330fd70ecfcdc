#include "backend/fault_device.h"

#include <catch2/catch.hpp>

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
TEST_CASE("drop_unflushed: a read after a FUA write sees it even while a flush is in progress") {
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
  CHECK_FALSE(flushed.has_value());  // the flush really was still in progress
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
                              "drop_unflushed=1", "seed=9"});
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
  CHECK(c->seed == 9);

  for (auto [opt, word] : std::vector<std::pair<std::string, std::string>>{
           {"eio=4096", "eio"},
           {"eio=x+1", "bad size"},
           {"eio_p=1.5", "eio_p"},
           {"eio_p=", "eio_p"},
           {"ops=x", "ops"},
           {"latency_us=-1", "latency_us"},
           {"drop_unflushed=2", "drop_unflushed"},
           {"bogus=1", "bogus"},
           {"eio", "needs =VALUE"}}) {
    INFO(opt);
    auto r = ParseFaultOptions({opt});
    REQUIRE_FALSE(r.ok());
    CHECK(r.status().IsInvalidArgument());
    CHECK_THAT(r.status().message(), Catch::Contains(word));
  }
}
