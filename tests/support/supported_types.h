// The supported-types list of the "unknown model type" messages, taken from the one function that makes it
// (detail::supported_model_types_text, plugin/families/spec_rules.h) rather than written out in each test. A row of a
// message table writes FLOPMETER_SUPPORTED_TYPES where the list goes; with_supported_types() puts the list there.
#pragma once

#include <string>

#include "families/spec_rules.h"

#define FLOPMETER_SUPPORTED_TYPES "<supported model types>"

namespace flopmeter::testing {

inline std::string with_supported_types(std::string message) {
  const std::string mark = FLOPMETER_SUPPORTED_TYPES;
  const std::string list = detail::supported_model_types_text();
  for (auto at = message.find(mark); at != std::string::npos; at = message.find(mark, at + list.size())) {
    message.replace(at, mark.size(), list);
  }
  return message;
}

}  // namespace flopmeter::testing
