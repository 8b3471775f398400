#include "messages/bounded.hpp"

#include <caf/binary_deserializer.hpp>

#include "common/error.hpp"

namespace layerstream {

bounded_source::bounded_source(caf::deserializer& inner)
    : caf::deserializer(inner.context()), inner_(inner) {
  // nop
}

bool bounded_source::remaining_of(caf::deserializer& source, size_t& out) {
  if (auto* bin = dynamic_cast<caf::binary_deserializer*>(&source)) {
    out = bin->remaining();
    return true;
  }
  return false;
}

caf::error bounded_source::begin_object(uint16_t& typenr, std::string& name) {
  if (refused_)
    return refused_;
  return inner_.begin_object(typenr, name);
}

caf::error bounded_source::end_object() {
  if (refused_)
    return refused_;
  return inner_.end_object();
}

caf::error bounded_source::begin_sequence(size_t& num) {
  if (refused_)
    return refused_;
  if (auto err = inner_.begin_sequence(num))
    return err;
  if (num > max_wire_sequence) {
    refused_ = make_error(lserr::bad_input, "message decoding: a sequence claims " +
                                                std::to_string(num) + " elements, at most " +
                                                std::to_string(max_wire_sequence) + " allowed");
    return refused_;
  }
  // Every element takes at least one byte on the wire.
  size_t left = 0;
  if (remaining_of(inner_, left) && num > left) {
    refused_ = make_error(lserr::bad_input, "message decoding: a sequence claims " +
                                                std::to_string(num) + " elements, only " +
                                                std::to_string(left) + " bytes are left");
    return refused_;
  }
  return caf::none;
}

caf::error bounded_source::end_sequence() {
  if (refused_)
    return refused_;
  return inner_.end_sequence();
}

caf::error bounded_source::apply_raw(size_t num_bytes, void* data) {
  if (refused_)
    return refused_;
  return inner_.apply_raw(num_bytes, data);
}

// Strings: the inner source reads the length itself (binary_deserializer
// checks it against the bytes left before it allocates), so these forward.
caf::error bounded_source::apply_impl(int8_t& x) {
  return forward(x);
}
caf::error bounded_source::apply_impl(uint8_t& x) {
  return forward(x);
}
caf::error bounded_source::apply_impl(int16_t& x) {
  return forward(x);
}
caf::error bounded_source::apply_impl(uint16_t& x) {
  return forward(x);
}
caf::error bounded_source::apply_impl(int32_t& x) {
  return forward(x);
}
caf::error bounded_source::apply_impl(uint32_t& x) {
  return forward(x);
}
caf::error bounded_source::apply_impl(int64_t& x) {
  return forward(x);
}
caf::error bounded_source::apply_impl(uint64_t& x) {
  return forward(x);
}
caf::error bounded_source::apply_impl(float& x) {
  return forward(x);
}
caf::error bounded_source::apply_impl(double& x) {
  return forward(x);
}
caf::error bounded_source::apply_impl(long double& x) {
  return inner_.apply(x);
}
caf::error bounded_source::apply_impl(std::string& x) {
  return forward(x);
}
caf::error bounded_source::apply_impl(std::u16string& x) {
  return forward(x);
}
caf::error bounded_source::apply_impl(std::u32string& x) {
  return forward(x);
}

} // namespace layerstream
