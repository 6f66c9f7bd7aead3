// flopmeter's own Gloo groups: from the trainer's c10d Store (make_gloo_communicator, flopmeter/c10d.h) or
// from the launch environment (make_gloo_communicator_from_env, flopmeter/gloo_env.h), both bounded in time
// by a watchdog; and the check that a group handed to flopmeter spans the whole job.
//
// Builds: with LibTorch this file compiles in flopmeter_torch (FLOPMETER_HAVE_TORCH=1); ProcessGroupGloo.hpp
// also needs Gloo's own headers (Debian: libgloo-dev), without which the factories throw. Without LibTorch it
// compiles into flopmeter alone and make_gloo_communicator_from_env throws, so the C ABI links either way.
//
// The bound (gloo_env.h, "Bounded"): the store connection and Gloo's rendezvous (connectFullMesh, whose
// Pair::connect can wait forever for a peer that died after publishing its address) run on a detached helper
// thread; the caller waits for it at most `timeout` and then throws. The helper owns everything it touches
// (shared state, copies of the options, the store), so an abandoned attempt finishes or fails on its own and
// frees its group there, never touching the caller's stack. The store and Gloo are given the same timeout, so
// in the common failures (a missing peer, an unreachable store) they give up by themselves at about the same
// time and the helper does not outlive the call by much.
#include "flopmeter/gloo_env.h"

#include <charconv>
#include <cstdlib>
#include <limits>
#include <string>
#include <utility>

#include "flopmeter/error.h"
#include "flopmeter/throughput.h"  // setting_range

#if FLOPMETER_HAVE_TORCH
#include <atomic>
#include <condition_variable>
#include <map>
#include <mutex>
#include <sstream>
#include <thread>

#include <c10/util/Exception.h>

#include "flopmeter/c10d.h"
#include "flopmeter/communicator.h"  // max_world_size
#include "comm/c10d_internal.h"

#if __has_include(<gloo/algorithm.h>)
// ProcessGroupGloo.hpp compiles to nothing unless USE_C10D_GLOO is defined (the `torch` CMake target defines
// it; a LibTorch found otherwise may not).
#ifndef USE_C10D_GLOO
#define USE_C10D_GLOO 1
#endif
#include <torch/csrc/distributed/c10d/HashStore.hpp>
#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>

#include "comm/c10d_compat.h"
#define FLOPMETER_C10D_HAVE_GLOO 1
#else
#define FLOPMETER_C10D_HAVE_GLOO 0
#endif
#endif  // FLOPMETER_HAVE_TORCH

