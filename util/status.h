// SPDX-License-Identifier: Apache-2.0
// Status and Result<T>: how errors travel on the I/O path, without exceptions.
//
// A Status is a code that maps one-to-one onto an errno value (so the NBD and
// ublk frontends can answer with the right error) plus a human message that
// names what failed ("superblock: bad csum", "mem:4G: bad size"). The OK
// status carries no message and costs one int and a null pointer.
//
// Thread safety: values; copy freely between threads.
#pragma once

#include <cassert>
#include <cerrno>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <variant>

namespace ubcache {

class [[nodiscard]] Status {
 public:
  enum class Code : int {
    kOk = 0,
    kIoError,          // EIO
    kInvalidArgument,  // EINVAL
    kNotFound,         // ENOENT
    kCorruption,       // EIO, but metadata failed validation
    kNoSpace,          // ENOSPC
    kNotSupported,     // EOPNOTSUPP
    kPermission,       // EPERM
    kOverflow,         // EOVERFLOW
    kBusy,             // EBUSY
    kShutdown,         // ESHUTDOWN
    kAgain,            // EAGAIN
    // EAGAIN too, but never from errno: a call that would have to wait
    // (metadata not in memory) on a thread that must not (a serving reactor).
    kWouldBlock,
  };

  Status() = default;
  static Status OK() { return Status(); }
  static Status IoError(std::string msg) { return Status(Code::kIoError, std::move(msg)); }
  static Status InvalidArgument(std::string msg) {
    return Status(Code::kInvalidArgument, std::move(msg));
  }
  static Status NotFound(std::string msg) { return Status(Code::kNotFound, std::move(msg)); }
  static Status Corruption(std::string msg) { return Status(Code::kCorruption, std::move(msg)); }
  static Status NoSpace(std::string msg) { return Status(Code::kNoSpace, std::move(msg)); }
  static Status NotSupported(std::string msg) {
    return Status(Code::kNotSupported, std::move(msg));
  }
  static Status Permission(std::string msg) { return Status(Code::kPermission, std::move(msg)); }
  static Status Overflow(std::string msg) { return Status(Code::kOverflow, std::move(msg)); }
  static Status Busy(std::string msg) { return Status(Code::kBusy, std::move(msg)); }
  static Status Shutdown(std::string msg) { return Status(Code::kShutdown, std::move(msg)); }
  static Status WouldBlock(std::string msg) { return Status(Code::kWouldBlock, std::move(msg)); }
  // From a negative or positive errno (io_uring's -errno convention); the one
  // place errno values become Status codes.
  static Status FromErrno(int err, std::string context);

  bool ok() const { return code_ == Code::kOk; }
  Code code() const { return code_; }
  const std::string& message() const;
  // The errno a client should see for this status (EIO for corruption).
  int ToErrno() const;
  // "IO error: <message>" — for logs and one-line CLI errors.
  std::string ToString() const;

  bool IsIoError() const { return code_ == Code::kIoError; }
  bool IsInvalidArgument() const { return code_ == Code::kInvalidArgument; }
  bool IsNotFound() const { return code_ == Code::kNotFound; }
  bool IsCorruption() const { return code_ == Code::kCorruption; }
  bool IsNoSpace() const { return code_ == Code::kNoSpace; }
  bool IsNotSupported() const { return code_ == Code::kNotSupported; }
  bool IsWouldBlock() const { return code_ == Code::kWouldBlock; }

 private:
  Status(Code code, std::string msg)
      : code_(code), msg_(std::make_shared<const std::string>(std::move(msg))) {}
  Code code_ = Code::kOk;
  // Shared and immutable: an OK status is one int and a null pointer, and
  // copying an error costs a reference count, not a string copy.
  std::shared_ptr<const std::string> msg_;
};

// Result<T>: a T, or the Status that explains why there is none.
template <typename T>
class [[nodiscard]] Result {
 public:
  Result(T value) : v_(std::move(value)) {}  // NOLINT: implicit by design
  Result(Status status) : v_(std::move(status)) {  // NOLINT
    assert(!std::get<Status>(v_).ok() && "Result from an OK status has no value");
  }

  bool ok() const { return v_.index() == 0; }
  const Status& status() const {
    static const Status kOk;
    return ok() ? kOk : std::get<Status>(v_);
  }
  T& value() & { return std::get<T>(v_); }
  const T& value() const& { return std::get<T>(v_); }
  T&& value() && { return std::get<T>(std::move(v_)); }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }
  T& operator*() & { return value(); }

 private:
  std::variant<T, Status> v_;
};

}  // namespace ubcache

// Early return on error, as leveldb does with its Status checks.
#define UB_RETURN_IF_ERROR(expr)          \
  do {                                     \
    ::ubcache::Status _st = (expr);        \
    if (!_st.ok()) return _st;             \
  } while (0)

#define UB_CONCAT_INNER(a, b) a##b
#define UB_CONCAT(a, b) UB_CONCAT_INNER(a, b)
#define UB_ASSIGN_OR_RETURN(lhs, expr) UB_ASSIGN_OR_RETURN_IMPL(UB_CONCAT(_res_, __LINE__), lhs, expr)
#define UB_ASSIGN_OR_RETURN_IMPL(tmp, lhs, expr) \
  auto tmp = (expr);                             \
  if (!tmp.ok()) return tmp.status();            \
  lhs = std::move(tmp).value()
