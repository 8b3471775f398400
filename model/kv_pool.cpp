#include "model/kv_pool.hpp"

#include <algorithm>
#include <cstring>
#include <string>

#include <sys/mman.h>

#include "common/limits.hpp"

namespace layerstream {

namespace {

uint64_t splitmix64(uint64_t& state) {
  uint64_t z = (state += 0x9e3779b97f4a7c15ULL);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

uint64_t row_seed(uint64_t room, uint32_t layer, uint32_t buffer, uint64_t token) {
  uint64_t s = room * 0x100000001b3ULL;
  s = splitmix64(s) ^ (uint64_t{layer} << 32 | uint64_t{buffer} << 31);
  s = splitmix64(s) ^ token;
  return splitmix64(s);
}

} // namespace

void kv_pattern::fill_row(uint64_t room, uint32_t layer, uint32_t buffer, uint64_t token,
                          uint8_t* row, uint64_t len) {
  uint64_t state = row_seed(room, layer, buffer, token);
  uint64_t i = 0;
  for (; i + 8 <= len; i += 8) {
    uint64_t v = splitmix64(state);
    std::memcpy(row + i, &v, 8);
  }
  if (i < len) {
    uint64_t v = splitmix64(state);
    std::memcpy(row + i, &v, len - i);
  }
}

bool kv_pattern::check_row(uint64_t room, uint32_t layer, uint32_t buffer, uint64_t token,
                           const uint8_t* row, uint64_t len) {
  uint64_t state = row_seed(room, layer, buffer, token);
  uint64_t i = 0;
  for (; i + 8 <= len; i += 8) {
    uint64_t v = splitmix64(state);
    if (std::memcmp(row + i, &v, 8) != 0)
      return false;
  }
  if (i < len) {
    uint64_t v = splitmix64(state);
    return std::memcmp(row + i, &v, len - i) == 0;
  }
  return true;
}

caf::error kv_layout::init(const model_config& model, uint64_t pages, const std::string& pool) {
  if (model.layers == 0 || model.kv_heads == 0 || model.head_dim == 0 || model.dtype_bytes == 0 ||
      model.page_size == 0 || pages == 0)
    return make_error(lserr::bad_input, pool + ": every model dimension and the page count "
                                               "must be at least 1");
  if (model.mla && model.kv_heads != 1)
    return make_error(lserr::bad_input, pool + ": MLA has one KV head (model.kv_heads = 1)");
  layers_ = model.layers;
  mla_ = model.mla;
  pages_ = pages;
  page_size_ = model.page_size;
  row_len_ = uint64_t{model.kv_heads} * model.head_dim * model.dtype_bytes;
  item_len_ = row_len_ * model.page_size;
  uint64_t buffers = uint64_t{model.layers} * this->buffers();
  if (__builtin_mul_overflow(item_len_, pages, &buffer_bytes_) ||
      __builtin_mul_overflow(buffer_bytes_, buffers, &bytes_) || bytes_ > max_pool_bytes)
    return make_error(lserr::bad_input,
                      pool + ": " + std::to_string(pages) + " pages of this geometry exceed 1 TiB");
  return caf::none;
}

uint8_t* kv_layout::page_ptr(uint32_t layer, uint32_t buffer, uint64_t page) const {
  return base_ + (uint64_t{buffer} * layers_ + layer) * buffer_bytes_ + page * item_len_;
}

std::vector<uint64_t> kv_layout::k_ptrs() const {
  std::vector<uint64_t> out;
  for (uint32_t l = 0; l < layers_; ++l)
    out.push_back(reinterpret_cast<uint64_t>(page_ptr(l, 0, 0)));
  return out;
}

std::vector<uint64_t> kv_layout::v_ptrs() const {
  std::vector<uint64_t> out;
  if (!mla_)
    for (uint32_t l = 0; l < layers_; ++l)
      out.push_back(reinterpret_cast<uint64_t>(page_ptr(l, 1, 0)));
  return out;
}

std::vector<uint64_t> kv_layout::item_lens() const {
  return std::vector<uint64_t>(uint64_t{layers_} * buffers(), item_len_);
}

caf::expected<std::unique_ptr<kv_pool>> kv_pool::create(const model_config& model, uint64_t pages) {
  std::unique_ptr<kv_pool> pool{new kv_pool};
  if (auto err = pool->init(model, pages, "kv pool"))
    return err;
  void* mem =
      mmap(nullptr, pool->bytes_, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (mem == MAP_FAILED)
    return make_error(lserr::bad_input,
                      "kv pool: cannot map " + std::to_string(pool->bytes_) + " bytes");
  pool->base_ = static_cast<uint8_t*>(mem); // zero-filled by mmap
  return pool;
}

kv_pool::~kv_pool() {
  if (base_ != nullptr)
    munmap(base_, bytes_);
}

void kv_pool::write_layer(uint64_t room, uint32_t layer, const std::vector<uint64_t>& pages,
                          uint64_t first, uint64_t last, uint64_t prompt_tokens) {
  for (uint32_t b = 0; b < buffers(); ++b) {
    for (uint64_t t = first; t < last; ++t) {
      uint8_t* row = page_ptr(layer, b, pages[t / page_size_]) + (t % page_size_) * row_len_;
      kv_pattern::fill_row(room, layer, b, t, row, row_len_);
    }
    // Zero the unused slots of the request's last page once it is written.
    if (last == prompt_tokens && last % page_size_ != 0) {
      uint8_t* page = page_ptr(layer, b, pages[last / page_size_]);
      uint64_t used = (last % page_size_) * row_len_;
      std::memset(page + used, 0, item_len_ - used);
    }
  }
}

uint64_t kv_pool::check_room(uint64_t room, const std::vector<uint64_t>& pages, uint64_t first,
                             uint64_t last, uint64_t prompt_tokens) const {
  uint64_t bad = 0;
  std::vector<uint8_t> zeros(row_len_, 0);
  for (uint32_t layer = 0; layer < layers_; ++layer) {
    for (uint32_t b = 0; b < buffers(); ++b) {
      for (uint64_t t = first; t < last; ++t) {
        const uint8_t* row =
            page_ptr(layer, b, pages[t / page_size_]) + (t % page_size_) * row_len_;
        if (!kv_pattern::check_row(room, layer, b, t, row, row_len_))
          ++bad;
      }
      if (last == prompt_tokens && last % page_size_ != 0) {
        const uint8_t* page = page_ptr(layer, b, pages[last / page_size_]);
        for (uint64_t slot = last % page_size_; slot < page_size_; ++slot)
          if (std::memcmp(page + slot * row_len_, zeros.data(), row_len_) != 0)
            ++bad;
      }
    }
  }
  return bad;
}

page_allocator::page_allocator(uint64_t pages, uint64_t seed, double fragmentation)
    : total_(pages), rng_(seed), fragmentation_(fragmentation) {
  free_.reserve(pages);
  // Kept in descending order so that taking from the back yields ascending pages.
  for (uint64_t p = pages; p > 0; --p)
    free_.push_back(p - 1);
}

caf::expected<std::vector<uint64_t>> page_allocator::allocate(uint64_t n) {
  if (n > free_.size())
    return make_error(lserr::bad_input, "page allocator: " + std::to_string(n) + " pages asked, " +
                                            std::to_string(free_.size()) + " free");
  std::vector<uint64_t> out;
  out.reserve(n);
  std::uniform_real_distribution<double> coin{0.0, 1.0};
  for (uint64_t i = 0; i < n; ++i) {
    size_t pick = free_.size() - 1;
    if (fragmentation_ > 0 && coin(rng_) < fragmentation_)
      pick = std::uniform_int_distribution<size_t>{0, free_.size() - 1}(rng_);
    out.push_back(free_[pick]);
    free_.erase(free_.begin() + static_cast<std::ptrdiff_t>(pick));
  }
  return out;
}

void page_allocator::release(const std::vector<uint64_t>& pages) {
  free_.insert(free_.end(), pages.begin(), pages.end());
  std::sort(free_.begin(), free_.end(), std::greater<uint64_t>());
}

} // namespace layerstream
