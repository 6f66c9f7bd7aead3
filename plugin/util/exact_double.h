// plugin/util/exact_double.h — internal: the limit below which a double holds every integer exactly.
// Counts travel in the per-log rows as doubles, and the JSON writer prints integral values below it without
// a decimal point; one constant for both. Thread-safety: a constant.
#pragma once

namespace flopmeter::detail {

// 2^53, exclusive: every integer in (-2^53, 2^53) is a double; 2^53 + 1 already rounds to 2^53.
inline constexpr double kExactIntegerLimit = 9007199254740992.0;

}  // namespace flopmeter::detail
