// The recursive-doubling schedule and its run over a transport (recursive_doubling.h).
#include "comm/recursive_doubling.h"

#include <cmath>
#include <limits>
#include <string>

#include "flopmeter/error.h"

namespace flopmeter::detail {
namespace {

// The largest power of two <= world (world >= 1).
int largest_power_of_two_within(int world) {
  int p = 1;
  while (p <= world / 2) p *= 2;
  return p;
}

}  // namespace

int recursive_doubling_rounds(int world) {
  if (world <= 1) return 0;
  const int pof2 = largest_power_of_two_within(world);
  int rounds = 0;
  for (int d = 1; d < pof2; d *= 2) ++rounds;
  return rounds + (pof2 == world ? 0 : 2);
}

std::vector<doubling_step> recursive_doubling_schedule(int rank, int world) {
  if (world < 1 || rank < 0 || rank >= world) {
    throw error("recursive_doubling_schedule: rank " + std::to_string(rank) + " is outside [0, world) with world " +
                std::to_string(world));
  }
  std::vector<doubling_step> steps;
  if (world == 1) return steps;
  const int pof2 = largest_power_of_two_within(world);
  const int rem = world - pof2;  // the ranks 0, 2, ..., 2 rem - 2 sit out of the doubling
  const bool folded = rank < 2 * rem;
  const bool sits_out = folded && rank % 2 == 0;
  // The rank's index among the pof2 ranks of the doubling: rank 2i+1 is i, rank r >= 2 rem is r - rem.
  const int index = folded ? rank / 2 : rank - rem;
  const auto rank_of_index = [rem](int i) { return i < rem ? 2 * i + 1 : i + rem; };

  if (rem > 0) {
    if (!folded) {
      steps.push_back({doubling_action::idle, -1});
    } else if (sits_out) {
      steps.push_back({doubling_action::send_partial, rank + 1});
    } else {
      steps.push_back({doubling_action::receive_and_combine, rank - 1});
    }
  }
  for (int distance = 1; distance < pof2; distance *= 2) {
    if (sits_out) {
      steps.push_back({doubling_action::idle, -1});
    } else {
      steps.push_back({doubling_action::exchange_and_combine, rank_of_index(index ^ distance)});
    }
  }
  if (rem > 0) {
    if (!folded) {
      steps.push_back({doubling_action::idle, -1});
    } else if (sits_out) {
      steps.push_back({doubling_action::receive_result, rank + 1});
    } else {
      steps.push_back({doubling_action::send_result, rank - 1});
    }
  }
  return steps;
}

void combine_sum_max(double* into, const double* other, std::size_t sum_count, std::size_t max_count) {
  for (std::size_t i = 0; i < sum_count; ++i) into[i] += other[i];  // a + b == b + a in IEEE arithmetic
  for (std::size_t i = sum_count; i < sum_count + max_count; ++i) {
    const double a = into[i];
    const double b = other[i];
    if (std::isnan(a) || std::isnan(b)) {
      into[i] = std::numeric_limits<double>::quiet_NaN();  // one NaN whichever side held which payload
    } else if (a == b) {
      into[i] = std::signbit(a) ? b : a;  // +0 over -0 (equal otherwise)
    } else {
      into[i] = a > b ? a : b;
    }
  }
}

void run_recursive_doubling(doubling_transport& transport, int rank, int world, double* values, std::size_t sum_count,
                            std::size_t max_count) {
  const std::size_t count = sum_count + max_count;
  std::vector<double> incoming(count);
  for (const doubling_step& step : recursive_doubling_schedule(rank, world)) {
    switch (step.action) {
      case doubling_action::idle: break;
      case doubling_action::send_partial:
      case doubling_action::send_result: transport.send(step.peer, values, count); break;
      case doubling_action::receive_and_combine:
        transport.receive(step.peer, incoming.data(), count);
        combine_sum_max(values, incoming.data(), sum_count, max_count);
        break;
      case doubling_action::exchange_and_combine:
        transport.exchange(step.peer, values, incoming.data(), count);
        combine_sum_max(values, incoming.data(), sum_count, max_count);
        break;
      case doubling_action::receive_result: transport.receive(step.peer, values, count); break;
    }
  }
}

}  // namespace flopmeter::detail
