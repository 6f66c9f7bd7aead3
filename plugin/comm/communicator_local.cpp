// The single-process communicator: one rank, so the SUM and MAX all-reduces are the identity and done at once.

#include <chrono>
#include <cstddef>
#include <memory>
#include <string>

#include "flopmeter/communicator.h"

namespace flopmeter {
namespace {

class completed_collective final : public pending_collective {
 public:
  collective_status wait(std::chrono::milliseconds /*timeout*/) override { return collective_status::done; }
  std::string error_message() const override { return {}; }
};

class local_communicator final : public communicator {
 public:
  int rank() const override { return 0; }
  int world_size() const override { return 1; }
  // The buffer already holds the sum over the only rank; it is not touched.
  std::unique_ptr<pending_collective> start_allreduce_sum(double* /*values*/, std::size_t /*count*/) override {
    return std::make_unique<completed_collective>();
  }
  // Likewise the maximum over the only rank.
  std::unique_ptr<pending_collective> start_allreduce_max(double* /*values*/, std::size_t /*count*/) override {
    return std::make_unique<completed_collective>();
  }
  std::string backend_name() const override { return "local"; }
};

}  // namespace

std::shared_ptr<communicator> make_local_communicator() { return std::make_shared<local_communicator>(); }

}  // namespace flopmeter
