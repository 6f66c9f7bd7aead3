// The C ABI's log-depth schedules (c_api_collectives.h): comm/log_depth.h's schedules, marshalled.
#include <cstddef>
#include <cstdint>
#include <vector>

#include "comm/log_depth.h"
#include "flopmeter/c_api.h"
#include "flopmeter/communicator.h"

static_assert(FLOPMETER_MAX_WORLD_SIZE == flopmeter::max_world_size, "c_api.h and communicator.h must agree");

extern "C" {

int64_t flopmeter_log_depth_schedule(int kind, int rank, int world, size_t count, flopmeter_log_depth_step* out,
                                     size_t size) {
  if (world < 1 || world > FLOPMETER_MAX_WORLD_SIZE || rank < 0 || rank >= world) return FLOPMETER_E_REJECTED;
  if (kind != FLOPMETER_LOG_DEPTH_ALLREDUCE && kind != FLOPMETER_LOG_DEPTH_ALLGATHER) return FLOPMETER_E_REJECTED;
  try {
    const std::vector<flopmeter::detail::log_depth_step> steps =
        kind == FLOPMETER_LOG_DEPTH_ALLREDUCE ? flopmeter::detail::log_depth_allreduce_schedule(rank, world, count)
                                              : flopmeter::detail::log_depth_allgather_schedule(rank, world, count);
    for (std::size_t i = 0; i < steps.size() && out != nullptr && i < size; ++i) {
      const flopmeter::detail::log_depth_step& s = steps[i];
      out[i].peer = s.peer;
      out[i].combine = s.combine ? 1 : 0;
      out[i].send_begin = s.send.begin;
      out[i].send_end = s.send.end;
      out[i].receive_begin = s.receive.begin;
      out[i].receive_end = s.receive.end;
    }
    return static_cast<int64_t>(steps.size());
  } catch (...) {  // out of memory: nothing crosses the C ABI
    return FLOPMETER_E_REJECTED;
  }
}

int flopmeter_log_depth_min_ranks(void) { return flopmeter::log_depth_min_ranks; }

}  // extern "C"
