// SPDX-License-Identifier: Apache-2.0
// BufferPool: recycles 4 KiB-aligned I/O buffers in power-of-two size
// classes, so a request costs no allocation (and a 1 MiB buffer no mmap
// round trip) once the pool is warm.
//
// Buffers of up to 2 MiB are carved from 2 MiB-aligned slabs backed by
// transparent huge pages: a block device with a 254-segment limit (virtio)
// would otherwise split every 1 MiB request built from scattered 4 KiB
// pages in two. Slabs are kept for the life of the thread, up to
// kMaxSlabBytes; beyond that, each buffer is a mapping of its own, and
// idle ones are kept up to kIdleBytesPerClass per class, the rest unmapped
// on Put. So a thread's pool holds at most kMaxIdleBytes while nothing is
// in flight — the per-reactor bound `serve --help` states.
//
// No buffer comes from malloc's heap. serve locks the daemon's memory
// (mlockall), and the kernel cannot take back a locked page that malloc
// has freed inside its heap: a heap that held a burst's buffers once would
// stay that big, its idle RSS rising with every new peak (seen in
// 130-soak: +7 % and more between idle points). A mapping goes back whole.
//
// Thread safety: none; use one pool per thread (BufferPool::ForThread()).
#pragma once

#include <cstddef>
#include <cstdint>
#include <utility>
#include <vector>

namespace ubcache {

class BufferPool {
 public:
  static constexpr size_t kMinClass = 12;  // 4 KiB
  static constexpr size_t kMaxClass = 25;  // 32 MiB
  // Bytes kept idle per class at most, so a burst of large requests does
  // not pin memory forever.
  static constexpr size_t kIdleBytesPerClass = 8u << 20;
  static constexpr size_t kSlabSize = 2u << 20;  // classes up to this come from slabs
  static constexpr size_t kMaxSlabBytes = 128u << 20;
  static constexpr size_t kMaxIdleBytes =
      kMaxSlabBytes + (kMaxClass - kMinClass + 1) * kIdleBytesPerClass;

  ~BufferPool();
  // A buffer of at least `size` bytes; its capacity is the returned class size.
  uint8_t* Get(size_t size, size_t* capacity);
  void Put(uint8_t* buf, size_t capacity);

  static BufferPool& ForThread();

 private:
  static size_t ClassOf(size_t size);
  // Cuts a new slab into buffers of class c; false when over kMaxSlabBytes.
  bool CarveSlab(size_t c);
  bool FromSlab(const uint8_t* p) const;

  std::vector<uint8_t*> free_[kMaxClass + 1];
  std::vector<uint8_t*> slabs_;  // sorted, so FromSlab is a binary search
};

// A buffer of this thread's pool, owned: back to the pool when destroyed,
// which must happen on the thread that made it.
class PooledBuffer {
 public:
  PooledBuffer() = default;
  explicit PooledBuffer(size_t size) : size_(size) { data_ = BufferPool::ForThread().Get(size, &capacity_); }
  PooledBuffer(PooledBuffer&& o) noexcept
      : data_(std::exchange(o.data_, nullptr)),
        capacity_(std::exchange(o.capacity_, 0)),
        size_(std::exchange(o.size_, 0)) {}
  PooledBuffer& operator=(PooledBuffer&& o) noexcept {
    std::swap(data_, o.data_);
    std::swap(capacity_, o.capacity_);
    std::swap(size_, o.size_);
    return *this;
  }
  PooledBuffer(const PooledBuffer&) = delete;
  PooledBuffer& operator=(const PooledBuffer&) = delete;
  ~PooledBuffer() { BufferPool::ForThread().Put(data_, capacity_); }

  uint8_t* data() { return data_; }
  size_t size() const { return size_; }

 private:
  uint8_t* data_ = nullptr;
  size_t capacity_ = 0;
  size_t size_ = 0;
};

}  // namespace ubcache
