// Bounded decoding of our message types from a peer's bytes.
//
// CAF 0.17's binary_deserializer trusts the length of a byte sequence: for a
// std::vector<uint8_t> (or std::vector<char>) it resizes to the claimed count
// before it checks that the bytes are there, so 5 bytes on the wire can make
// it allocate 4 GiB. Every `inspect` in messages.hpp therefore decodes its
// fields through a bounded_source: a deserializer that forwards to the real
// one and refuses any sequence whose claimed count passes max_wire_sequence
// or the bytes still unread (every element takes at least one byte on the
// wire: true of every registered type; a std::vector<bool> or a vector of
// empty structs would take less, and none of our messages holds one). Everything nested inside goes
// through it too, CAF's own types included (a caf::error's context message, a std::vector<char> in
// it). Saving and printing are unchanged, and so is the wire format.
//
// Not covered: CAF's own decoding outside our types (the BASP handshake, a
// message made only of CAF built-in types); see README.md, "Hostile bytes on
// the control plane".
#pragma once

#include <cstddef>
#include <type_traits>

#include <caf/deserializer.hpp>

namespace layerstream {

/// The most elements any one sequence (vector, string) of a message may claim.
constexpr size_t max_wire_sequence = size_t{1} << 24;

/// Forwards every call to `inner` and bounds each begin_sequence. A refusal
/// is sticky: every later call returns it too, because CAF 0.17 drops the
/// error of a caf::error's context message (error::apply) and would go on
/// decoding from the middle of the refused sequence. Lifetime: one decode
/// call; `inner` must outlive it.
class bounded_source final : public caf::deserializer {
 public:
  explicit bounded_source(caf::deserializer& inner);

  caf::error begin_object(uint16_t& typenr, std::string& name) override;
  caf::error end_object() override;
  caf::error begin_sequence(size_t& num) override;
  caf::error end_sequence() override;
  caf::error apply_raw(size_t num_bytes, void* data) override;

  /// Bytes still unread, if the inner source can tell (binary_deserializer).
  static bool remaining_of(caf::deserializer& source, size_t& out);

  /// The first refusal (default: none).
  const caf::error& refused() const { return refused_; }

 protected:
  caf::error apply_impl(int8_t& x) override;
  caf::error apply_impl(uint8_t& x) override;
  caf::error apply_impl(int16_t& x) override;
  caf::error apply_impl(uint16_t& x) override;
  caf::error apply_impl(int32_t& x) override;
  caf::error apply_impl(uint32_t& x) override;
  caf::error apply_impl(int64_t& x) override;
  caf::error apply_impl(uint64_t& x) override;
  caf::error apply_impl(float& x) override;
  caf::error apply_impl(double& x) override;
  caf::error apply_impl(long double& x) override;
  caf::error apply_impl(std::string& x) override;
  caf::error apply_impl(std::u16string& x) override;
  caf::error apply_impl(std::u32string& x) override;

 private:
  template <class T>
  caf::error forward(T& x) {
    if (refused_)
      return refused_;
    return inner_.apply(x);
  }

  caf::deserializer& inner_;
  caf::error refused_;
};

/// Applies `f` to `xs`; a deserializer that is not yet bounded is wrapped in
/// a bounded_source first. Every inspect in messages.hpp goes through this.
template <class Inspector, class... Ts>
typename Inspector::result_type inspect_fields(Inspector& f, Ts&&... xs) {
  if constexpr (std::is_base_of<caf::deserializer, Inspector>::value) {
    if (dynamic_cast<bounded_source*>(&f) == nullptr) {
      bounded_source bounded{f};
      auto err = bounded(std::forward<Ts>(xs)...);
      if (bounded.refused())
        return bounded.refused();
      return err;
    }
  }
  return f(std::forward<Ts>(xs)...);
}

} // namespace layerstream
