// A FIFO over a growable ring buffer: push_back / pop_front / front / index
// without the allocation per few elements that std::deque makes. Used on the
// scheduling hot path (one element per kernel launch).
#pragma once

#include <cassert>
#include <cstddef>
#include <utility>
#include <vector>

namespace lithos {

template <class T>
class RingQueue {
 public:
  bool empty() const { return size_ == 0; }
  std::size_t size() const { return size_; }

  T& front() {
    assert(size_ > 0);
    return buf_[head_];
  }
  const T& front() const {
    assert(size_ > 0);
    return buf_[head_];
  }
  T& back() {
    assert(size_ > 0);
    return buf_[(head_ + size_ - 1) & mask()];
  }
  // i-th element from the front.
  T& operator[](std::size_t i) { return buf_[(head_ + i) & mask()]; }
  const T& operator[](std::size_t i) const { return buf_[(head_ + i) & mask()]; }

  void push_back(T value) {
    if (size_ == buf_.size()) grow();
    buf_[(head_ + size_) & mask()] = std::move(value);
    ++size_;
  }
  void pop_front() {
    assert(size_ > 0);
    buf_[head_] = T{};  // release what the element holds
    head_ = (head_ + 1) & mask();
    --size_;
  }
  void clear() {
    while (!empty()) pop_front();
  }

 private:
  std::size_t mask() const { return buf_.size() - 1; }
  void grow() {
    std::vector<T> bigger(buf_.empty() ? 8 : buf_.size() * 2);  // a power of two
    for (std::size_t i = 0; i < size_; ++i) bigger[i] = std::move((*this)[i]);
    buf_ = std::move(bigger);
    head_ = 0;
  }
  std::vector<T> buf_;
  std::size_t head_ = 0;
  std::size_t size_ = 0;
};

}  // namespace lithos
