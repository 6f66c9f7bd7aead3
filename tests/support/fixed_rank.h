// A communicator that reports whatever rank and world size it is given, for tests that script the all-reduce
// themselves (or never reach it): a derived class supplies backend_name() and start_allreduce_sum().
#pragma once

#include "flopmeter/communicator.h"

namespace flopmeter::testing {

class fixed_rank_communicator : public communicator {
 public:
  fixed_rank_communicator(int rank, int world) : rank_(rank), world_(world) {}
  int rank() const override { return rank_; }
  int world_size() const override { return world_; }

 protected:
  int rank_;
  int world_;
};

}  // namespace flopmeter::testing
