// The single-process communicator: one rank, and the SUM all-reduce is the identity, done at once.

#include <gtest/gtest.h>

#include <chrono>
#include <vector>

#include "flopmeter/communicator.h"

namespace flopmeter {
namespace {

TEST(LocalCommunicator, IsOneRank) {
  const auto comm = make_local_communicator();
  ASSERT_NE(comm, nullptr);
  EXPECT_EQ(comm->rank(), 0);
  EXPECT_EQ(comm->world_size(), 1);
  EXPECT_EQ(comm->backend_name(), "local");
}

TEST(LocalCommunicator, SumOverOneRankLeavesTheBufferAsIsAndIsDoneAtOnce) {
  const auto comm = make_local_communicator();
  // The sum over the single rank of each element is the element itself.
  std::vector<double> values{1.5, -2.0, 1e300};
  auto pending = comm->start_allreduce_sum(values.data(), values.size());
  ASSERT_NE(pending, nullptr);
  EXPECT_EQ(pending->wait(std::chrono::milliseconds(0)), collective_status::done);  // a poll suffices
  EXPECT_EQ(pending->wait(std::chrono::milliseconds(100)), collective_status::done);  // and stays done
  EXPECT_EQ(values, (std::vector<double>{1.5, -2.0, 1e300}));
  EXPECT_EQ(pending->error_message(), "");
  // An empty buffer is fine too.
  EXPECT_EQ(comm->start_allreduce_sum(nullptr, 0)->wait(std::chrono::milliseconds(0)), collective_status::done);
}

}  // namespace
}  // namespace flopmeter
