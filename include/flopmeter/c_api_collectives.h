/* flopmeter/c_api_collectives.h — the collectives flopmeter asks a trainer's flopmeter_comm for, and the
 * log-depth schedules to run them by (part of the C ABI; included by flopmeter/c_api.h, whose rules apply).
 *
 * A request (flopmeter_comm.start): one call per collective the library needs, whatever its kind.
 *
 * Schedules:
 * For a host layer whose transport runs flopmeter's per-log collectives itself (the Python package over
 * torch.distributed point-to-point messages): the library says, for each round, which peer a rank exchanges
 * with, which elements it sends and receives, and whether the received ones are combined or replace its own;
 * the transport only executes the steps. The schedules and their derivations are the library's
 * (plugin/comm/log_depth.h): an all-reduce by recursive halving and doubling (with a binary tree beyond the
 * levels that split), and an all-gather by recursive doubling, each with the fold of a world that is not a
 * power of two. Every rank of the group computes its own schedule; the steps of one round pair up. Pure
 * functions: any thread, any time. Added in 0.3.
 */
#ifndef FLOPMETER_C_API_COLLECTIVES_H_
#define FLOPMETER_C_API_COLLECTIVES_H_

#include <stddef.h>
#include <stdint.h>

#include "flopmeter/c_api.h" /* FLOPMETER_EXPORT, the return codes (c_api.h includes this file) */

#ifdef __cplusplus
extern "C" {
#endif

/* One collective, handed to flopmeter_comm.start (the struct is valid during that call; the buffers it points
 * to until the handle is finished or released). An ordinary log's SUM and MAX are one request, the per-rank
 * table another. A handle start returned is finished by the flopmeter_comm.wait that returns 0 or -1, which
 * also releases it: release is called only for a handle never waited for to its end. Every rank asks for the same kinds and sizes in the same
 * order. The library sets struct_size (sizeof(flopmeter_collective) of its header). */
#define FLOPMETER_COLLECTIVE_SUM_MAX \
  0 /* in place over values[0, count): the SUM of the first sum_count
                                          * elements and the MAX of the rest, over every rank */
#define FLOPMETER_COLLECTIVE_ALLGATHER \
  1 /* values is the world x count table: once done, values[q count,
                                          * (q + 1) count) holds rank q's send[0, count) for every q. At the
                                          * start it holds zeros but in this rank's slot, which holds send: a
                                          * SUM all-reduce of values is the all-gather too */
typedef struct flopmeter_collective {
  uint32_t struct_size;
  int32_t kind;       /* FLOPMETER_COLLECTIVE_* */
  double* values;     /* SUM_MAX: count values, reduced in place; ALLGATHER: world x count values, written */
  size_t count;       /* SUM_MAX: the elements; ALLGATHER: the elements per rank */
  size_t sum_count;   /* SUM_MAX: how many of the first elements are summed (the rest take the maximum) */
  const double* send; /* ALLGATHER: this rank's count values (also in its slot of values already) */
} flopmeter_collective;

/* The all-reduce of `count` doubles: the SUM of the first sum_count elements and the MAX of the rest (the
 * sum_count is the transport's to apply when combining; the schedule does not depend on it). */
#define FLOPMETER_LOG_DEPTH_ALLREDUCE 0
/* The all-gather of `count` doubles per rank: ranges index the world x count table (rank q's at q count). */
#define FLOPMETER_LOG_DEPTH_ALLGATHER 1

/* One rank's round: nothing (peer -1), or send values[send_begin, send_end) to `peer` and receive `peer`'s
 * values for [receive_begin, receive_end), both in flight together when both are non-empty. combine nonzero:
 * the received values are combined into values[receive_begin, receive_end) (element i adds when i <
 * sum_count, else takes the maximum, NaN winning and +0 over -0, so that the result does not depend on the
 * operands' order); 0: they replace them. */
typedef struct flopmeter_log_depth_step {
  int32_t peer;
  int32_t combine;
  uint64_t send_begin, send_end;
  uint64_t receive_begin, receive_end;
} flopmeter_log_depth_step;

/* Rank `rank`'s steps of collective `kind` (FLOPMETER_LOG_DEPTH_*) over `world` ranks, one per round, into
 * out[0..size): returns the number of rounds (0 for world 1 or count 0; call with size 0 to learn it, out
 * may then be NULL), or FLOPMETER_E_REJECTED for an unknown kind, world outside [1,
 * FLOPMETER_MAX_WORLD_SIZE] or rank outside [0, world). */
FLOPMETER_EXPORT int64_t flopmeter_log_depth_schedule(int kind, int rank, int world, size_t count,
                                                      flopmeter_log_depth_step* out, size_t size);

/* The group size from which small_allreduce "automatic" runs flopmeter's own Gloo group's per-log
 * collectives by these schedules (flopmeter/communicator.h, log_depth_min_ranks). */
FLOPMETER_EXPORT int flopmeter_log_depth_min_ranks(void);

#ifdef __cplusplus
}
#endif

#endif /* FLOPMETER_C_API_COLLECTIVES_H_ */
