// Internal: what differs in c10d between LibTorch 1.13 (Debian's libtorch-dev, what CI builds against) and
// LibTorch 2.x, in one place. Used by plugin/c10d_communicator.cpp and tests/gloo_harness.h.
//
//   1.13  ProcessGroupGloo / ProcessGroupNCCL derive from c10d::ProcessGroup: a backend IS a group.
//   2.x   They derive from c10d::Backend; a c10d::ProcessGroup holds one backend per device type and routes
//         its collectives through the dispatcher (c10d::allreduce_ ...) to the backend of the tensors'
//         device. torch.distributed builds that wrapper in Python; a C++ program builds it itself:
//         `as_process_group` below. Before 2.5 the ProcessGroup constructor took ProcessGroup::Options
//         (whose `backend` string picked the default backend); from 2.5 on it takes (store, rank, size) and
//         setDefaultBackend picks it. Both shapes are detected at compile time, not by version number.
// Unchanged across these versions (so used without a check): c10d::Work (isCompleted, exception, and
// wait(timeout) that throws "Operation timed out!" on a positive timeout and blocks for kNoTimeout = 0),
// ProcessGroup::getBackendName/getRank/getSize, AllreduceOptions, TCPStoreOptions' fields used here.
#pragma once

#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>
#include <torch/csrc/distributed/c10d/Store.hpp>
#include <torch/version.h>

#include <chrono>
#include <string>
#include <type_traits>
#include <utility>

#if TORCH_VERSION_MAJOR >= 2
#define FLOPMETER_C10D_BACKEND_SPLIT 1
#else
#define FLOPMETER_C10D_BACKEND_SPLIT 0
#endif

namespace flopmeter::c10d_compat {

#if FLOPMETER_C10D_BACKEND_SPLIT

namespace detail {

// ProcessGroup::setDefaultBackend exists from 2.5 on (earlier, Options::backend chose the default).
template <class PG, class T>
auto set_default_backend(PG& group, T type, int) -> decltype(group.setDefaultBackend(type), void()) {
  group.setDefaultBackend(type);
}
template <class PG, class T>
void set_default_backend(PG&, T, long) {}

template <class PG>
c10::intrusive_ptr<PG> make_group(const c10::intrusive_ptr<c10d::Store>& store, int rank, int size,
                                  const std::string& backend_name, std::chrono::milliseconds timeout) {
  if constexpr (std::is_constructible_v<PG, const c10::intrusive_ptr<c10d::Store>&, int, int>) {
    (void)backend_name;
    (void)timeout;
    return c10::make_intrusive<PG>(store, rank, size);
  } else {
    auto options = c10::make_intrusive<typename PG::Options>(backend_name, timeout);
    return c10::make_intrusive<PG>(store, rank, size, options);
  }
}

}  // namespace detail

// Registers `backend` (a ProcessGroupGloo, a ProcessGroupNCCL, ...) on a new ProcessGroup over `store` as the
// backend for `device_type` and as the group's default, so that getBackendName() names it and collectives on
// tensors of that device reach it. `type` is ProcessGroup::BackendType::GLOO, NCCL, ...
template <class B>
c10::intrusive_ptr<c10d::ProcessGroup> as_process_group(const c10::intrusive_ptr<c10d::Store>& store, int rank,
                                                        int size, c10::intrusive_ptr<B> backend,
                                                        c10d::ProcessGroup::BackendType type,
                                                        c10::DeviceType device_type,
                                                        std::chrono::milliseconds timeout) {
  const std::string name = backend->getBackendName();
  auto group = detail::make_group<c10d::ProcessGroup>(store, rank, size, name, timeout);
  group->setBackend(device_type, type, c10::intrusive_ptr<c10d::Backend>(std::move(backend)));
  detail::set_default_backend(*group, type, 0);
  return group;
}

#else  // LibTorch 1.x: the backend is the group.

template <class B>
c10::intrusive_ptr<c10d::ProcessGroup> as_process_group(const c10::intrusive_ptr<c10d::Store>& /*store*/,
                                                        int /*rank*/, int /*size*/, c10::intrusive_ptr<B> backend,
                                                        int /*type: unused*/, c10::DeviceType /*device_type*/,
                                                        std::chrono::milliseconds /*timeout*/) {
  return c10::intrusive_ptr<c10d::ProcessGroup>(std::move(backend));
}

#endif

// The BackendType argument of as_process_group for Gloo (an int placeholder on 1.x, which has none).
#if FLOPMETER_C10D_BACKEND_SPLIT
inline constexpr c10d::ProcessGroup::BackendType kGloo = c10d::ProcessGroup::BackendType::GLOO;
#else
inline constexpr int kGloo = 1;
#endif

}  // namespace flopmeter::c10d_compat
