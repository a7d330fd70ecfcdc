// SPDX-License-Identifier: Apache-2.0
// ServiceTime on synthetic latency streams: deterministic, no devices.
#include "cache/service_time.h"

#include <catch2/catch.hpp>

#include <thread>
#include <vector>

using namespace ubcache;
using Op = ServiceTime::Op;

TEST_CASE("service time: size classes and their names") {
  CHECK(ServiceTime::ClassOf(512) == 0);
  CHECK(ServiceTime::ClassOf(4096) == 0);
  CHECK(ServiceTime::ClassOf(4097) == 1);
  CHECK(ServiceTime::ClassOf(64 << 10) == 1);
  CHECK(ServiceTime::ClassOf(1 << 20) == 2);
  CHECK(ServiceTime::ClassOf((1 << 20) + 4096) == 3);
  CHECK(std::string(ServiceTime::ClassName(0)) == "4k");
  CHECK(std::string(ServiceTime::ClassName(3)) == "big");
}

TEST_CASE("service time: the first sample sets the mean, later ones move it by 1/16") {
  ServiceTime t;
  CHECK(t.MeanNs(Op::kRead, 0) == 0);
  CHECK(t.ExpectNs(Op::kRead, 4096) == 0);
  t.Observe(Op::kRead, 4096, 6'000'000, 0);  // a spindle's random read
  CHECK(t.MeanNs(Op::kRead, 0) == 6'000'000);
  t.Observe(Op::kRead, 4096, 22'000'000, 0);  // one slow outlier moves it 1 ms
  CHECK(t.MeanNs(Op::kRead, 0) == 7'000'000);
  CHECK(t.Samples(Op::kRead, 0) == 2);
  CHECK(t.MeanNs(Op::kWrite, 0) == 0);  // operations are kept apart
}

TEST_CASE("service time follows a device that changes speed") {
  ServiceTime t;
  for (int i = 0; i < 200; i++) t.Observe(Op::kRead, 4096, 80'000, 0);  // an idle NVMe
  CHECK(t.MeanNs(Op::kRead, 0) == 80'000);
  // A queue builds up: 2.5 ms per read from now on. After 48 samples the
  // mean is within 5 % of the new level ((15/16)^48 of the gap is left).
  for (int i = 0; i < 48; i++) t.Observe(Op::kRead, 4096, 2'500'000, 0);
  uint64_t m = t.MeanNs(Op::kRead, 0);
  CHECK(m > 2'375'000);
  CHECK(m < 2'500'000);
  // And back.
  for (int i = 0; i < 200; i++) t.Observe(Op::kRead, 4096, 80'000, 0);
  CHECK(t.MeanNs(Op::kRead, 0) < 81'000);
}

TEST_CASE("service time: a size class without samples borrows its nearest neighbour's") {
  ServiceTime t;
  t.Observe(Op::kWrite, 4096, 5'000'000, 0);
  t.Observe(Op::kWrite, 1 << 20, 11'000'000, 0);
  CHECK(t.ExpectNs(Op::kWrite, 4096) == 5'000'000);
  CHECK(t.ExpectNs(Op::kWrite, 32 << 10) == 5'000'000);      // 64k class: the smaller neighbour
  CHECK(t.ExpectNs(Op::kWrite, 8 << 20) == 11'000'000);      // big: the 1m class
  CHECK(t.ExpectNs(Op::kRead, 4096) == 0);                  // no read seen
}

TEST_CASE("service time counts every sample observed from many threads") {
  ServiceTime t;
  std::vector<std::thread> threads;
  for (int i = 0; i < 4; i++)
    threads.emplace_back([&] {
      for (int j = 0; j < 10000; j++) t.Observe(Op::kRead, 4096, 100'000, 0);
    });
  for (auto& th : threads) th.join();
  CHECK(t.Samples(Op::kRead, 0) == 40000);
  CHECK(t.MeanNs(Op::kRead, 0) == 100'000);
}
