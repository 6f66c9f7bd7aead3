// The log-depth schedules and their run over a transport (log_depth.h).
#include "comm/log_depth.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <optional>
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

// log2 of a power of two.
int log2_of(int power_of_two) {
  int levels = 0;
  while ((1 << levels) < power_of_two) ++levels;
  return levels;
}

// ceil(log2 count) for count >= 1: the levels k with count > 2^k.
int ceil_log2(std::size_t count) {
  int levels = 0;
  while (levels < 63 && (std::size_t{1} << levels) < count) ++levels;
  return levels;
}

void check_rank(const char* who, int rank, int world) {
  if (world < 1 || rank < 0 || rank >= world) {
    throw error(std::string(who) + ": rank " + std::to_string(rank) + " is outside [0, world) with world " +
                std::to_string(world));
  }
}

// How the world folds onto a power of two (log_depth.h): rem even ranks below 2 rem sit out, the others
// take the indices 0 .. pof2 - 1.
struct fold {
  int pof2 = 1;
  int rem = 0;
  bool folded = false;    // rank < 2 rem
  bool sits_out = false;  // folded and even
  int index = 0;          // among the pof2 ranks (meaningless when sits_out)

  fold(int rank, int world) : pof2(largest_power_of_two_within(world)), rem(world - pof2) {
    folded = rank < 2 * rem;
    sits_out = folded && rank % 2 == 0;
    index = folded ? rank / 2 : rank - rem;
  }
  // The first rank that index i stands for (i = pof2 gives world).
  int first_rank(int i) const { return i < rem ? 2 * i : i + rem; }
  // The rank that takes part for index i.
  int rank_of(int i) const { return i < rem ? 2 * i + 1 : i + rem; }
};

constexpr log_depth_step kIdle{};

}  // namespace

int log_depth_allreduce_rounds(int world, std::size_t count) {
  if (world <= 1 || count == 0) return 0;
  const int pof2 = largest_power_of_two_within(world);
  const int levels = log2_of(pof2);
  return levels + std::min(levels, ceil_log2(count)) + (pof2 == world ? 0 : 2);
}

std::vector<log_depth_step> log_depth_allreduce_schedule(int rank, int world, std::size_t count) {
  check_rank("log_depth_allreduce_schedule", rank, world);
  std::vector<log_depth_step> steps;
  if (world == 1 || count == 0) return steps;
  const fold f(rank, world);
  const element_range all{0, count};
  const int levels = log2_of(f.pof2);

  if (f.rem > 0) {
    if (!f.folded) {
      steps.push_back(kIdle);
    } else if (f.sits_out) {
      steps.push_back({rank + 1, all, {}, false});
    } else {
      steps.push_back({rank - 1, {}, all, true});
    }
  }
  // Reduce-scatter. halved[k]: the segment before level k and the half kept, when the pair split at level k.
  struct split {
    element_range parent;
    element_range kept;
  };
  std::vector<std::optional<split>> halved(static_cast<std::size_t>(levels));
  element_range segment = all;
  for (int k = 0; k < levels; ++k) {
    const int distance = 1 << k;
    if (f.sits_out) {
      steps.push_back(kIdle);
      continue;
    }
    const int partner = f.rank_of(f.index ^ distance);
    if (segment.size() >= 2) {
      const std::size_t middle = segment.begin + segment.size() / 2;
      const element_range lower{segment.begin, middle};
      const element_range upper{middle, segment.end};
      const bool keeps_upper = (f.index & distance) != 0;
      const element_range kept = keeps_upper ? upper : lower;
      steps.push_back({partner, keeps_upper ? lower : upper, kept, true});
      halved[static_cast<std::size_t>(k)] = split{segment, kept};
      segment = kept;
    } else {
      steps.push_back({partner, segment, segment, true});  // one element: both swap it and both combine it
    }
  }
  // All-gather over the levels where some pair halved (k < ceil(log2 count)), deepest first.
  for (int k = std::min(levels, ceil_log2(count)) - 1; k >= 0; --k) {
    const auto& s = halved[static_cast<std::size_t>(k)];
    if (f.sits_out || !s) {
      steps.push_back(kIdle);
      continue;
    }
    const element_range given = s->kept.begin == s->parent.begin ? element_range{s->kept.end, s->parent.end}
                                                                 : element_range{s->parent.begin, s->kept.begin};
    steps.push_back({f.rank_of(f.index ^ (1 << k)), s->kept, given, false});
  }
  if (f.rem > 0) {
    if (!f.folded) {
      steps.push_back(kIdle);
    } else if (f.sits_out) {
      steps.push_back({rank + 1, {}, all, false});
    } else {
      steps.push_back({rank - 1, all, {}, false});
    }
  }
  return steps;
}

