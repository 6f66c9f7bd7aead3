// plugin/abi/abi_common.h — internal (not installed): what the C ABI's files share: writing an error
// message into the caller's buffer, and the registry of FLOP-model handles (c_api_model.cpp), which
// flopmeter_plugin_model (c_api.cpp) also fills; the creation of a plugin handle (c_api.cpp), which
// flopmeter_create_from_config (c_api_config.cpp) also uses.
// Thread-safety: write_error touches only the caller's buffer; the registry is behind a mutex of its own.
#pragma once

#include <cstddef>
#include <exception>
#include <new>
#include <string>

#include "flopmeter/c_api.h"
#include "flopmeter/events.h"
#include "flopmeter/model_spec.h"

namespace flopmeter::detail {

// The message through printable_text (an exception from a trainer's communicator may carry control
// characters), cut to the buffer at a character boundary: never half of a UTF-8 sequence. NUL-terminated.
void write_abi_error(char* buffer, std::size_t size, const std::string& raw_message) noexcept;
// The same for a C string: no std::string is made at the call (an allocation that fails leaves an empty message).
void write_abi_error(char* buffer, std::size_t size, const char* raw_message) noexcept;

// Runs `create` (which returns a handle) and turns every exception into NULL and a message in the caller's
// buffer: nothing is thrown across the C ABI.
template <class Create>
auto create_or_report(char* error, std::size_t error_size, const Create& create) noexcept -> decltype(create()) {
  try {
    return create();
  } catch (const std::bad_alloc&) {
    write_abi_error(error, error_size, "out of memory");
  } catch (const std::exception& e) {
    write_abi_error(error, error_size, e.what());
  } catch (...) {
    write_abi_error(error, error_size, "unknown error");
  }
  return nullptr;
}

// The event a flopmeter_microbatch describes, reading the fields added after version 1 only when struct_size
// covers them. Returns FLOPMETER_OK, or a refusal code with `why` saying what is wrong (a NULL struct, a
// struct_size below version 1, a NULL array with a non-zero count).
int event_from_microbatch(const flopmeter_microbatch* m, microbatch_event& event, const char** why) noexcept;

struct plugin_file;  // accounting/throughput_config.h

// A plugin from a read plugin configuration (its messages name `source_name`, "" for one built in code) on the
// trainer's flopmeter_comm (NULL: one process), registered as a live handle (c_api.cpp). Throws
// flopmeter::error.
flopmeter_plugin* create_registered_plugin(const std::string& source_name, plugin_file file,
                                           const flopmeter_comm* comm);

// A new, never reused handle naming an immutable copy of `spec` trained as `regime` says (its coefficients
// computed once).
// Throws flopmeter::error when the regime does not fit the spec or the coefficients overflow (compute_coefficients).
flopmeter_model* register_model(model_spec spec, training_regime regime = {});

}  // namespace flopmeter::detail
