// SPDX-License-Identifier: Apache-2.0
// The BlockDevice contract, checked on every kind of device: RAM, a file
// through io_uring, a real nbdkit export, fault injection (plain, holding and
// tearing unflushed writes) and the spindle models.
#include "backend/block_device.h"

#include <catch2/catch.hpp>

#include <cstring>
#include <optional>
#include <string>
#include <vector>

#include "backend/sync_io.h"
#include "device_test_support.h"
#include "util/aligned_buffer.h"

using namespace ubcache;
using namespace ubcache::test;

namespace {

auto AllKinds() {
  return Catch::Generators::values<std::string>(
      {"mem", "file", "nbd", "fault", "fault-drop", "fault-tear", "sas", "hdd"});
}

}  // namespace

TEST_CASE("a write reads back unchanged at the start, middle and end of the device") {
  TestDevice t = MakeTestDevice(GENERATE(AllKinds()));
  BlockDevice& dev = *t.dev;
  INFO(dev.spec());
  const uint64_t bs = dev.logical_block_size();
  struct Place {
    uint64_t off, len;
  };
  std::vector<Place> places = {{0, 4096},
                               {8192 + bs, bs},
                               {dev.size() / 2 + bs, 64 * 1024},
                               {dev.size() - 8192, 8192},
                               {3 << 20, 1 << 20}};
  uint64_t seed = 1;
  for (auto p : places) REQUIRE(WriteBytes(dev, p.off, Pattern(p.len, seed++)).ok());
  // Read in a different order from the writes, so no device can get away
  // with returning its last buffer.
  for (size_t i = places.size(); i-- > 0;) {
    INFO("offset " << places[i].off << " length " << places[i].len);
    CHECK(Diff(ReadBytes(dev, places[i].off, places[i].len), Pattern(places[i].len, i + 1)) == "");
  }
}

TEST_CASE("overlapping writes: the last write wins and untouched bytes keep the earlier one") {
  TestDevice t = MakeTestDevice(GENERATE(AllKinds()));
  BlockDevice& dev = *t.dev;
  INFO(dev.spec());
  const uint64_t bs = dev.logical_block_size();
  const uint64_t base = 1 << 20;
  const uint64_t span = 64 * 1024;
  std::vector<uint8_t> expect = Pattern(span, 100);
  REQUIRE(WriteBytes(dev, base, expect).ok());

  // Inside the first write, starting and ending mid-page when blocks allow.
  uint64_t off2 = 3 * bs, len2 = 5 * bs;
  auto second = Pattern(len2, 200);
  REQUIRE(WriteBytes(dev, base + off2, second).ok());
  std::memcpy(expect.data() + off2, second.data(), len2);

  // Straddling the end of the first write.
  uint64_t off3 = span - 2 * bs, len3 = 6 * bs;
  auto third = Pattern(len3, 300);
  REQUIRE(WriteBytes(dev, base + off3, third).ok());
  expect.resize(off3 + len3);
  std::memcpy(expect.data() + off3, third.data(), len3);

  // Straddling the start, overwriting part of the second write too.
  uint64_t len4 = 4 * bs;
  auto fourth = Pattern(len4, 400);
  REQUIRE(WriteBytes(dev, base - 2 * bs, fourth).ok());
  std::vector<uint8_t> want(fourth.begin(), fourth.begin() + 2 * bs);
  std::memcpy(expect.data(), fourth.data() + 2 * bs, 2 * bs);
  want.insert(want.end(), expect.begin(), expect.end());

  CHECK(Diff(ReadBytes(dev, base - 2 * bs, want.size()), want) == "");
  // The same bytes read in block-sized pieces agree.
  for (uint64_t o = 0; o < want.size(); o += 7 * bs) {
    uint64_t n = std::min<uint64_t>(7 * bs, want.size() - o);
    INFO("piece at " << o);
    CHECK(Diff(ReadBytes(dev, base - 2 * bs + o, n),
               std::vector<uint8_t>(want.begin() + o, want.begin() + o + n)) == "");
  }
}

