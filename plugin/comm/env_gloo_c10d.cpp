// The C ABI's env-Gloo entry point in a LibTorch build: flopmeter's own Gloo group on a TCPStore that rank 0
// serves at MASTER_PORT + port_offset, so it never touches the trainer's store or process groups.
#include "comm/env_gloo.h"

#include "flopmeter/c10d.h"
#include "flopmeter/error.h"

namespace flopmeter::detail {

std::shared_ptr<communicator> make_env_gloo_communicator(int port_offset) {
  if (port_offset <= 0) {
    throw error("flopmeter_create_gloo_from_env: port_offset must be > 0 so flopmeter's store does not collide with "
                "the trainer's at MASTER_PORT (got " + std::to_string(port_offset) + ")");
  }
  gloo_env_options options;
  options.start_store_server = true;
  options.store_port_offset = port_offset;
  return make_gloo_communicator_from_env(options);
}

}  // namespace flopmeter::detail
