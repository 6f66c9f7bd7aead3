// plugin/output/json_line.h — internal (not installed): one metrics record rendered as its JSONL line, for the
// JSONL sink, the C ABI's callback and the tests.
// Thread-safety: a pure function of its argument.
#pragma once

#include <string>

#include "flopmeter/sinks.h"

namespace flopmeter::detail {

// {"step": N, "<name>": value, ...} without the newline. Integral values below 2^53 print as integers, other
// numbers as the shortest decimal that reads back to the same double, non-finite values as null.
std::string to_json_line(const metrics_record& record);

}  // namespace flopmeter::detail
