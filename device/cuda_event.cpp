#include "device/cuda_event.hpp"

#include <cuda_runtime_api.h>

#include "device/cuda_check.hpp"

namespace layerstream {

namespace {

cudaEvent_t as_event(std::uintptr_t h) {
  return reinterpret_cast<cudaEvent_t>(h);
}

cudaStream_t as_stream(stream_handle h) {
  return reinterpret_cast<cudaStream_t>(h);
}

caf::expected<std::uintptr_t> create_event() {
  cudaEvent_t ev = nullptr;
  CUDA_RETURN_IF_ERROR(
      lserr::event_failed,
      cudaEventCreateWithFlags(&ev, cudaEventDisableTiming | cudaEventBlockingSync));
  return reinterpret_cast<std::uintptr_t>(ev);
}

} // namespace

// -- cuda_stream --------------------------------------------------------------

caf::expected<cuda_stream> cuda_stream::create() {
  cudaStream_t raw = nullptr;
  CUDA_RETURN_IF_ERROR(lserr::event_failed, cudaStreamCreateWithFlags(&raw, cudaStreamNonBlocking));
  cuda_stream s;
  s.handle_ = reinterpret_cast<stream_handle>(raw);
  return s;
}

cuda_stream::~cuda_stream() {
  if (handle_ != 0)
    cudaStreamDestroy(as_stream(handle_));
}

cuda_stream::cuda_stream(cuda_stream&& other) noexcept : handle_(other.handle_) {
  other.handle_ = 0;
}

cuda_stream& cuda_stream::operator=(cuda_stream&& other) noexcept {
  if (this != &other) {
    if (handle_ != 0)
      cudaStreamDestroy(as_stream(handle_));
    handle_ = other.handle_;
    other.handle_ = 0;
  }
  return *this;
}

caf::error cuda_stream::synchronize() const {
  return CUDA_CHECK(lserr::event_failed, cudaStreamSynchronize(as_stream(handle_)));
}

// -- cuda_event_source --------------------------------------------------------

caf::expected<int> cuda_device_count() {
  int n = 0;
  CUDA_RETURN_IF_ERROR(lserr::event_failed, cudaGetDeviceCount(&n));
  return n;
}

caf::expected<std::unique_ptr<cuda_event_source>> cuda_event_source::create(size_t capacity) {
  auto n = cuda_device_count();
  if (!n)
    return std::move(n.error());
  if (*n == 0)
    return make_error(lserr::event_failed, "cuda event source: no CUDA device");
  std::unique_ptr<cuda_event_source> src{new cuda_event_source};
  src->all_.reserve(capacity);
  src->free_.reserve(capacity);
  for (size_t i = 0; i < capacity; ++i) {
    auto ev = create_event();
    if (!ev)
      return std::move(ev.error()); // the destructor destroys those created so far
    src->all_.push_back(*ev);
    src->free_.push_back(*ev);
  }
  auto* self = src.get();
  src->waiter_ = std::make_unique<event_waiter>(
      [](event_waiter::handle h) {
        // The waiter's own thread; BlockingSync makes this sleep, not spin.
        return CUDA_CHECK(lserr::event_failed, cudaEventSynchronize(as_event(h)));
      },
      [self](event_waiter::handle h) { self->give_back(h); });
  return src;
}

cuda_event_source::~cuda_event_source() {
  waiter_.reset(); // waits for every recorded event; all are back in free_ after this
  for (auto ev : all_)
    cudaEventDestroy(as_event(ev));
}

caf::expected<std::uintptr_t> cuda_event_source::take() {
  {
    std::lock_guard<std::mutex> guard{mtx_};
    if (!free_.empty()) {
      auto ev = free_.back();
      free_.pop_back();
      return ev;
    }
  }
  auto ev = create_event(); // pool exhausted: grow by one (no device wait)
  if (ev) {
    std::lock_guard<std::mutex> guard{mtx_};
    all_.push_back(*ev);
  }
  return ev;
}

void cuda_event_source::give_back(std::uintptr_t ev) {
  std::lock_guard<std::mutex> guard{mtx_};
  free_.push_back(ev);
}

event_ptr cuda_event_source::record(stream_handle stream) {
  auto ev = take();
  if (!ev) {
    std::lock_guard<std::mutex> guard{mtx_};
    ++failed_;
    return std::make_shared<host_event>(std::move(ev.error()));
  }
  auto err = CUDA_CHECK(lserr::event_failed, cudaEventRecord(as_event(*ev), as_stream(stream)));
  if (err) {
    give_back(*ev);
    std::lock_guard<std::mutex> guard{mtx_};
    ++failed_;
    return std::make_shared<host_event>(std::move(err));
  }
  {
    std::lock_guard<std::mutex> guard{mtx_};
    ++recorded_;
  }
  auto done = std::make_shared<host_event>();
  waiter_->push(*ev, done);
  return done;
}

cuda_event_counters cuda_event_source::counters() const {
  std::lock_guard<std::mutex> guard{mtx_};
  return {all_.size(), recorded_, failed_, free_.size()};
}

} // namespace layerstream
