// plugin/hardware/device_name.cpp — the GPU's name through the CUDA driver API, loaded at run time (see
// device_name.h). Only four entry points are used, with their documented C signatures (CUresult and CUdevice
// are ints): cuInit, cuCtxGetDevice, cuDeviceGet, cuDeviceGetName.

#include "hardware/device_name.h"

#include <dlfcn.h>

#include <string>

namespace flopmeter::detail {
namespace {

using cu_init_fn = int (*)(unsigned int);
using cu_ctx_get_device_fn = int (*)(int*);
using cu_device_get_fn = int (*)(int*, int);
using cu_device_get_name_fn = int (*)(char*, int, int);

constexpr int kCudaSuccess = 0;
constexpr int kNameBytes = 256;  // what cudaDeviceProp::name holds

template <typename Fn>
Fn symbol(void* library, const char* name) {
  return reinterpret_cast<Fn>(dlsym(library, name));
}

}  // namespace

detected_device detect_cuda_device() {
  detected_device out;
  // Kept loaded: the trainer's own CUDA use shares it, and unloading a driver library is not safe.
  void* library = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (library == nullptr) {
    out.why = "no CUDA driver: libcuda.so.1 cannot be loaded";
    return out;
  }
  const auto init = symbol<cu_init_fn>(library, "cuInit");
  const auto ctx_get_device = symbol<cu_ctx_get_device_fn>(library, "cuCtxGetDevice");
  const auto device_get = symbol<cu_device_get_fn>(library, "cuDeviceGet");
  const auto device_get_name = symbol<cu_device_get_name_fn>(library, "cuDeviceGetName");
  if (init == nullptr || device_get == nullptr || device_get_name == nullptr) {
    out.why = "the CUDA driver (libcuda.so.1) lacks cuInit, cuDeviceGet or cuDeviceGetName";
    return out;
  }
  const int status = init(0);
  if (status != kCudaSuccess) {
    out.why = "the CUDA driver reports no usable device (cuInit returned " + std::to_string(status) + ")";
    return out;
  }
  int device = -1;
  if (ctx_get_device == nullptr || ctx_get_device(&device) != kCudaSuccess) {
    if (device_get(&device, 0) != kCudaSuccess) {
      out.why = "the CUDA driver reports no device";
      return out;
    }
  }
  char name[kNameBytes] = {};
  if (device_get_name(name, kNameBytes, device) != kCudaSuccess) {
    out.why = "the CUDA driver cannot name device " + std::to_string(device);
    return out;
  }
  out.name = std::string(name);
  if (out.name.empty()) out.why = "the CUDA driver names device " + std::to_string(device) + " \"\"";
  return out;
}

}  // namespace flopmeter::detail
