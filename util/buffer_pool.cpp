#include "util/buffer_pool.h"

#include <cstdlib>
#include <new>

namespace ubcache {

BufferPool::~BufferPool() {
  for (auto& list : free_)
    for (uint8_t* p : list) std::free(p);
}

size_t BufferPool::ClassOf(size_t size) {
  size_t c = kMinClass;
  while ((size_t{1} << c) < size) c++;
  return c;
}

uint8_t* BufferPool::Get(size_t size, size_t* capacity) {
  size_t c = ClassOf(size);
  if (c > kMaxClass) {
    // Larger than any pooled class: a one-off allocation, freed on Put.
    size_t rounded = (size + 4095) / 4096 * 4096;
    *capacity = rounded;
    auto* p = static_cast<uint8_t*>(std::aligned_alloc(4096, rounded));
    if (!p) throw std::bad_alloc();
    return p;
  }
  *capacity = size_t{1} << c;
  if (!free_[c].empty()) {
    uint8_t* p = free_[c].back();
    free_[c].pop_back();
    return p;
  }
  auto* p = static_cast<uint8_t*>(std::aligned_alloc(4096, *capacity));
  if (!p) throw std::bad_alloc();
  return p;
}

void BufferPool::Put(uint8_t* buf, size_t capacity) {
  if (!buf) return;
  size_t c = ClassOf(capacity);
  if (c > kMaxClass || (free_[c].size() + 1) * capacity > kIdleBytesPerClass) {
    std::free(buf);
    return;
  }
  free_[c].push_back(buf);
}

BufferPool& BufferPool::ForThread() {
  thread_local BufferPool pool;
  return pool;
}

}  // namespace ubcache
