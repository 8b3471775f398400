#include "common/error.hpp"

#include <caf/message.hpp>
#include <caf/to_string.hpp>

namespace layerstream {

const char* to_string(lserr code) {
  switch (code) {
  case lserr::none:
    return "none";
  case lserr::bad_input:
    return "bad_input";
  case lserr::overflow:
    return "overflow";
  case lserr::bad_layer:
    return "bad_layer";
  case lserr::out_of_region:
    return "out_of_region";
  case lserr::event_failed:
    return "event_failed";
  case lserr::transfer_failed:
    return "transfer_failed";
  case lserr::timeout:
    return "timeout";
  case lserr::unknown_room:
    return "unknown_room";
  case lserr::duplicate_room:
    return "duplicate_room";
  case lserr::peer_lost:
    return "peer_lost";
  case lserr::fabric_error:
    return "fabric_error";
  case lserr::missing_layer:
    return "missing_layer";
  case lserr::cancelled:
    return "cancelled";
  case lserr::unauthorized:
    return "unauthorized";
  case lserr::writes_in_flight:
    return "writes_in_flight";
  case lserr::device_lost:
    return "device_lost";
  }
  return "unknown";
}

caf::error make_error(lserr code, std::string what) {
  return caf::error{static_cast<uint8_t>(code), caf::atom("lserr"),
                    caf::make_message(std::move(what))};
}

std::string describe(const caf::error& err) {
  if (!err)
    return "ok";
  if (err.category() == caf::atom("lserr")) {
    std::string out = to_string(static_cast<lserr>(err.code()));
    if (err.context().match_elements<std::string>())
      out += ": " + err.context().get_as<std::string>(0);
    return out;
  }
  return caf::to_string(err);
}

std::string message_of(const caf::error& err) {
  if (err && err.category() == caf::atom("lserr") && err.context().match_elements<std::string>())
    return err.context().get_as<std::string>(0);
  return describe(err);
}

bool is(const caf::error& err, lserr code) {
  // code() and category() require an error (CAF 0.17 dereferences without a check).
  return err && err.category() == caf::atom("lserr") && err.code() == static_cast<uint8_t>(code);
}

bool keep_failure(caf::error& kept, caf::error err) {
  if (!err || (kept && (is(kept, lserr::writes_in_flight) || !is(err, lserr::writes_in_flight))))
    return false;
  if (kept) // the first failure's reason stays in the text
    err = make_error(lserr::writes_in_flight, message_of(err) + " (after " + describe(kept) + ")");
  kept = std::move(err);
  return true;
}

} // namespace layerstream
