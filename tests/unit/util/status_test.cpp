// SPDX-License-Identifier: Apache-2.0
#include "util/status.h"

#include <catch2/catch.hpp>

#include <cerrno>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

using namespace ubcache;
using Code = Status::Code;

TEST_CASE("the default status is OK and carries no message") {
  Status st;
  CHECK(st.ok());
  CHECK(st.code() == Code::kOk);
  CHECK(st.message().empty());
  CHECK(st.ToErrno() == 0);
  CHECK(st.ToString() == "OK");
  CHECK(Status::OK().ok());
}

TEST_CASE("each error constructor sets its code, keeps its message and maps to one errno") {
  struct Case {
    Status st;
    Code code;
    int err;
  };
  std::vector<Case> cases = {
      {Status::IoError("m"), Code::kIoError, EIO},
      {Status::InvalidArgument("m"), Code::kInvalidArgument, EINVAL},
      {Status::NotFound("m"), Code::kNotFound, ENOENT},
      {Status::Corruption("m"), Code::kCorruption, EIO},
      {Status::NoSpace("m"), Code::kNoSpace, ENOSPC},
      {Status::NotSupported("m"), Code::kNotSupported, EOPNOTSUPP},
      {Status::Permission("m"), Code::kPermission, EPERM},
      {Status::Overflow("m"), Code::kOverflow, EOVERFLOW},
      {Status::Busy("m"), Code::kBusy, EBUSY},
      {Status::Shutdown("m"), Code::kShutdown, ESHUTDOWN},
  };
  for (const auto& c : cases) {
    INFO(c.st.ToString());
    CHECK_FALSE(c.st.ok());
    CHECK(c.st.code() == c.code);
    CHECK(c.st.message() == "m");
    CHECK(c.st.ToErrno() == c.err);
  }
  CHECK(Status::IoError("x").IsIoError());
  CHECK(Status::InvalidArgument("x").IsInvalidArgument());
  CHECK(Status::NotFound("x").IsNotFound());
  CHECK(Status::Corruption("x").IsCorruption());
  CHECK(Status::NoSpace("x").IsNoSpace());
  CHECK(Status::NotSupported("x").IsNotSupported());
  CHECK_FALSE(Status::Corruption("x").IsIoError());
}

TEST_CASE("corruption reaches clients as EIO but stays distinguishable") {
  Status st = Status::Corruption("superblock: bad csum");
  CHECK(st.ToErrno() == EIO);
  CHECK(st.IsCorruption());
  CHECK_FALSE(st.IsIoError());
}

TEST_CASE("ToString names the kind of error and then the message") {
  CHECK(Status::IoError("sda: read at 0").ToString() == "I/O error: sda: read at 0");
  CHECK(Status::Corruption("superblock: bad csum").ToString() ==
        "corruption: superblock: bad csum");
  CHECK(Status::NoSpace("mem:1M: past the end").ToString() == "no space: mem:1M: past the end");
}

TEST_CASE("FromErrno accepts io_uring's negative errno and positive errno alike") {
  Status neg = Status::FromErrno(-ENOENT, "/x");
  Status pos = Status::FromErrno(ENOENT, "/x");
  CHECK(neg.code() == Code::kNotFound);
  CHECK(pos.code() == Code::kNotFound);
  CHECK(neg.message() == pos.message());
}

TEST_CASE("FromErrno keeps the context and appends strerror") {
  Status st = Status::FromErrno(-EIO, "/data/cache.img: read at 4096");
  CHECK(st.IsIoError());
  CHECK(st.message() == std::string("/data/cache.img: read at 4096: ") + std::strerror(EIO));
}

TEST_CASE("FromErrno of zero is OK") {
  Status st = Status::FromErrno(0, "nothing");
  CHECK(st.ok());
  CHECK(st.message().empty());
}