TEST_CASE("flush succeeds and leaves written data readable") {
  TestDevice t = MakeTestDevice(GENERATE(AllKinds()));
  BlockDevice& dev = *t.dev;
  INFO(dev.spec());
  CHECK(SyncFlush(dev).ok());  // with nothing written
  auto data = Pattern(128 * 1024, 9);
  REQUIRE(WriteBytes(dev, 8 << 20, data).ok());
  Status st = SyncFlush(dev);
  INFO(st.ToString());
  CHECK(st.ok());
  CHECK(Diff(ReadBytes(dev, 8 << 20, data.size()), data) == "");
}

TEST_CASE("FUA writes complete and read back") {
  TestDevice t = MakeTestDevice(GENERATE(AllKinds()));
  BlockDevice& dev = *t.dev;
  INFO(dev.spec());
  auto data = Pattern(32 * 1024, 77);
  Status st = WriteBytes(dev, 5 << 20, data, kIoFua);
  INFO(st.ToString());
  REQUIRE(st.ok());
  CHECK(Diff(ReadBytes(dev, 5 << 20, data.size()), data) == "");
}

TEST_CASE("discard and write-zeroes read back as zeros, exactly over their ranges") {
  TestDevice t = MakeTestDevice(GENERATE(AllKinds()));
  BlockDevice& dev = *t.dev;
  INFO(dev.spec());
  const uint64_t bs = dev.logical_block_size();
  const uint64_t base = 2 << 20;
  const uint64_t span = 1 << 20;
  auto data = Pattern(span, 5);
  REQUIRE(WriteBytes(dev, base, data).ok());

  // Ranges with block-aligned but page-unaligned edges when bs < 4096, and
  // ranges that cover whole pages, so both the edge and page paths run.
  struct Z {
    IoOp op;
    uint32_t flags;
    uint64_t off, len;
  };
  std::vector<Z> zs = {
      {IoOp::kDiscard, 0, 3 * bs, 11 * bs},
      {IoOp::kWriteZeroes, 0, 64 * 1024 + bs, 130 * 1024},
      {IoOp::kWriteZeroes, kIoNoUnmap, 400 * 1024, 4 * bs},
      {IoOp::kDiscard, 0, 512 * 1024, 256 * 1024},
  };
  std::vector<uint8_t> expect = data;
  for (const auto& z : zs) {
    INFO(IoOpName(z.op) << " at " << z.off << "+" << z.len);
    Status st = SyncIo(dev, {z.op, z.flags, base + z.off, z.len, nullptr});
    INFO(st.ToString());
    REQUIRE(st.ok());
    std::memset(expect.data() + z.off, 0, z.len);
  }
  auto got = ReadBytes(dev, base, span);
  for (const auto& z : zs) {
    INFO(IoOpName(z.op) << " at " << z.off << "+" << z.len);
    CHECK(IsZero(got.data() + z.off, z.len));
  }
  CHECK(Diff(got, expect) == "");  // and nothing outside the ranges was touched
}

