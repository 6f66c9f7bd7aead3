// The message a flopmeter::error carries, for the bad-input tests, which compare it whole (file:line:col, key
// path and what is wrong) or look for the part they pin.
#pragma once

#include <gtest/gtest.h>

#include <string>
#include <utility>

#include "flopmeter/error.h"

namespace flopmeter::testing {

// The message of the flopmeter::error that `call()` throws; "" and a test failure naming `input` (what was
// fed in: the document, the path) if it throws none.
template <typename Call>
std::string error_message_of(Call&& call, const std::string& input = "") {
  try {
    std::forward<Call>(call)();
  } catch (const error& e) {
    return e.what();
  }
  ADD_FAILURE() << "no flopmeter::error" << (input.empty() ? "" : " for:\n") << input;
  return "";
}

}  // namespace flopmeter::testing
