// make_tensorboard_sink in a build without protobuf (FLOPMETER_WITH_TENSORBOARD=OFF, or protobuf not found).
#include "flopmeter/error.h"
#include "flopmeter/tensorboard.h"

namespace flopmeter {

std::shared_ptr<sink> make_tensorboard_sink(const std::string& directory, std::shared_ptr<spdlog::logger>) {
  throw error(error_location{directory, 0, 0, ""},
              "this flopmeter was built without TensorBoard support (protobuf not found; Debian: "
              "libprotobuf-dev protobuf-compiler)");
}

}  // namespace flopmeter
