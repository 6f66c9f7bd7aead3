// accumulation_schedule (throughput.h): the fractional gradient-accumulation schedule of a tpi_multiplier.
#include <cmath>
#include <cstdint>
#include <numeric>
#include <string>
#include <vector>

#include "flopmeter/error.h"
#include "flopmeter/throughput.h"

namespace flopmeter {

std::vector<std::int64_t> accumulation_schedule(double m) {
  if (!std::isfinite(m) || m < 1.0) {
    throw error(error_location{"", 0, 0, "tpi_multiplier"},
                "must be a finite number >= 1 (got " + std::to_string(m) + ")");
  }
  // m as an exact fraction p/q with q <= 10^6 (the nearest one): decimal multipliers such as 1.1 are then
  // exact, where (i+1)*m in floating point would never be "whole".
  constexpr std::int64_t kDenominator = 1000000;
  if (m > 1e12) throw error(error_location{"", 0, 0, "tpi_multiplier"}, std::to_string(m) + " is too large");
  std::int64_t p = static_cast<std::int64_t>(std::llround(m * static_cast<double>(kDenominator)));
  std::int64_t q = kDenominator;
  const std::int64_t g = std::gcd(p, q);
  p /= g;
  q /= g;
  // The schedule has q entries: (i+1)*p/q is first whole at i+1 = q.
  std::vector<std::int64_t> schedule;
  schedule.reserve(static_cast<std::size_t>(q));
  for (std::int64_t i = 0; i < q; ++i) {
    schedule.push_back((i + 1) * p / q - i * p / q);  // floor((i+1)m) - floor(im), exact in integers
  }
  return schedule;
}

}  // namespace flopmeter
