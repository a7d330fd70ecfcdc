// SPDX-License-Identifier: Apache-2.0
#include "util/buffer_pool.h"

#include <sys/mman.h>

#include <algorithm>
#include <new>

namespace ubcache {

namespace {

// A buffer of its own: anonymous pages, page-aligned, zero-filled.
uint8_t* MapBuffer(size_t size) {
  void* m = mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (m == MAP_FAILED) throw std::bad_alloc();
  return static_cast<uint8_t*>(m);
}

}  // namespace

BufferPool::~BufferPool() {
  for (size_t c = kMinClass; c <= kMaxClass; c++)
    for (uint8_t* p : free_[c])
      if (!FromSlab(p)) munmap(p, size_t{1} << c);
  for (uint8_t* s : slabs_) munmap(s, kSlabSize);
}

bool BufferPool::FromSlab(const uint8_t* p) const {
  auto* base = reinterpret_cast<uint8_t*>(reinterpret_cast<uintptr_t>(p) & ~(uintptr_t{kSlabSize} - 1));
  return std::binary_search(slabs_.begin(), slabs_.end(), base);
}

bool BufferPool::CarveSlab(size_t c) {
  if ((slabs_.size() + 1) * kSlabSize > kMaxSlabBytes) return false;
  // Over-map, then trim to a 2 MiB-aligned slab so THP can back it.
  size_t span = 2 * kSlabSize;
  void* m = mmap(nullptr, span, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (m == MAP_FAILED) return false;
  auto base = reinterpret_cast<uintptr_t>(m);
  uintptr_t aligned = (base + kSlabSize - 1) & ~(uintptr_t{kSlabSize} - 1);
  if (aligned > base) munmap(m, aligned - base);
  if (base + span > aligned + kSlabSize)
    munmap(reinterpret_cast<void*>(aligned + kSlabSize), base + span - aligned - kSlabSize);
  auto* slab = reinterpret_cast<uint8_t*>(aligned);
  madvise(slab, kSlabSize, MADV_HUGEPAGE);
  slabs_.insert(std::upper_bound(slabs_.begin(), slabs_.end(), slab), slab);
  size_t size = size_t{1} << c;
  for (size_t off = 0; off < kSlabSize; off += size) free_[c].push_back(slab + off);
  return true;
}

size_t BufferPool::ClassOf(size_t size) {
  size_t c = kMinClass;
  while ((size_t{1} << c) < size) c++;
  return c;
}

uint8_t* BufferPool::Get(size_t size, size_t* capacity) {
  size_t c = ClassOf(size);
  if (c > kMaxClass) {
    // Larger than any pooled class: a one-off mapping, unmapped on Put.
    *capacity = (size + 4095) / 4096 * 4096;
    return MapBuffer(*capacity);
  }
  *capacity = size_t{1} << c;
  if (free_[c].empty() && *capacity <= kSlabSize) CarveSlab(c);
  if (!free_[c].empty()) {
    uint8_t* p = free_[c].back();
    free_[c].pop_back();
    return p;
  }
  return MapBuffer(*capacity);
}

void BufferPool::Put(uint8_t* buf, size_t capacity) {
  if (!buf) return;
  size_t c = ClassOf(capacity);
  if (c <= kMaxClass && FromSlab(buf)) {
    free_[c].push_back(buf);  // slab memory stays with the pool
    return;
  }
  if (c > kMaxClass || (free_[c].size() + 1) * capacity > kIdleBytesPerClass) {
    munmap(buf, capacity);
    return;
  }
  free_[c].push_back(buf);
}

BufferPool& BufferPool::ForThread() {
  thread_local BufferPool pool;
  return pool;
}

}  // namespace ubcache