namespace flopmeter {
namespace {

constexpr const char* kFromEnv = "make_gloo_communicator_from_env";

// The watchdog waits this much longer than the store and Gloo are given, so that a failure they detect
// themselves (an unreachable store, a missing peer) is reported with its own cause rather than as a timeout.
[[maybe_unused]] constexpr std::chrono::milliseconds kWatchdogGrace{500};  // LibTorch builds only

// Parses all of `text` as a decimal integer in [lo, hi]; `what` names it in errors, which start with `who`.
[[maybe_unused]] long long parse_integer(const std::string& who, const std::string& what, const std::string& text,
                                         long long lo, long long hi, const std::string& expectation) {
  long long value = 0;
  const char* first = text.data();
  const char* last = text.data() + text.size();
  const auto [end, ec] = std::from_chars(first, last, value);
  if (ec != std::errc() || end != last) throw error(who + ": " + what + "='" + text + "' is not an integer");
  if (value < lo || value > hi) {
    throw error(who + ": " + what + "=" + text + " is out of range (" + expectation + ")");
  }
  return value;
}

[[maybe_unused]] std::string require_env(const char* name) {
  const char* value = std::getenv(name);
  if (value == nullptr || *value == '\0') {
    throw error(std::string(kFromEnv) + ": environment variable " + name +
                " is not set (the launcher, e.g. torchrun, sets RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT)");
  }
  return value;
}

#if FLOPMETER_HAVE_TORCH && FLOPMETER_C10D_HAVE_GLOO

// Where a Gloo group is being built, for messages: "rank 1 of 3 (store 127.0.0.1:29501, keys 'flopmeter/0/')".
struct attempt {
  std::string who;
  int rank = 0;
  int world = 1;
  std::string where;
  std::chrono::milliseconds timeout{0};
};

// Runs `build` on a helper thread and returns its result, or throws when it fails or does not finish within
// attempt.timeout (the helper is then abandoned; see the file comment).
template <class Build>
std::shared_ptr<communicator> run_bounded(const attempt& a, Build build) {
  struct shared {
    std::mutex mutex;
    std::condition_variable done_cv;
    bool done = false;
    std::shared_ptr<communicator> result;
    std::exception_ptr failure;
  };
  auto state = std::make_shared<shared>();
  try {
    std::thread([state, build = std::move(build)]() mutable {
      std::shared_ptr<communicator> result;
      std::exception_ptr failure;
      try {
        result = build();
      } catch (...) {
        failure = std::current_exception();
      }
      std::lock_guard<std::mutex> lock(state->mutex);
      state->result = std::move(result);  // freed here, on this thread, if the caller has given up
      state->failure = failure;
      state->done = true;
      state->done_cv.notify_all();
    }).detach();
  } catch (const std::system_error& e) {
    throw error(a.who + ": rank " + std::to_string(a.rank) + " could not start the rendezvous thread: " + e.what());
  }
  std::unique_lock<std::mutex> lock(state->mutex);
  if (!state->done_cv.wait_for(lock, a.timeout + kWatchdogGrace, [&] { return state->done; })) {
    throw error(a.who + ": rank " + std::to_string(a.rank) + " of " + std::to_string(a.world) +
                ": the Gloo rendezvous did not finish within " + std::to_string(a.timeout.count()) + " ms (" +
                a.where + "); a peer, or the rank that serves the store, died, hung or never started. The attempt "
                "was abandoned; every rank gives up within the same bound. Raise the timeout if ranks start far "
                "apart.");
  }
  if (state->failure) {
    try {
      std::rethrow_exception(state->failure);
    } catch (const error& e) {  // flopmeter's own: what failed is already in the message
      throw error(a.who + ": rank " + std::to_string(a.rank) + " " + e.what());
    } catch (...) {
    }
    throw error(a.who + ": rank " + std::to_string(a.rank) + " of " + std::to_string(a.world) +
                " could not set up the Gloo group (" + a.where + "): " + detail::describe_exception(state->failure));
  }
  return std::move(state->result);
}

// The Gloo group itself, over a store every rank shares (already prefixed). Runs on the helper thread.
std::shared_ptr<communicator> build_gloo_group(const c10::intrusive_ptr<c10d::Store>& store, int rank, int world,
                                               std::chrono::milliseconds timeout, const std::string& hostname,
                                               small_allreduce allreduce, const std::string& who) {
  auto gloo_options = c10d::ProcessGroupGloo::Options::create(timeout);
  if (!hostname.empty()) {
    gloo_options->devices.push_back(c10d::ProcessGroupGloo::createDeviceForHostname(hostname));
  } else if (const char* ifnames = std::getenv("GLOO_SOCKET_IFNAME"); ifnames != nullptr && *ifnames) {
    std::stringstream list(ifnames);
    std::string name;
    while (std::getline(list, name, ',')) {
      if (!name.empty()) gloo_options->devices.push_back(c10d::ProcessGroupGloo::createDeviceForInterface(name));
    }
  }
  if (gloo_options->devices.empty()) gloo_options->devices.push_back(c10d::ProcessGroupGloo::createDefaultDevice());
  gloo_options->threads = 1;  // one small collective per log
  auto gloo = c10::make_intrusive<c10d::ProcessGroupGloo>(store, rank, world, gloo_options);
  auto group = c10d_compat::as_process_group(store, rank, world, std::move(gloo), c10d_compat::kGloo,
                                             c10::DeviceType::CPU, timeout);
  return detail::make_own_c10d_communicator(std::move(group), allreduce, timeout, who);
}

// flopmeter's own store on the *_from_env path, under its key prefix, which it lets go once the group stands.
// ProcessGroupGloo keeps the store it was built over for the group's lifetime, but needs it only for the
// rendezvous (connectFullMesh, in its constructor). Kept, a TCPStore costs every rank a connection to rank 0
// and, with libtorch 1.13, a client thread that ends the process on a connection reset or polls a closed
// socket in a loop once rank 0's store is gone (METRICS.md, "When things go wrong"). release() swaps the
// TCPStore for an empty in-memory store: the TCPStore (client, and on rank 0 the server) is destroyed here,
// and anything that still asks the store later waits on the empty one until its timeout instead of
// reaching a dead peer.
class releasable_store final : public c10d::PrefixStore {
 public:
  releasable_store(const std::string& prefix, c10::intrusive_ptr<c10d::Store> store)
      : c10d::PrefixStore(prefix, std::move(store)) {}
  void release() { store_ = c10::make_intrusive<c10d::HashStore>(); }
};

// A barrier over a new group: one SUM all-reduce of one value, waited for at most `timeout`.
void barrier(communicator& comm, std::chrono::milliseconds timeout, const char* what) {
  double one = 1;
  std::unique_ptr<pending_collective> pending = comm.start_allreduce_sum(&one, 1);
  const collective_status status = pending->wait(timeout);
  if (status != collective_status::done) {
    throw error(
        std::string("the group stands, but the barrier before ") + what +
        (status == collective_status::pending ? " did not finish in time" : " failed: " + pending->error_message()));
  }
}

std::atomic<unsigned> env_generation{0};

// The n-th call of make_gloo_communicator for `rank` in this process (0, 1, ...): counted per rank, so that ranks
// run as threads of one process (c10d's own test pattern) meet each other's n-th call, as processes do.
unsigned next_store_generation(int rank) {
  static std::mutex mutex;
  static std::map<int, unsigned> calls;
  std::lock_guard<std::mutex> lock(mutex);
  return calls[rank]++;
}

#endif  // FLOPMETER_HAVE_TORCH && FLOPMETER_C10D_HAVE_GLOO

}  // namespace

#if FLOPMETER_HAVE_TORCH

namespace detail {

std::string describe_exception(const std::exception_ptr& e) {
  if (!e) return "unknown error";
  try {
    std::rethrow_exception(e);
  } catch (const c10::Error& err) {
    return err.what_without_backtrace();
  } catch (const std::exception& err) {
    return err.what();
  } catch (...) {
    return "unknown non-standard exception";
  }
}

void check_group_covers_job(const std::string& who, int group_size, int stated_job_world_size) {
  std::string source;
  long long job = 0;
  if (stated_job_world_size > 0) {
    job = stated_job_world_size;
    source = "job_world_size=" + std::to_string(job);
  } else if (const char* env = std::getenv("WORLD_SIZE"); env != nullptr && *env != '\0') {
    job = parse_integer(who, "WORLD_SIZE", env, 1, std::numeric_limits<int>::max(),
                        "must be in [1, " + std::to_string(std::numeric_limits<int>::max()) + "]");
    source = "WORLD_SIZE=" + std::to_string(job);
  } else {
    return;  // the job's size is not known here
  }
  if (group_size == job) return;
  throw error(who + ": the group has " + std::to_string(group_size) + " rank" + (group_size == 1 ? "" : "s") +
              " but the job has " + std::to_string(job) + " (" + source +
              "). flopmeter needs one group over every rank of the job, not the data-parallel group: it derives the "
              "dp, tp, cp and pp groups itself from the plugin config's [parallel]. Pass a group of flopmeter's own "
              "over all ranks (flopmeter::make_gloo_communicator(store, rank, world_size) with the trainer's store, "
              "or make_gloo_communicator_from_env()), or the world group.");
}

}  // namespace detail

std::shared_ptr<communicator> make_gloo_communicator(c10::intrusive_ptr<c10d::Store> store, int rank, int world_size,
                                                     const gloo_group_options& options) {
  const std::string who = "make_gloo_communicator";
#if FLOPMETER_C10D_HAVE_GLOO
  if (!store) throw error(who + ": the store is null (pass the trainer's c10d Store, e.g. its TCPStore)");
  if (world_size < 1) throw error(who + ": world_size must be >= 1 (got " + std::to_string(world_size) + ")");
  if (rank < 0 || rank >= world_size) {
    throw error(who + ": rank " + std::to_string(rank) + " is outside [0, world_size) = [0, " +
                std::to_string(world_size) + ")");
  }
  if (options.timeout <= std::chrono::milliseconds(0) ||
      options.timeout > std::chrono::milliseconds(setting_range::max_timeout_ms)) {
    throw error(who + ": timeout must be in (0, 3600000] ms, got " + std::to_string(options.timeout.count()));
  }
  detail::check_group_covers_job(who, world_size, 0);
  const std::string prefix =
      options.store_key_prefix + "/group/" + std::to_string(next_store_generation(rank));
  attempt a{who, rank, world_size, "keys '" + prefix + "/' in the trainer's store", options.timeout};
  const std::string hostname = options.gloo_hostname;
  const std::chrono::milliseconds timeout = options.timeout;
  const small_allreduce allreduce = options.allreduce;
  return run_bounded(a, [store = std::move(store), prefix, rank, world_size, timeout, hostname, allreduce, who]() {
    // Gloo waits for flopmeter's keys with its own timeout (ProcessGroupGloo passes it to every store wait);
    // the trainer's store and its timeout are left as they are.
    auto prefixed = c10::make_intrusive<c10d::PrefixStore>(prefix, store);
    return build_gloo_group(prefixed, rank, world_size, timeout, hostname, allreduce, who);
  });
#else
  (void)store;
  (void)rank;
  (void)world_size;
  (void)options;
  throw error(who + ": flopmeter was built without Gloo's headers (Debian: libgloo-dev); pass a ProcessGroup to "
                    "make_c10d_communicator instead");
#endif
}

#endif  // FLOPMETER_HAVE_TORCH

std::shared_ptr<communicator> make_gloo_communicator_from_env(std::chrono::milliseconds timeout) {
  gloo_env_options options;
  options.timeout = timeout;
  return make_gloo_communicator_from_env(options);
}

std::shared_ptr<communicator> make_gloo_communicator_from_env(const gloo_env_options& options) {
#if FLOPMETER_HAVE_TORCH && FLOPMETER_C10D_HAVE_GLOO
  const std::string who = kFromEnv;
  if (options.timeout <= std::chrono::milliseconds(0) ||
      options.timeout > std::chrono::milliseconds(setting_range::max_timeout_ms)) {
    throw error(who + ": timeout must be in (0, 3600000] ms, got " + std::to_string(options.timeout.count()));
  }
  // Refused up front, not after a rendezvous timeout that would blame a dead peer: a job larger than
  // flopmeter's per-log buffer allows (the C ABI's bound) can never finish a rendezvous worth having.
  const long long world = parse_integer(who, "WORLD_SIZE", require_env("WORLD_SIZE"), 1, max_world_size,
                                        "must be in [1, " + std::to_string(max_world_size) +
                                            "], the most ranks flopmeter supports (FLOPMETER_MAX_WORLD_SIZE)");
  const long long rank = parse_integer(who, "RANK", require_env("RANK"), 0, world - 1,
                                       "must be in [0, WORLD_SIZE) = [0, " + std::to_string(world) + ")");
  const std::string address = require_env("MASTER_ADDR");
  const long long base_port =
      parse_integer(who, "MASTER_PORT", require_env("MASTER_PORT"), 1, 65535, "must be in [1, 65535]");
  const long long port = base_port + options.store_port_offset;
  if (port < 1 || port > 65535) {
    throw error(who + ": MASTER_PORT=" + std::to_string(base_port) + " + store_port_offset=" +
                std::to_string(options.store_port_offset) + " = " + std::to_string(port) +
                " is not a valid port (1..65535)");
  }
  const bool flopmeter_serves = options.start_store_server;  // else the trainer's rank 0 hosts the store
  const bool serve = flopmeter_serves && rank == 0;
  const std::string where = address + ":" + std::to_string(port);
  const std::string prefix = options.store_key_prefix + "/" + std::to_string(env_generation.fetch_add(1));
  attempt a{who, static_cast<int>(rank), static_cast<int>(world), "store " + where + ", keys '" + prefix + "/'",
            options.timeout};
  const std::chrono::milliseconds timeout = options.timeout;
  const std::string hostname = options.gloo_hostname;
  const small_allreduce allreduce = options.allreduce;
  return run_bounded(a, [=]() {
    c10::intrusive_ptr<c10d::Store> tcp;
    try {
      c10d::TCPStoreOptions store_options;
      store_options.port = static_cast<std::uint16_t>(port);
      store_options.isServer = serve;
      // No worker counting: it would add to the trainer's own "init/" key when its server is the one we use.
      // The Gloo rendezvous waits for every rank anyway.
      store_options.numWorkers = c10::nullopt;
      store_options.waitWorkers = false;
      store_options.timeout = timeout;
      tcp = c10::make_intrusive<c10d::TCPStore>(address, store_options);
    } catch (...) {
      // Who should be serving the store decides the advice: the trainer (start_store_server false), or
      // flopmeter's own rank 0 (true; always so through the C ABI, which has no start_store_server).
      std::string what = serve ? "could not start a TCPStore server at " + where + " (is the port free on this host?)"
                               : "could not reach the TCPStore at " + where;
      if (!serve) {
        what += flopmeter_serves
                    ? " (flopmeter's rank 0 serves it there: is rank 0 running, and MASTER_ADDR reachable from here?)"
                    : " (does the trainer host one there? otherwise set start_store_server)";
      }
      throw error(what + ": " + detail::describe_exception(std::current_exception()));
    }
    auto store = c10::make_intrusive<releasable_store>(prefix, std::move(tcp));
    std::shared_ptr<communicator> comm =
        build_gloo_group(store, static_cast<int>(rank), static_cast<int>(world), timeout, hostname, allreduce, who);
    // The store is dropped on every rank once the group stands: the clients first (after a barrier, no rank
    // reads a key any more), then, after a second barrier (every client has closed its connection), the
    // server on the rank that serves it. A server that goes while clients are connected is what makes their
    // client threads spin or abort.
    barrier(*comm, timeout, "dropping the rendezvous store");
    if (!serve) store->release();
    barrier(*comm, timeout, "stopping the rendezvous store's server");
    if (serve) store->release();
    return comm;
  });
#elif FLOPMETER_HAVE_TORCH
  (void)options;
  throw error(std::string(kFromEnv) +
              ": flopmeter was built without Gloo's headers (Debian: libgloo-dev), so it cannot create a Gloo "
              "group; pass a ProcessGroup to make_c10d_communicator (or a flopmeter_comm to flopmeter_create)");
#else
  (void)options;
  throw error(std::string(kFromEnv) +
              ": flopmeter was built without LibTorch, so it cannot create a Gloo group; pass a communicator of "
              "your own (or a flopmeter_comm to flopmeter_create) instead");
#endif
}

}  // namespace flopmeter
