// SPDX-License-Identifier: Apache-2.0
// Callback<R(Args...)>: a move-only function object that keeps small
// captures inline, so handing a completion to a device costs no allocation
// on the I/O path (std::function must be copyable and allocates for captures
// larger than two pointers; std::move_only_function is C++23).
//
// Thread safety: a value; whoever holds it may call it once or many times.
#pragma once

#include <cstddef>
#include <new>
#include <type_traits>
#include <utility>

namespace ubcache {

template <typename Sig>
class Callback;

template <typename R, typename... Args>
class Callback<R(Args...)> {
 public:
  static constexpr std::size_t kInline = 64;

  Callback() = default;
  Callback(std::nullptr_t) {}  // NOLINT

  template <typename F, typename = std::enable_if_t<!std::is_same_v<std::decay_t<F>, Callback>>>
  Callback(F&& f) {  // NOLINT: implicit, like std::function
    using Fn = std::decay_t<F>;
    if constexpr (sizeof(Fn) <= kInline && alignof(Fn) <= alignof(std::max_align_t) &&
                  std::is_nothrow_move_constructible_v<Fn>) {
      new (&storage_) Fn(std::forward<F>(f));
      ops_ = &InlineOps<Fn>::kOps;
    } else {
      *reinterpret_cast<Fn**>(&storage_) = new Fn(std::forward<F>(f));
      ops_ = &HeapOps<Fn>::kOps;
    }
  }

  Callback(Callback&& o) noexcept : ops_(o.ops_) {
    if (ops_) {
      ops_->move(&storage_, &o.storage_);
      o.ops_ = nullptr;
    }
  }
  Callback& operator=(Callback&& o) noexcept {
    if (this != &o) {
      reset();
      ops_ = o.ops_;
      if (ops_) {
        ops_->move(&storage_, &o.storage_);
        o.ops_ = nullptr;
      }
    }
    return *this;
  }
  Callback(const Callback&) = delete;
  Callback& operator=(const Callback&) = delete;
  ~Callback() { reset(); }

  explicit operator bool() const { return ops_ != nullptr; }
  R operator()(Args... args) { return ops_->call(&storage_, std::forward<Args>(args)...); }

  void reset() {
    if (ops_) {
      ops_->destroy(&storage_);
      ops_ = nullptr;
    }
  }

 private:
  using Storage = std::aligned_storage_t<kInline, alignof(std::max_align_t)>;
  struct Ops {
    R (*call)(void*, Args&&...);
    void (*move)(void* dst, void* src);
    void (*destroy)(void*);
  };
  template <typename Fn>
  struct InlineOps {
    static R Call(void* p, Args&&... a) { return (*static_cast<Fn*>(p))(std::forward<Args>(a)...); }
    static void Move(void* dst, void* src) {
      new (dst) Fn(std::move(*static_cast<Fn*>(src)));
      static_cast<Fn*>(src)->~Fn();
    }
    static void Destroy(void* p) { static_cast<Fn*>(p)->~Fn(); }
    static constexpr Ops kOps{&Call, &Move, &Destroy};
  };
  template <typename Fn>
  struct HeapOps {
    static R Call(void* p, Args&&... a) { return (**static_cast<Fn**>(p))(std::forward<Args>(a)...); }
    static void Move(void* dst, void* src) { *static_cast<Fn**>(dst) = *static_cast<Fn**>(src); }
    static void Destroy(void* p) { delete *static_cast<Fn**>(p); }
    static constexpr Ops kOps{&Call, &Move, &Destroy};
  };

  Storage storage_;
  const Ops* ops_ = nullptr;
};

}  // namespace ubcache