TEST_CASE("requests past the end fail with NoSpace, later, and the message names the device") {
  TestDevice t = MakeTestDevice(GENERATE(AllKinds()));
  BlockDevice& dev = *t.dev;
  INFO(dev.spec());
  const uint64_t bs = dev.logical_block_size();
  const uint64_t size = dev.size();
  AlignedBuffer buf(2 * bs);
  FillPattern(buf.data(), 2 * bs, 1);
  struct Case {
    IoOp op;
    uint64_t off, len;
  };
  for (auto c : std::vector<Case>{{IoOp::kRead, size, bs},
                                  {IoOp::kRead, size - bs, 2 * bs},
                                  {IoOp::kWrite, size - bs, 2 * bs},
                                  {IoOp::kWrite, size + 1024 * bs, bs},
                                  {IoOp::kDiscard, size - bs, 2 * bs},
                                  {IoOp::kWriteZeroes, 0, size + bs},
                                  // offset + len overflows 64 bits
                                  {IoOp::kRead, UINT64_MAX - bs + 1, 2 * bs},
                                  {IoOp::kWrite, bs, UINT64_MAX - bs + 1}}) {
    INFO(IoOpName(c.op) << " at " << c.off << "+" << c.len);
    bool inside = true;
    void* b = (c.op == IoOp::kRead || c.op == IoOp::kWrite) ? buf.data() : nullptr;
    Status st = SubmitAndWait(dev, {c.op, 0, c.off, c.len, b}, &inside);
    CHECK_FALSE(inside);
    CHECK(st.IsNoSpace());
    CHECK(st.ToErrno() == ENOSPC);
    CHECK_THAT(st.message(), Catch::Contains(dev.spec()));
  }
  // The last block itself is fine.
  CHECK(WriteBytes(dev, size - bs, Pattern(bs, 3)).ok());
  CHECK(Diff(ReadBytes(dev, size - bs, bs), Pattern(bs, 3)) == "");
}

TEST_CASE("misaligned and zero-length requests fail with InvalidArgument naming the device") {
  TestDevice t = MakeTestDevice(GENERATE(AllKinds()));
  BlockDevice& dev = *t.dev;
  INFO(dev.spec());
  const uint64_t bs = dev.logical_block_size();
  AlignedBuffer buf(4 * bs);
  struct Case {
    IoOp op;
    uint64_t off, len;
  };
  for (auto c : std::vector<Case>{{IoOp::kRead, 1, bs},
                                  {IoOp::kRead, 0, bs - 1},
                                  {IoOp::kWrite, bs / 2, bs},
                                  {IoOp::kWrite, bs, bs + 100},
                                  {IoOp::kDiscard, 100, bs},
                                  {IoOp::kWriteZeroes, 0, 3},
                                  {IoOp::kRead, 0, 0},
                                  {IoOp::kWrite, bs, 0}}) {
    INFO(IoOpName(c.op) << " at " << c.off << "+" << c.len);
    bool inside = true;
    void* b = (c.op == IoOp::kRead || c.op == IoOp::kWrite) ? buf.data() : nullptr;
    Status st = SubmitAndWait(dev, {c.op, 0, c.off, c.len, b}, &inside);
    CHECK_FALSE(inside);
    CHECK(st.IsInvalidArgument());
    CHECK(st.ToErrno() == EINVAL);
    CHECK_THAT(st.message(), Catch::Contains(dev.spec()));
  }
  Status st = SubmitAndWait(dev, {IoOp::kRead, 0, 0, bs, nullptr});
  CHECK(st.IsInvalidArgument());
  CHECK_THAT(st.message(), Catch::Contains("no buffer"));
}

TEST_CASE("a valid request never completes inside Submit") {
  TestDevice t = MakeTestDevice(GENERATE(AllKinds()));
  BlockDevice& dev = *t.dev;
  INFO(dev.spec());
  AlignedBuffer buf(4096);
  FillPattern(buf.data(), 4096, 2);
  for (IoOp op : {IoOp::kWrite, IoOp::kRead, IoOp::kFlush, IoOp::kWriteZeroes, IoOp::kDiscard}) {
    INFO(IoOpName(op));
    bool inside = true;
    void* b = (op == IoOp::kRead || op == IoOp::kWrite) ? buf.data() : nullptr;
    uint64_t len = op == IoOp::kFlush ? 0 : 4096;
    Status st = SubmitAndWait(dev, {op, 0, 4096, len, b}, &inside);
    CHECK_FALSE(inside);
    CHECK(st.ok());
  }
}