int log_depth_allgather_rounds(int world) {
  if (world <= 1) return 0;
  const int pof2 = largest_power_of_two_within(world);
  return log2_of(pof2) + (pof2 == world ? 0 : 2);
}

std::vector<log_depth_step> log_depth_allgather_schedule(int rank, int world, std::size_t count) {
  check_rank("log_depth_allgather_schedule", rank, world);
  std::vector<log_depth_step> steps;
  if (world == 1 || count == 0) return steps;
  const fold f(rank, world);
  const auto ranks = [count](int first, int end) {
    return element_range{static_cast<std::size_t>(first) * count, static_cast<std::size_t>(end) * count};
  };
  // The blocks index i holds before the level of distance d: those of the indices [i & ~(d - 1), + d).
  const auto held = [&](int index, int distance) {
    const int low = index & ~(distance - 1);
    return ranks(f.first_rank(low), f.first_rank(low + distance));
  };
  if (f.rem > 0) {
    if (!f.folded) {
      steps.push_back(kIdle);
    } else if (f.sits_out) {
      steps.push_back({rank + 1, ranks(rank, rank + 1), {}, false});
    } else {
      steps.push_back({rank - 1, {}, ranks(rank - 1, rank), false});
    }
  }
  for (int distance = 1; distance < f.pof2; distance *= 2) {
    if (f.sits_out) {
      steps.push_back(kIdle);
      continue;
    }
    const int partner_index = f.index ^ distance;
    steps.push_back({f.rank_of(partner_index), held(f.index, distance), held(partner_index, distance), false});
  }
  if (f.rem > 0) {
    const element_range table = ranks(0, world);
    if (!f.folded) {
      steps.push_back(kIdle);
    } else if (f.sits_out) {
      steps.push_back({rank + 1, {}, table, false});
    } else {
      steps.push_back({rank - 1, table, {}, false});
    }
  }
  return steps;
}

void combine_sum_max_from(double* into, const double* other, std::size_t count, std::size_t first_index,
                          std::size_t sum_count) {
  for (std::size_t j = 0; j < count; ++j) {
    const double a = into[j];
    const double b = other[j];
    if (first_index + j < sum_count) {
      into[j] = a + b;  // a + b == b + a in IEEE arithmetic
    } else if (std::isnan(a) || std::isnan(b)) {
      into[j] = std::numeric_limits<double>::quiet_NaN();  // one NaN whichever side held which payload
    } else if (a == b) {
      into[j] = std::signbit(a) ? b : a;  // +0 over -0 (equal otherwise)
    } else {
      into[j] = a > b ? a : b;
    }
  }
}

void combine_sum_max(double* into, const double* other, std::size_t sum_count, std::size_t max_count) {
  combine_sum_max_from(into, other, sum_count + max_count, 0, sum_count);
}

void run_log_depth_steps(log_depth_transport& transport, const std::vector<log_depth_step>& steps, double* values,
                         std::size_t sum_count) {
  std::vector<double> incoming;
  for (const log_depth_step& step : steps) {
    if (step.peer < 0) continue;
    // A combining step receives into a buffer of its own; a copying one straight into its range.
    double* in = values + step.receive.begin;
    if (step.combine) {
      incoming.resize(step.receive.size());
      in = incoming.data();
    }
    if (!step.send.empty() && !step.receive.empty()) {
      transport.exchange(step.peer, values + step.send.begin, step.send.size(), in, step.receive.size());
    } else if (!step.send.empty()) {
      transport.send(step.peer, values + step.send.begin, step.send.size());
    } else if (!step.receive.empty()) {
      transport.receive(step.peer, in, step.receive.size());
    }
    if (step.combine && !step.receive.empty()) {
      combine_sum_max_from(values + step.receive.begin, in, step.receive.size(), step.receive.begin, sum_count);
    }
  }
}

void run_log_depth_allreduce(log_depth_transport& transport, int rank, int world, double* values, std::size_t sum_count,
                             std::size_t max_count) {
  run_log_depth_steps(transport, log_depth_allreduce_schedule(rank, world, sum_count + max_count), values, sum_count);
}

void run_log_depth_allgather(log_depth_transport& transport, int rank, int world, const double* send, std::size_t count,
                             double* recv) {
  const auto steps = log_depth_allgather_schedule(rank, world, count);  // checks rank and world first
  if (count > 0) std::memcpy(recv + static_cast<std::size_t>(rank) * count, send, count * sizeof(double));
  run_log_depth_steps(transport, steps, recv, 0);
}

}  // namespace flopmeter::detail
