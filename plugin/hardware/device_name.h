// plugin/hardware/device_name.h — internal: the name of the GPU this process runs on, for [peak] gpu = "auto".
//
// Read through the CUDA driver API (libcuda.so.1, loaded with dlopen when asked, never linked): the core
// library stays loadable on a machine without CUDA, and a build without the CUDA toolkit still detects the GPU
// of the machine it runs on. The device is the current context's (the one the trainer selected, e.g. with
// torch.cuda.set_device), else device 0. Not installed. Thread-safety: may be called from any thread.
#pragma once

#include <string>

namespace flopmeter::detail {

struct detected_device {
  std::string name;  // e.g. "NVIDIA H100 80GB HBM3"; "" when no device was found
  std::string why;   // when `name` is "": what was missing ("no CUDA driver: libcuda.so.1 ...")
};

detected_device detect_cuda_device();

}  // namespace flopmeter::detail
