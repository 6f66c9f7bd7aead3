// The Megatron-style rank layout: rank <-> (tp, cp, dp, pp) coordinates, and DP groups.
//
// With the order listing dimensions fastest-varying first, d0-d1-d2-d3, a rank is the mixed-radix number
//   rank = c[d0] + s[d0] * (c[d1] + s[d1] * (c[d2] + s[d2] * c[d3]))
// where c is the coordinate and s the size along each dimension. Megatron's RankGenerator builds its groups
// the same way from its `order` string (default "tp-cp-ep-dp-pp"; "ep" has size 1 for the dense layers, so it
// does not change any rank and is accepted and ignored here).

#include "flopmeter/layout.h"

#include <cstddef>
#include <string>
#include <vector>

#include "flopmeter/error.h"

namespace flopmeter {
namespace {

constexpr const char* kDimNames[4] = {"tp", "cp", "dp", "pp"};

std::size_t index(parallel_dim dim) { return static_cast<std::size_t>(dim); }

[[noreturn]] void bad_order(const std::string& order, const std::string& why) {
  throw error(error_location{"", 0, 0, "parallel.order"},
              "order \"" + order + "\" is not a '-'-separated permutation of tp, cp, dp, pp (" + why + ")");
}

// A size from the [parallel] settings: its key is the location.
void check_size(const char* key, std::int64_t value) {
  if (value < 1) throw error(error_location{"", 0, 0, key}, "must be >= 1, got " + std::to_string(value));
}

}  // namespace

parallel_layout::parallel_layout(parallel_sizes sizes, std::int64_t world_size, const std::string& order)
    : world_(world_size), order_name_(order) {
  check_size("parallel.tp", sizes.tp);
  check_size("parallel.cp", sizes.cp);
  check_size("parallel.pp", sizes.pp);
  // The world comes from the communicator, not from a setting.
  if (world_size < 1) throw error("world_size must be >= 1, got " + std::to_string(world_size));

  // tp*cp*pp must divide the world. Multiply step by step and stop once the product exceeds the world, so
  // absurd sizes cannot overflow.
  std::int64_t model_parallel = 1;
  for (std::int64_t s : {sizes.tp, sizes.cp, sizes.pp}) {
    if (s > world_size / model_parallel) {
      throw error(error_location{"", 0, 0, "parallel"}, "tp*cp*pp = " + std::to_string(sizes.tp) + "*" +
                                                            std::to_string(sizes.cp) + "*" + std::to_string(sizes.pp) +
                                                            " exceeds world_size " + std::to_string(world_size));
    }
    model_parallel *= s;
  }
  if (world_size % model_parallel != 0) {
    throw error(error_location{"", 0, 0, "parallel"}, "tp*cp*pp = " + std::to_string(model_parallel) +
                                                          " does not divide world_size " + std::to_string(world_size));
  }
  size_[index(parallel_dim::tp)] = sizes.tp;
  size_[index(parallel_dim::cp)] = sizes.cp;
  size_[index(parallel_dim::pp)] = sizes.pp;
  size_[index(parallel_dim::dp)] = world_size / model_parallel;

  // Parse the order: each of tp, cp, dp, pp exactly once, optionally one "ep" (ignored).
  std::array<bool, 4> seen{};
  bool seen_ep = false;
  std::size_t filled = 0;
  std::size_t start = 0;
  while (true) {
    const std::size_t dash = order.find('-', start);
    const std::string token = order.substr(start, dash == std::string::npos ? std::string::npos : dash - start);
    if (token.empty()) bad_order(order, "empty name");
    if (token == "ep") {
      if (seen_ep) bad_order(order, "\"ep\" appears twice");
      seen_ep = true;
    } else {
      std::size_t d = 0;
      while (d < 4 && token != kDimNames[d]) ++d;
      if (d == 4) bad_order(order, "unknown name \"" + token + "\"");
      if (seen[d]) bad_order(order, "\"" + token + "\" appears twice");
      seen[d] = true;
      order_[filled++] = static_cast<parallel_dim>(d);
    }
    if (dash == std::string::npos) break;
    start = dash + 1;
  }
  for (std::size_t d = 0; d < 4; ++d) {
    if (!seen[d]) bad_order(order, std::string("\"") + kDimNames[d] + "\" is missing");
  }
}

std::int64_t parallel_layout::coordinate(std::int64_t rank, parallel_dim dim) const {
  if (rank < 0 || rank >= world_) {
    throw error("rank " + std::to_string(rank) + " is outside [0, " + std::to_string(world_) + ")");
  }
  // Peel mixed-radix digits off the rank, fastest dimension first.
  std::int64_t rest = rank;
  for (parallel_dim d : order_) {
    const std::int64_t size = size_[index(d)];
    if (d == dim) return rest % size;
    rest /= size;
  }
  return 0;  // unreachable: order_ holds every dimension
}

std::vector<std::int64_t> parallel_layout::dp_group(std::int64_t rank) const {
  // The stride of dp is the product of the sizes of the dimensions faster than dp. Changing only the dp
  // coordinate moves the rank by multiples of that stride, so the group is base + i*stride, i in [0, dp).
  const std::int64_t dp_rank = coordinate(rank, parallel_dim::dp);  // also checks the rank range
  std::int64_t stride = 1;
  for (parallel_dim d : order_) {
    if (d == parallel_dim::dp) break;
    stride *= size_[index(d)];
  }
  const std::int64_t base = rank - dp_rank * stride;
  std::vector<std::int64_t> group;
  group.reserve(static_cast<std::size_t>(dp()));
  for (std::int64_t i = 0; i < dp(); ++i) group.push_back(base + i * stride);
  return group;
}

}  // namespace flopmeter
