// SPDX-License-Identifier: Apache-2.0
// Recycled<T>: per-request objects begun and ended on one reactor thread
// (completions run where they were submitted): each thread recycles its
// own, so the hit path does not malloc.
//
// Thread safety: per thread; an object goes back to the pool of the thread
// that recycles it.
#pragma once

#include <cstddef>
#include <vector>

namespace ubcache {

template <typename T>
class Recycled {
 public:
  static T* New() {
    auto& pool = Pool();
    if (pool.empty()) return new T();
    T* op = pool.back();
    pool.pop_back();
    return op;
  }
  static void Recycle(T* op) {
    auto& pool = Pool();
    if (pool.size() >= kKeep) {
      delete op;
      return;
    }
    *op = T();
    pool.push_back(op);
  }

 private:
  static constexpr size_t kKeep = 1024;
  struct Owned : std::vector<T*> {
    ~Owned() {
      for (T* op : *this) delete op;
    }
  };
  static Owned& Pool() {
    thread_local Owned pool;
    return pool;
  }
};

}  // namespace ubcache
