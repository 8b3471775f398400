// kv_pattern in device code: the same splitmix64 stream as model/kv_pool.cpp,
// one thread per 8-byte word of a row. Word k of a row is splitmix64's
// (k+1)-th output from the row seed, i.e. mix(seed + (k+1) * gamma), so words
// need no sequential state. A row's last partial word holds the low bytes of
// the next output (the host memcpy's little-endian order).
#include "model/kv_kernel.hpp"

#include <cuda_runtime.h>

namespace layerstream {

namespace {

constexpr uint64_t gamma = 0x9e3779b97f4a7c15ULL;

__host__ __device__ uint64_t mix(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

__host__ __device__ uint64_t splitmix64(uint64_t& state) {
  state += gamma;
  return mix(state);
}

// model/kv_pool.cpp's row_seed, verbatim.
__host__ __device__ uint64_t row_seed(uint64_t room, uint32_t layer, uint32_t buffer,
                                      uint64_t token) {
  uint64_t s = room * 0x100000001b3ULL;
  s = splitmix64(s) ^ (uint64_t{layer} << 32 | uint64_t{buffer} << 31);
  s = splitmix64(s) ^ token;
  return splitmix64(s);
}

__global__ void kv_fill_kernel(kv_fill_args a) {
  const uint64_t words = (a.row_len + 7) / 8;
  const uint64_t total = (a.last_token - a.first_token) * words;
  const uint64_t step = uint64_t{gridDim.x} * blockDim.x;
  for (uint64_t i = uint64_t{blockIdx.x} * blockDim.x + threadIdx.x; i < total; i += step) {
    const uint64_t t = a.first_token + i / words;
    const uint64_t k = i % words;
    const uint64_t v = mix(row_seed(a.room, a.layer, a.buffer_index, t) + (k + 1) * gamma);
    uint8_t* row = a.buffer + a.pages[t / a.page_size] * a.item_len + (t % a.page_size) * a.row_len;
    uint8_t* dst = row + k * 8;
    const uint64_t n = a.row_len - k * 8 < 8 ? a.row_len - k * 8 : 8;
    if (n == 8 && reinterpret_cast<uintptr_t>(dst) % 8 == 0) {
      *reinterpret_cast<uint64_t*>(dst) = v;
    } else {
      for (uint64_t b = 0; b < n; ++b)
        dst[b] = static_cast<uint8_t>(v >> (8 * b));
    }
  }
}

/// One thread that waits on the device's global nanosecond timer: a layer's
/// compute that takes the same wall time on any clock rate.
__global__ void compute_kernel(uint64_t ns) {
  uint64_t start = 0;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(start));
  for (;;) {
    uint64_t now = 0;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(now));
    if (now - start >= ns)
      break;
  }
}

} // namespace

int launch_compute(uint64_t ns, stream_handle stream) {
  if (ns == 0)
    return static_cast<int>(cudaSuccess);
  compute_kernel<<<1, 1, 0, reinterpret_cast<cudaStream_t>(stream)>>>(ns);
  return static_cast<int>(cudaGetLastError());
}

uint64_t kv_pattern_word(uint64_t room, uint32_t layer, uint32_t buffer, uint64_t token,
                         uint64_t word) {
  return mix(row_seed(room, layer, buffer, token) + (word + 1) * gamma);
}

int launch_kv_fill(const kv_fill_args& args, stream_handle stream) {
  if (args.last_token <= args.first_token || args.row_len == 0)
    return static_cast<int>(cudaSuccess);
  const uint64_t total = (args.last_token - args.first_token) * ((args.row_len + 7) / 8);
  constexpr unsigned threads = 256;
  const uint64_t want = (total + threads - 1) / threads;
  const unsigned blocks = static_cast<unsigned>(want < 65535 ? want : 65535);
  kv_fill_kernel<<<blocks, threads, 0, reinterpret_cast<cudaStream_t>(stream)>>>(args);
  return static_cast<int>(cudaGetLastError());
}

} // namespace layerstream