TEST_CASE("FromErrno maps errno to codes that map back to a matching errno") {
  struct Case {
    int in;
    Code code;
    int out;
  };
  for (auto c : std::vector<Case>{{EIO, Code::kIoError, EIO},
                                  {EINVAL, Code::kInvalidArgument, EINVAL},
                                  {ENOENT, Code::kNotFound, ENOENT},
                                  {ENOSPC, Code::kNoSpace, ENOSPC},
                                  {EOPNOTSUPP, Code::kNotSupported, EOPNOTSUPP},
                                  {EPERM, Code::kPermission, EPERM},
                                  {EACCES, Code::kPermission, EPERM},
                                  {EROFS, Code::kPermission, EPERM},
                                  {EOVERFLOW, Code::kOverflow, EOVERFLOW},
                                  {EFBIG, Code::kOverflow, EOVERFLOW},
                                  {EBUSY, Code::kBusy, EBUSY},
                                  {ESHUTDOWN, Code::kShutdown, ESHUTDOWN},
                                  {ECANCELED, Code::kShutdown, ESHUTDOWN},
                                  {EAGAIN, Code::kAgain, EAGAIN},
                                  {ENXIO, Code::kIoError, EIO},
                                  {ETIMEDOUT, Code::kIoError, EIO}}) {
    INFO("errno " << c.in);
    Status st = Status::FromErrno(-c.in, "ctx");
    CHECK(st.code() == c.code);
    CHECK(st.ToErrno() == c.out);
  }
}

TEST_CASE("copies of an error share the message and compare equal in code") {
  Status a = Status::Busy("device busy");
  Status b = a;
  CHECK(b.code() == Code::kBusy);
  CHECK(&a.message() == &b.message());
  Status moved = std::move(a);
  CHECK(moved.message() == "device busy");
}

TEST_CASE("a Result holds either a value or the status that explains its absence") {
  Result<int> good = 42;
  REQUIRE(good.ok());
  CHECK(good.value() == 42);
  CHECK(*good == 42);
  CHECK(good.status().ok());

  Result<int> bad = Status::NotFound("no such thing");
  CHECK_FALSE(bad.ok());
  CHECK(bad.status().IsNotFound());
  CHECK(bad.status().message() == "no such thing");
}

TEST_CASE("a Result gives up a move-only value") {
  Result<std::unique_ptr<int>> r = std::make_unique<int>(7);
  REQUIRE(r.ok());
  CHECK(*r.value() == 7);
  std::unique_ptr<int> p = std::move(r).value();
  REQUIRE(p);
  CHECK(*p == 7);
}

TEST_CASE("Result operator-> reaches the value's members") {
  Result<std::string> r = std::string("hello");
  CHECK(r->size() == 5);
}

namespace {

Status FailIf(bool fail) { return fail ? Status::IoError("inner") : Status::OK(); }
Result<int> Half(int v) {
  if (v % 2) return Status::InvalidArgument("odd");
  return v / 2;
}
Status Chain(bool fail, int* out) {
  UB_RETURN_IF_ERROR(FailIf(fail));
  *out = 1;
  return Status::OK();
}
Result<int> Quarter(int v) {
  UB_ASSIGN_OR_RETURN(int h, Half(v));
  UB_ASSIGN_OR_RETURN(int q, Half(h));
  return q;
}

}  // namespace

TEST_CASE("UB_RETURN_IF_ERROR returns the first error and continues on OK") {
  int out = 0;
  Status st = Chain(true, &out);
  CHECK(st.IsIoError());
  CHECK(st.message() == "inner");
  CHECK(out == 0);
  CHECK(Chain(false, &out).ok());
  CHECK(out == 1);
}

TEST_CASE("UB_ASSIGN_OR_RETURN unwraps values and propagates errors") {
  CHECK(Quarter(8).value() == 2);
  auto r = Quarter(6);  // 6 -> 3 -> odd
  CHECK_FALSE(r.ok());
  CHECK(r.status().IsInvalidArgument());
  CHECK(r.status().message() == "odd");
}
