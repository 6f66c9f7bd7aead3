// flopmeter/layout.h — the Megatron-style parallel layout: which ranks share a micro-batch and which ranks
// form a data-parallel group.
//
// world = tp * cp * pp * dp. The rank order names the dimensions from fastest- to slowest-varying; Megatron's
// default is "tp-cp-dp-pp" (rank = tp_rank + tp*(cp_rank + cp*(dp_rank + dp*pp_rank))). Ranks that differ
// only in their dp coordinate form a DP group; those are the ranks whose counts add up.
// Thread-safety: a value type.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "flopmeter/export.h"

namespace flopmeter FLOPMETER_EXPORT {

enum class parallel_dim { tp = 0, cp = 1, dp = 2, pp = 3 };

struct parallel_sizes {
  std::int64_t tp = 1;  // tensor parallel
  std::int64_t cp = 1;  // context parallel
  std::int64_t pp = 1;  // pipeline parallel
};

class parallel_layout {
 public:
  // Throws flopmeter::error when a size is < 1, tp*cp*pp does not divide world_size, or `order` is not a
  // permutation of tp, cp, dp, pp separated by '-'.
  parallel_layout(parallel_sizes sizes, std::int64_t world_size, const std::string& order = "tp-cp-dp-pp");

  std::int64_t tp() const { return size_[0]; }
  std::int64_t cp() const { return size_[1]; }
  std::int64_t dp() const { return size_[2]; }
  std::int64_t pp() const { return size_[3]; }
  std::int64_t world_size() const { return world_; }
  const std::string& order() const { return order_name_; }

  // Coordinate of `rank` along `dim`. Throws for a rank outside [0, world).
  std::int64_t coordinate(std::int64_t rank, parallel_dim dim) const;
  // The ranks of `rank`'s DP group, ascending.
  std::vector<std::int64_t> dp_group(std::int64_t rank) const;

 private:
  std::array<std::int64_t, 4> size_{};    // indexed by parallel_dim
  std::array<parallel_dim, 4> order_{};   // fastest first
  std::int64_t world_ = 1;
  std::string order_name_;
};

}  // namespace FLOPMETER_EXPORT
