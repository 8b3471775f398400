// The one error system of layerstream: a CAF error code enum.
//
// Every failure a user can see (a refused input, a failed write, a timeout)
// is a caf::error whose category is `lserr` and whose context holds one
// human-readable string saying what happened and where. Handlers return
// caf::expected<T> / caf::result<T>; statuses inside messages are caf::error
// (default-constructed = success), so they serialize across processes as is.
#pragma once

#include <cstdint>
#include <string>

#include <caf/error.hpp>
#include <caf/expected.hpp>
#include <caf/make_message.hpp>

namespace layerstream {

enum class lserr : uint8_t {
  /// Not an error (kept at 0 so that a zero code never means failure).
  none = 0,
  /// An input (JSON, config, message from a peer) is malformed or inconsistent.
  bad_input,
  /// Address or length arithmetic would pass 2^64.
  overflow,
  /// A layer index outside [0, layers).
  bad_layer,
  /// A destination range outside the region the decode side advertised.
  out_of_region,
  /// A device event failed (e.g. a sticky CUDA error) or was never recorded.
  event_failed,
  /// A write or submit failed; the context holds the provider's error text.
  transfer_failed,
  /// A deadline passed before the operation completed.
  timeout,
  /// The room is unknown to the receiving actor.
  unknown_room,
  /// The room is already active (duplicate setup).
  duplicate_room,
  /// A peer (process or actor) went away.
  peer_lost,
  /// A libfabric call failed; the context names the call and fi_strerror.
  fabric_error,
  /// A layer with owned pages never reported its end before finish.
  missing_layer,
  /// The operation was not attempted because the room had already failed.
  cancelled,
  /// A control-plane peer did not prove the cluster token (missing or wrong).
  unauthorized,
  /// Failed while writes were still handed over (posted to the provider, or
  /// queued at the transport) and unanswered: they may still land at decode,
  /// so decode must not reuse the room's pages while this rank is up.
  writes_in_flight,
  /// The device cannot run another forward (a sticky CUDA error poisoned its
  /// context): the rank fails what it holds and its process must restart.
  device_lost,
};

/// Stable lower-case name of an error code.
const char* to_string(lserr code);

/// Makes a layerstream error carrying one message.
caf::error make_error(lserr code, std::string what);

/// One line for logs and reports: "code: message" for our errors, CAF's
/// rendering for the others, "ok" for no error.
std::string describe(const caf::error& err);

/// Just the message of a layerstream error (no code prefix); describe() otherwise.
std::string message_of(const caf::error& err);

/// True if `err` is a layerstream error with `code`.
bool is(const caf::error& err, lserr code);

/// Keeps the first failure in `kept`, except that a writes_in_flight failure
/// replaces any other (whose text it then carries): it is the one decode must
/// see to keep its pages. True if `err` was kept.
bool keep_failure(caf::error& kept, caf::error err);

} // namespace layerstream

CAF_ERROR_CODE_ENUM(layerstream::lserr, "lserr")
