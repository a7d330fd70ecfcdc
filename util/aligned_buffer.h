// SPDX-License-Identifier: Apache-2.0
// AlignedBuffer: heap memory aligned for O_DIRECT (4 KiB), owned, movable.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <new>
#include <utility>

namespace ubcache {

class AlignedBuffer {
 public:
  static constexpr size_t kAlign = 4096;
  AlignedBuffer() = default;
  explicit AlignedBuffer(size_t size) : size_(size) {
    if (size == 0) return;
    size_t rounded = (size + kAlign - 1) / kAlign * kAlign;
    data_ = static_cast<uint8_t*>(std::aligned_alloc(kAlign, rounded));
    if (!data_) throw std::bad_alloc();  // startup-time allocation failure only
  }
  AlignedBuffer(AlignedBuffer&& o) noexcept
      : data_(std::exchange(o.data_, nullptr)), size_(std::exchange(o.size_, 0)) {}
  AlignedBuffer& operator=(AlignedBuffer&& o) noexcept {
    std::swap(data_, o.data_);
    std::swap(size_, o.size_);
    return *this;
  }
  AlignedBuffer(const AlignedBuffer&) = delete;
  AlignedBuffer& operator=(const AlignedBuffer&) = delete;
  ~AlignedBuffer() { std::free(data_); }

  uint8_t* data() { return data_; }
  const uint8_t* data() const { return data_; }
  size_t size() const { return size_; }
  void Zero() {
    if (data_) std::memset(data_, 0, size_);
  }

 private:
  uint8_t* data_ = nullptr;
  size_t size_ = 0;
};

}  // namespace ubcache
