// BufferPool: recycles 4 KiB-aligned I/O buffers in power-of-two size
// classes, so a request costs no allocation (and a 1 MiB buffer no mmap
// round trip) once the pool is warm.
//
// Thread safety: none; use one pool per thread (BufferPool::ForThread()).
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace ubcache {

class BufferPool {
 public:
  static constexpr size_t kMinClass = 12;  // 4 KiB
  static constexpr size_t kMaxClass = 25;  // 32 MiB
  // Bytes kept idle per class at most, so a burst of large requests does
  // not pin memory forever.
  static constexpr size_t kIdleBytesPerClass = 16u << 20;

  ~BufferPool();
  // A buffer of at least `size` bytes; its capacity is the returned class size.
  uint8_t* Get(size_t size, size_t* capacity);
  void Put(uint8_t* buf, size_t capacity);

  static BufferPool& ForThread();

 private:
  static size_t ClassOf(size_t size);
  std::vector<uint8_t*> free_[kMaxClass + 1];
};

}  // namespace ubcache