TEST_CASE("64 requests in flight at once on one reactor all complete correctly") {
  TestDevice t = MakeTestDevice(GENERATE(AllKinds()));
  BlockDevice& dev = *t.dev;
  INFO(dev.spec());
  constexpr int kN = 64;
  // Distinct, non-overlapping slots scattered over the device, lengths 4..64 KiB.
  struct Slot {
    uint64_t off, len;
  };
  std::vector<Slot> slots;
  for (int i = 0; i < kN; i++) {
    uint64_t slot = (static_cast<uint64_t>(i) * 37) % kN;  // not in submission order
    slots.push_back({slot * (dev.size() / kN), 4096ull * (1 + i % 16)});
  }
  std::vector<AlignedBuffer> bufs;
  for (int i = 0; i < kN; i++) {
    bufs.emplace_back(slots[i].len);
    FillPattern(bufs[i].data(), slots[i].len, 1000 + i);
  }

  int completed = 0;
  std::vector<std::optional<Status>> results(kN);
  for (int i = 0; i < kN; i++) {
    dev.Write(slots[i].off, slots[i].len, bufs[i].data(), 0, [&, i](Status st) {
      results[i] = std::move(st);
      completed++;
    });
  }
  CHECK(completed == 0);  // all 64 are in flight together
  t.reactor->RunUntil([&] { return completed == kN; });
  for (int i = 0; i < kN; i++) {
    INFO("write " << i << ": " << results[i]->ToString());
    CHECK(results[i]->ok());
  }

  // Now 64 reads in flight, into buffers that start out as garbage.
  for (auto& b : bufs) std::memset(b.data(), 0xEE, b.size());
  completed = 0;
  for (int i = 0; i < kN; i++) {
    results[i].reset();
    dev.Read(slots[i].off, slots[i].len, bufs[i].data(), [&, i](Status st) {
      results[i] = std::move(st);
      completed++;
    });
  }
  CHECK(completed == 0);
  t.reactor->RunUntil([&] { return completed == kN; });
  for (int i = 0; i < kN; i++) {
    INFO("read " << i << ": " << results[i]->ToString());
    CHECK(results[i]->ok());
    std::vector<uint8_t> got(bufs[i].data(), bufs[i].data() + slots[i].len);
    CHECK(Diff(got, Pattern(slots[i].len, 1000 + i)) == "");
  }
}

TEST_CASE("a read-only device refuses writes with a Permission error naming it") {
  auto reactor = BoundReactor();
  TempFile file(1 << 20);
  OpenOptions ro;
  ro.read_only = true;
  auto dev = OpenDevice(file.path(), ro);
  REQUIRE(dev.ok());
  CHECK((*dev)->read_only());
  AlignedBuffer buf(4096);
  Status st = SyncWrite(**dev, 0, 4096, buf.data());
  CHECK(st.code() == Status::Code::kPermission);
  CHECK_THAT(st.message(), Catch::Contains(file.path()));
  CHECK(SyncRead(**dev, 0, 4096, buf.data()).ok());
  CHECK(IsZero(buf.data(), 4096));
}

TEST_CASE("Describe names the spec and what kind of device it is") {
  for (const char* kind : {"mem", "file", "nbd", "fault", "sas"}) {
    TestDevice t = MakeTestDevice(kind);
    INFO(t.dev->Describe());
    CHECK_THAT(t.dev->Describe(), Catch::StartsWith(t.dev->spec()));
  }
  CHECK_THAT(MakeTestDevice("mem").dev->Describe(), Catch::Contains("RAM"));
  CHECK_THAT(MakeTestDevice("file").dev->Describe(), Catch::Contains("O_DIRECT"));
  CHECK_THAT(MakeTestDevice("nbd").dev->Describe(), Catch::Contains("NBD"));
  CHECK_THAT(MakeTestDevice("sas").dev->Describe(), Catch::Contains("10000 rpm"));
  CHECK_THAT(MakeTestDevice("fault").dev->Describe(), Catch::Contains("fault injection"));
}
