// The C ABI's env-Gloo entry point in a build without LibTorch: a clear error instead of a missing symbol.
#include "comm/env_gloo.h"

#include "flopmeter/error.h"

namespace flopmeter::detail {

std::shared_ptr<communicator> make_env_gloo_communicator(int /*port_offset*/) {
  throw error("flopmeter was built without LibTorch, so it cannot create a Gloo group; pass a flopmeter_comm "
              "to flopmeter_create instead");
}

}  // namespace flopmeter::detail
