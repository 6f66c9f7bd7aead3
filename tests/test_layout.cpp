// Parallel layout: rank <-> coordinates for Megatron's default order and others, DP groups, and the
// validation errors.

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "flopmeter/error.h"
#include "flopmeter/layout.h"

namespace flopmeter {
namespace {

// Expects `fn` to throw flopmeter::error whose message contains `text`.
template <class Fn>
void expect_error(Fn fn, const std::string& text) {
  try {
    fn();
    ADD_FAILURE() << "no error thrown; expected one containing: " << text;
  } catch (const error& e) {
    EXPECT_NE(std::string(e.what()).find(text), std::string::npos) << "message: " << e.what();
  }
}

TEST(Layout, MegatronDefaultSizes) {
  // world 16, tp 2, cp 2, pp 2: dp = 16 / (2*2*2) = 2.
  const parallel_layout layout({2, 2, 2}, 16);
  EXPECT_EQ(layout.tp(), 2);
  EXPECT_EQ(layout.cp(), 2);
  EXPECT_EQ(layout.pp(), 2);
  EXPECT_EQ(layout.dp(), 2);
  EXPECT_EQ(layout.world_size(), 16);
  EXPECT_EQ(layout.order(), "tp-cp-dp-pp");
}

struct coordinate_case {
  std::int64_t rank;
  std::int64_t tp, cp, dp, pp;
};

TEST(Layout, MegatronDefaultCoordinates) {
  // Order tp-cp-dp-pp, all sizes 2: rank = tp + 2*cp + 4*dp + 8*pp, i.e. the bits of the rank are
  // (pp dp cp tp) from high to low.
  //   5  = 0b0101 -> tp 1, cp 0, dp 1, pp 0
  //   6  = 0b0110 -> tp 0, cp 1, dp 1, pp 0
  //   11 = 0b1011 -> tp 1, cp 1, dp 0, pp 1
  //   15 = 0b1111 -> all 1
  const parallel_layout layout({2, 2, 2}, 16);
  const coordinate_case cases[] = {
      {0, 0, 0, 0, 0}, {5, 1, 0, 1, 0}, {6, 0, 1, 1, 0}, {11, 1, 1, 0, 1}, {15, 1, 1, 1, 1},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.rank);
    EXPECT_EQ(layout.coordinate(c.rank, parallel_dim::tp), c.tp);
    EXPECT_EQ(layout.coordinate(c.rank, parallel_dim::cp), c.cp);
    EXPECT_EQ(layout.coordinate(c.rank, parallel_dim::dp), c.dp);
    EXPECT_EQ(layout.coordinate(c.rank, parallel_dim::pp), c.pp);
  }
}

TEST(Layout, MegatronDefaultDpGroup) {
  // Rank 5 = (tp 1, cp 0, dp 1, pp 0). dp's stride is tp*cp = 4, so its group is {5 - 4, 5} = {1, 5}.
  const parallel_layout layout({2, 2, 2}, 16);
  EXPECT_EQ(layout.dp_group(5), (std::vector<std::int64_t>{1, 5}));
  // Rank 11 = (1, 1, 0, 1): {11, 11 + 4} = {11, 15}.
  EXPECT_EQ(layout.dp_group(11), (std::vector<std::int64_t>{11, 15}));
}

TEST(Layout, UnevenSizes) {
  // world 24, tp 4, cp 1, pp 3 -> dp = 24 / 12 = 2. rank = tp + 4*(cp + 1*(dp + 2*pp)).
  // Rank 17: 17 % 4 = 1 (tp), 17 / 4 = 4 -> cp 4 % 1 = 0, 4 / 1 = 4 -> dp 4 % 2 = 0, 4 / 2 = 2 -> pp 2.
  // dp stride = tp*cp = 4; group of 17 = {17, 21}.
  const parallel_layout layout({4, 1, 3}, 24);
  EXPECT_EQ(layout.dp(), 2);
  EXPECT_EQ(layout.coordinate(17, parallel_dim::tp), 1);
  EXPECT_EQ(layout.coordinate(17, parallel_dim::cp), 0);
  EXPECT_EQ(layout.coordinate(17, parallel_dim::dp), 0);
  EXPECT_EQ(layout.coordinate(17, parallel_dim::pp), 2);
  EXPECT_EQ(layout.dp_group(17), (std::vector<std::int64_t>{17, 21}));
}

TEST(Layout, PurelyDataParallel) {
  // tp = cp = pp = 1 on 8 ranks: everyone is in one DP group, dp coordinate = rank.
  const parallel_layout layout({1, 1, 1}, 8);
  EXPECT_EQ(layout.dp(), 8);
  EXPECT_EQ(layout.coordinate(6, parallel_dim::dp), 6);
  EXPECT_EQ(layout.dp_group(3), (std::vector<std::int64_t>{0, 1, 2, 3, 4, 5, 6, 7}));
}

TEST(Layout, DpFastestOrder) {
  // Order dp-tp-cp-pp, world 8, tp 2, cp 1, pp 2 -> dp = 2. rank = dp + 2*(tp + 2*(cp + 1*pp)).
  // Rank 6 = 0b110: dp 0, tp 1, pp 1. dp stride = 1: group {6, 7}.
  const parallel_layout layout({2, 1, 2}, 8, "dp-tp-cp-pp");
  EXPECT_EQ(layout.coordinate(6, parallel_dim::dp), 0);
  EXPECT_EQ(layout.coordinate(6, parallel_dim::tp), 1);
  EXPECT_EQ(layout.coordinate(6, parallel_dim::cp), 0);
  EXPECT_EQ(layout.coordinate(6, parallel_dim::pp), 1);
  EXPECT_EQ(layout.dp_group(6), (std::vector<std::int64_t>{6, 7}));
}

TEST(Layout, PipelineBeforeDataOrder) {
  // Order tp-cp-pp-dp (Megatron's tp-pp-dp mapping), world 16, tp 2, cp 2, pp 2 -> dp 2.
  // rank = tp + 2*(cp + 2*(pp + 2*dp)). dp stride = tp*cp*pp = 8.
  // Rank 5 = 0b0101: tp 1, cp 0, pp 1, dp 0 -> group {5, 13}.
  const parallel_layout layout({2, 2, 2}, 16, "tp-cp-pp-dp");
  EXPECT_EQ(layout.coordinate(5, parallel_dim::pp), 1);
  EXPECT_EQ(layout.coordinate(5, parallel_dim::dp), 0);
  EXPECT_EQ(layout.dp_group(5), (std::vector<std::int64_t>{5, 13}));
}

TEST(Layout, ExpertTokenIsIgnored) {
  // Megatron spells its default "tp-cp-ep-dp-pp"; ep has size 1 in the dense layout, so the ranks are the
  // same as with "tp-cp-dp-pp".
  const parallel_layout with_ep({2, 2, 2}, 16, "tp-cp-ep-dp-pp");
  const parallel_layout without({2, 2, 2}, 16);
  EXPECT_EQ(with_ep.order(), "tp-cp-ep-dp-pp");
  for (std::int64_t rank = 0; rank < 16; ++rank) {
    EXPECT_EQ(with_ep.dp_group(rank), without.dp_group(rank)) << "rank " << rank;
  }
}

TEST(Layout, DpGroupsPartitionTheWorld) {
  // Every rank is in exactly one DP group, and each group has dp members that agree on tp, cp, pp.
  const parallel_layout layout({2, 3, 2}, 24, "pp-tp-dp-cp");
  std::vector<int> seen(24, 0);
  for (std::int64_t rank = 0; rank < 24; ++rank) {
    const auto group = layout.dp_group(rank);
    ASSERT_EQ(static_cast<std::int64_t>(group.size()), layout.dp());
    EXPECT_NE(std::find(group.begin(), group.end(), rank), group.end());
    for (std::size_t i = 1; i < group.size(); ++i) EXPECT_LT(group[i - 1], group[i]);
    for (std::int64_t other : group) {
      for (parallel_dim d : {parallel_dim::tp, parallel_dim::cp, parallel_dim::pp}) {
        EXPECT_EQ(layout.coordinate(other, d), layout.coordinate(rank, d));
      }
    }
    if (group.front() == rank) {
      for (std::int64_t member : group) ++seen[static_cast<std::size_t>(member)];
    }
  }
  for (int count : seen) EXPECT_EQ(count, 1);
}

TEST(Layout, ValidationErrors) {
  expect_error([] { parallel_layout({2, 2, 2}, 12); }, "tp*cp*pp = 8 does not divide world_size 12");
  expect_error([] { parallel_layout({8, 1, 1}, 4); }, "exceeds world_size 4");
  expect_error([] { parallel_layout({0, 1, 1}, 4); }, "key 'parallel.tp': must be >= 1, got 0");
  expect_error([] { parallel_layout({1, -1, 1}, 4); }, "key 'parallel.cp': must be >= 1, got -1");
  expect_error([] { parallel_layout({1, 1, 0}, 4); }, "key 'parallel.pp': must be >= 1, got 0");
  expect_error([] { parallel_layout({1, 1, 1}, 0); }, "world_size must be >= 1, got 0");
  // Sizes that would overflow int64 if multiplied blindly.
  expect_error([] { parallel_layout({INT64_MAX, INT64_MAX, INT64_MAX}, 8); }, "exceeds world_size 8");
}

TEST(Layout, OrderErrors) {
  expect_error([] { parallel_layout({1, 1, 1}, 4, "tp-cp-dp"); }, "\"pp\" is missing");
  expect_error([] { parallel_layout({1, 1, 1}, 4, "tp-cp-dp-dp"); }, "\"dp\" appears twice");
  expect_error([] { parallel_layout({1, 1, 1}, 4, "tp-xp-dp-pp"); }, "unknown name \"xp\"");
  expect_error([] { parallel_layout({1, 1, 1}, 4, "tp--cp-dp-pp"); }, "empty name");
  expect_error([] { parallel_layout({1, 1, 1}, 4, "tp-cp-dp-pp-"); }, "empty name");
  expect_error([] { parallel_layout({1, 1, 1}, 4, ""); }, "empty name");
  expect_error([] { parallel_layout({1, 1, 1}, 4, "tp-ep-cp-ep-dp-pp"); }, "\"ep\" appears twice");
  expect_error([] { parallel_layout({1, 1, 1}, 4, "TP-CP-DP-PP"); }, "unknown name \"TP\"");
}

TEST(Layout, RankOutOfRange) {
  const parallel_layout layout({2, 2, 2}, 8);
  expect_error([&] { (void)layout.coordinate(9, parallel_dim::tp); }, "rank 9 is outside [0, 8)");
  expect_error([&] { (void)layout.coordinate(8, parallel_dim::dp); }, "rank 8 is outside [0, 8)");
  expect_error([&] { (void)layout.coordinate(-1, parallel_dim::pp); }, "rank -1 is outside [0, 8)");
  expect_error([&] { (void)layout.dp_group(8); }, "rank 8 is outside [0, 8)");
}

}  // namespace
}  // namespace flopmeter
