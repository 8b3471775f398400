// A bounded single-producer/single-consumer ring, laid out for the cost of
// a push on a cache-cold producer (the forward thread after a layer's
// compute): the producer touches its own line (its index and its cached view
// of the consumer's) and the slot, nothing else. A general-purpose queue
// (moodycamel's ReaderWriterQueue, tried first) touches several more lines
// per push; measured on this machine's VMs that was ~1 us after 3 ms of
// compute against ~0.3 us for this layout.
//
// Thread contract: one thread calls try_push, one thread calls try_pop and
// empty; capacity is rounded up to a power of two.
#pragma once

#include <atomic>
#include <cstddef>
#include <memory>
#include <new>
#include <utility>

namespace layerstream {

template <class T>
class spsc_ring {
 public:
  explicit spsc_ring(size_t capacity) {
    size_t n = 2;
    while (n < capacity)
      n *= 2;
    mask_ = n - 1;
    producer_.mask = mask_;
    slots_ = std::make_unique<T[]>(n);
    producer_.slots = slots_.get();
  }

  spsc_ring(const spsc_ring&) = delete;
  spsc_ring& operator=(const spsc_ring&) = delete;

  /// Producer: moves `value` in and returns true, or returns false (and
  /// leaves `value` as it was) when the ring is full.
  bool try_push(T& value) {
    auto& p = producer_;
    const size_t head = p.head.load(std::memory_order_relaxed);
    if (head - p.cached_tail > p.mask) {
      p.cached_tail = tail_.load(std::memory_order_acquire);
      if (head - p.cached_tail > p.mask)
        return false;
    }
    p.slots[head & p.mask] = std::move(value);
    // Release, not seq_cst: a seq_cst store is a full fence on x86, and the
    // producer would wait for the slot's and head's lines to come over from
    // the consumer's core (~1 us measured). A release store leaves for the
    // store buffer and the producer goes on.
    p.head.store(head + 1, std::memory_order_release);
    // The next push's slot was last written by the consumer a ring ago:
    // fetch it for writing now, in the background, so that the next push
    // (after a layer's compute) does not stall on it.
    __builtin_prefetch(&p.slots[(head + 1) & p.mask], 1);
    return true;
  }

  /// Consumer: false when the ring is empty.
  bool try_pop(T& out) {
    const size_t tail = tail_.load(std::memory_order_relaxed);
    if (tail == cached_head_) {
      cached_head_ = producer_.head.load(std::memory_order_acquire);
      if (tail == cached_head_)
        return false;
    }
    out = std::move(slots_[tail & mask_]);
    slots_[tail & mask_] = T{}; // drop what the slot holds now, not on reuse
    tail_.store(tail + 1, std::memory_order_release);
    return true;
  }

  /// How many pushes succeeded so far (any thread; the producer's own index,
  /// so counting costs the producer nothing).
  size_t pushed() const { return producer_.head.load(std::memory_order_relaxed); }

  /// Consumer: true when nothing is queued. A push that is still in the
  /// producer's store buffer is not seen: a consumer that sleeps after
  /// empty() must wake on its own now and then (the notifier's idle_recheck).
  bool empty() const {
    return tail_.load(std::memory_order_seq_cst) == producer_.head.load(std::memory_order_seq_cst);
  }

 private:
  static constexpr size_t line = 64;
  // The producer's line: everything try_push reads or writes but the slot.
  struct alignas(line) producer_side {
    std::atomic<size_t> head{0};
    size_t cached_tail = 0;
    size_t mask = 0;
    T* slots = nullptr;
  };
  producer_side producer_;
  // The consumer's line.
  alignas(line) std::atomic<size_t> tail_{0};
  size_t cached_head_ = 0;
  size_t mask_ = 0;
  std::unique_ptr<T[]> slots_;
};

} // namespace layerstream
