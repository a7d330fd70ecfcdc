// SPDX-License-Identifier: Apache-2.0
// ModelDevice against the wall clock, only as lower bounds: a request may be
// late (the machine is busy) but never earlier than the model says.
#include "backend/model_device.h"

#include <catch2/catch.hpp>

#include <optional>
#include <vector>

#include "backend/sync_io.h"
#include "device_test_support.h"

using namespace ubcache;
using namespace ubcache::test;

TEST_CASE("a model device completes no earlier than the modelled service time") {
  auto reactor = BoundReactor();
  auto d = OpenDevice("sas:mem:64M");
  REQUIRE(d.ok());
  auto* dev = dynamic_cast<ModelDevice*>(d->get());
  REQUIRE(dev != nullptr);
  // A twin of the device's model, fed the same requests, predicts each time.
  SpindleModel twin(dev->params(), dev->size());
  AlignedBuffer buf(4096);
  for (uint64_t off : {32ull << 20, 4096ull, 60ull << 20, (60ull << 20) + 4096}) {
    uint64_t expect = twin.Service(off, 4096);
    uint64_t start = NowNanos();
    REQUIRE(SyncRead(*dev, off, 4096, buf.data()).ok());
    INFO("offset " << off);
    CHECK(NowNanos() - start >= expect);
  }
}

TEST_CASE("a model device serves one request at a time, in arrival order") {
  auto reactor = BoundReactor();
  auto d = OpenDevice("hdd,rpm=7200,seek_ms=4,mbps=150,seed=5:mem:64M");
  REQUIRE(d.ok());
  auto* dev = dynamic_cast<ModelDevice*>(d->get());
  REQUIRE(dev != nullptr);
  CHECK(dev->params().rpm == 7200);
  CHECK(dev->params().avg_seek_ms == 4);
  CHECK(dev->params().mbps == 150);
  CHECK(dev->params().seed == 5);

  SpindleModel twin(dev->params(), dev->size());
  constexpr int kN = 16;
  std::vector<AlignedBuffer> bufs;
  std::vector<uint64_t> finish(kN, 0), expect_end(kN, 0);
  uint64_t start = NowNanos();
  uint64_t busy = 0;
  int done = 0;
  for (int i = 0; i < kN; i++) {
    uint64_t off = (static_cast<uint64_t>(i) * 7919 % 1024) * 65536;
    bufs.emplace_back(8192);
    busy += twin.Service(off, 8192);
    expect_end[i] = busy;
    dev->Read(off, 8192, bufs.back().data(), [&, i](Status st) {
      CHECK(st.ok());
      finish[i] = NowNanos();
      done++;
    });
  }
  reactor->RunUntil([&] { return done == kN; });
  for (int i = 0; i < kN; i++) {
    INFO("request " << i);
    CHECK(finish[i] - start >= expect_end[i]);  // queued behind all before it
    if (i > 0) CHECK(finish[i] >= finish[i - 1]);
  }
}

TEST_CASE("sas takes no options and hdd rejects out-of-range ones") {
  auto reactor = BoundReactor();
  for (const char* spec : {"sas,rpm=7200:mem:1M", "hdd,rpm=10:mem:1M", "hdd,seek_ms=x:mem:1M",
                           "hdd,mbps=0:mem:1M", "hdd,bogus=1:mem:1M", "hdd,rpm:mem:1M"}) {
    INFO(spec);
    auto d = OpenDevice(spec);
    REQUIRE_FALSE(d.ok());
    CHECK(d.status().IsInvalidArgument());
    CHECK_THAT(d.status().message(), Catch::Contains(spec));
  }
}
