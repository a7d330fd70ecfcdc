// SPDX-License-Identifier: Apache-2.0
#include "util/callback.h"

#include <catch2/catch.hpp>

#include <array>
#include <memory>
#include <string>
#include <utility>

using namespace ubcache;

namespace {

// Counts live instances so tests can see captures being destroyed exactly once.
struct Tracked {
  static inline int live = 0;
  Tracked() { live++; }
  Tracked(const Tracked&) { live++; }
  Tracked(Tracked&&) noexcept { live++; }
  ~Tracked() { live--; }
};

}  // namespace

TEST_CASE("an empty callback is false") {
  Callback<void()> a;
  Callback<void()> b = nullptr;
  CHECK_FALSE(a);
  CHECK_FALSE(b);
}

TEST_CASE("a callback with a small capture runs and returns its result") {
  int base = 40;
  Callback<int(int)> add = [base](int x) { return base + x; };
  REQUIRE(add);
  CHECK(add(2) == 42);
  CHECK(add(3) == 43);  // may be called more than once
}

TEST_CASE("a callback with a capture larger than the inline buffer lives on the heap") {
  std::array<uint64_t, 32> big{};  // 256 bytes > kInline
  for (size_t i = 0; i < big.size(); i++) big[i] = i;
  static_assert(sizeof(big) > Callback<void()>::kInline);
  Callback<uint64_t()> sum = [big] {
    uint64_t s = 0;
    for (auto v : big) s += v;
    return s;
  };
  CHECK(sum() == 31 * 32 / 2);
  Callback<uint64_t()> moved = std::move(sum);
  CHECK_FALSE(sum);
  CHECK(moved() == 31 * 32 / 2);
}

TEST_CASE("a callback takes move-only captures and arguments") {
  auto p = std::make_unique<int>(5);
  Callback<int(std::unique_ptr<int>)> f = [p = std::move(p)](std::unique_ptr<int> q) {
    return *p + *q;
  };
  CHECK(f(std::make_unique<int>(6)) == 11);
  Callback<int(std::unique_ptr<int>)> g = std::move(f);
  CHECK(g(std::make_unique<int>(1)) == 6);
}

TEST_CASE("a moved-from callback is empty and the target keeps the state") {
  auto counter = std::make_shared<int>(0);
  Callback<void()> a = [counter] { ++*counter; };
  Callback<void()> b = std::move(a);
  CHECK_FALSE(a);
  REQUIRE(b);
  b();
  CHECK(*counter == 1);

  Callback<void()> c;
  c = std::move(b);
  CHECK_FALSE(b);
  c();
  CHECK(*counter == 2);
  CHECK(counter.use_count() == 2);  // exactly one capture alive, in c
}

TEST_CASE("a callback destroys its capture exactly once, inline or on the heap") {
  Tracked::live = 0;
  {
    Tracked t;
    Callback<void()> small = [t] {};
    Callback<void()> small2 = std::move(small);
    std::array<char, 200> pad{};
    Callback<void()> big = [t, pad] { (void)pad; };
    Callback<void()> big2 = std::move(big);
    CHECK(Tracked::live == 3);  // t, small2's copy, big2's copy
  }
  CHECK(Tracked::live == 0);
}

TEST_CASE("reset and move-assignment destroy the old capture") {
  auto token = std::make_shared<int>(0);
  Callback<void()> a = [token] {};
  CHECK(token.use_count() == 2);
  a.reset();
  CHECK_FALSE(a);
  CHECK(token.use_count() == 1);

  a = [token] {};
  Callback<void()> other = [] {};
  a = std::move(other);  // replaces the capture holding `token`
  CHECK(token.use_count() == 1);
  CHECK(a);
}

TEST_CASE("self move-assignment keeps the callback") {
  int n = 0;
  Callback<void()> a = [&n] { n++; };
  Callback<void()>& ref = a;
  a = std::move(ref);
  REQUIRE(a);
  a();
  CHECK(n == 1);
}

TEST_CASE("a callback forwards a string argument by value without copying the caller's") {
  Callback<size_t(std::string)> len = [](std::string s) { return s.size(); };
  std::string s(100, 'x');
  CHECK(len(std::move(s)) == 100);
}
