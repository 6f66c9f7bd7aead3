// Internal: flopmeter's own Gloo group built from the torchrun-style environment, for the C ABI. Implemented
// in c10d_communicator.cpp when LibTorch is available and in env_gloo_unavailable.cpp otherwise, so that the
// C ABI needs no LibTorch headers.
#pragma once

#include <memory>

#include "flopmeter/communicator.h"

namespace flopmeter::detail {

// Reads RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT; connects to a TCPStore on MASTER_PORT + port_offset
// (rank 0 serves it). Throws flopmeter::error naming the variable that is missing or malformed.
std::shared_ptr<communicator> make_env_gloo_communicator(int port_offset);

}  // namespace flopmeter::detail
