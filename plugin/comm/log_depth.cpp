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

// The levels of the all-reduce (log_depth.h): `halving` levels where some pair splits its segment, then
// `shared` levels where every segment is one element, which a binary tree reduces and broadcasts when there
// are kTreeMinSharedLevels of them or more.
struct allreduce_levels {
  int halving = 0;
  int shared = 0;
  bool tree() const { return shared >= kTreeMinSharedLevels; }
  static constexpr int kTreeMinSharedLevels = 4;
};

allreduce_levels levels_of(int pof2, std::size_t count) {
  const int levels = log2_of(pof2);
  const int halving = std::min(levels, ceil_log2(count));
  return {halving, levels - halving};
}

// Rounds of the binary tree over 2^shared members: 2 per depth each way (left children, then right ones),
// less the right-child round of the deepest level each way (its one node, 2^shared - 1, is a left child).
int tree_rounds(int shared) { return 4 * shared - 2; }

// Index `index`'s steps in the binary tree over the 2^shared indices that agree with it on the low `halving`
// bits (log_depth.h), all holding the one-element segment `segment`: member j of the tree is the index
// (j << halving) | low; j's parent is (j - 1) / 2, its children 2j + 1 (left) and 2j + 2 (right).
void append_tree_steps(std::vector<log_depth_step>& steps, const fold& f, allreduce_levels lv, element_range segment) {
  const int low = f.index & ((1 << lv.halving) - 1);
  const int j = f.index >> lv.halving;
  const int members = 1 << lv.shared;
  const auto rank_of_member = [&](int member) { return f.rank_of((member << lv.halving) | low); };
  int depth = 0;
  while ((2 << depth) <= j + 1) ++depth;  // floor(log2(j + 1))
  // The rounds in order: (reduce?, depth of the children, right children?).
  struct tree_round {
    bool reduce;
    int depth;
    bool right;
  };
  std::vector<tree_round> rounds;
  for (int d = lv.shared; d >= 1; --d) {
    rounds.push_back({true, d, false});
    if (d < lv.shared) rounds.push_back({true, d, true});
  }
  for (int d = 1; d <= lv.shared; ++d) {
    rounds.push_back({false, d, false});
    if (d < lv.shared) rounds.push_back({false, d, true});
  }
  for (const tree_round& r : rounds) {
    if (f.sits_out) {
      steps.push_back(kIdle);
      continue;
    }
    const int child = 2 * j + (r.right ? 2 : 1);
    const bool is_child = depth == r.depth && j > 0 && (j % 2 == 0) == r.right;
    if (is_child) {  // reduce: send up; broadcast: receive the result
      const int parent = rank_of_member((j - 1) / 2);
      steps.push_back(r.reduce ? log_depth_step{parent, segment, {}, false}
                               : log_depth_step{parent, {}, segment, false});
    } else if (depth == r.depth - 1 && child < members) {  // reduce: combine the child's; broadcast: send down
      steps.push_back(r.reduce ? log_depth_step{rank_of_member(child), {}, segment, true}
                               : log_depth_step{rank_of_member(child), segment, {}, false});
    } else {
      steps.push_back(kIdle);
    }
  }
}

}  // namespace

int log_depth_allreduce_rounds(int world, std::size_t count) {
  if (world <= 1 || count == 0) return 0;
  const int pof2 = largest_power_of_two_within(world);
  const allreduce_levels lv = levels_of(pof2, count);
  return 2 * lv.halving + (lv.tree() ? tree_rounds(lv.shared) : lv.shared) + (pof2 == world ? 0 : 2);
}

std::vector<log_depth_step> log_depth_allreduce_schedule(int rank, int world, std::size_t count) {
  check_rank("log_depth_allreduce_schedule", rank, world);
  std::vector<log_depth_step> steps;
  if (world == 1 || count == 0) return steps;
  const fold f(rank, world);
  const element_range all{0, count};
  const int levels = log2_of(f.pof2);
  const allreduce_levels lv = levels_of(f.pof2, count);

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
  const int pairwise_levels = lv.tree() ? lv.halving : levels;
  for (int k = 0; k < pairwise_levels; ++k) {
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
  if (lv.tree()) append_tree_steps(steps, f, lv, segment);
  // All-gather over the levels where some pair halved (k < lv.halving = min(L, ceil(log2 count))), deepest first.
  for (int k = lv.halving - 1; k >= 0; --k) {
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
