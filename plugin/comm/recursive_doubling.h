// plugin/comm/recursive_doubling.h — internal: the log-depth all-reduce of an ordinary log's fixed-size vector.
//
// An ordinary log reduces one short vector: a SUM part and a MAX part (log_reduction.h), 71 doubles. c10d's
// Gloo all-reduce is a ring: 2 (world - 1) message rounds, whatever the size, so its latency grows linearly
// with the job. Recursive doubling takes floor(log2 world) rounds: in the round of distance d every rank swaps
// its partial vector with rank r XOR d and combines both, so after the last round every rank holds the whole
// reduction. A world that is not a power of two first folds its extra ranks in: with pof2 the largest power of
// two <= world and rem = world - pof2, each even rank r < 2 rem sends its vector to r + 1 and sits out; the
// doubling then runs over pof2 ranks; a last round sends the result back to the ranks that sat out. Rounds:
// floor(log2 world), plus 2 when world is not a power of two (world 1: none). Bytes sent per rank per round:
// the whole vector (568 B), against about 2 x 568 B in total by the ring; the ring's advantage in bytes is
// irrelevant at this size (568 B at 3 GB/s is 0.19 us, a round trip over TCP ~50 us).
//
// Every rank ends with the same bits: both partners of an exchange combine the same two vectors with a
// combination that does not depend on their order (IEEE addition is commutative; the maximum below is made
// symmetric for NaN and signed zeros), and the ranks that sat out receive the result itself.
//
// The schedule (which peer, which action, in which round) is a pure function, shared by the c10d adapter
// (c10d_recursive_doubling.cpp, real sends over a Gloo group), the simulator (bench/bench_collective_sim.cpp)
// and the tests; python/flopmeter/_doubling.py is the same schedule in Python. Thread-safety: pure functions.
#pragma once

#include <cstddef>
#include <vector>

namespace flopmeter::detail {

// What one rank does in one round.
enum class doubling_action {
  idle,                  // nothing this round (a rank outside the fold, or one that sat out)
  send_partial,          // fold-in: send this rank's vector to `peer`, then sit out until the result comes
  receive_and_combine,   // fold-in: receive `peer`'s vector and combine it into this rank's
  exchange_and_combine,  // a doubling round: send this rank's vector to `peer`, receive `peer`'s, combine
  send_result,           // fold-out: send the reduced vector to `peer` (the rank that sat out)
  receive_result,        // fold-out: receive the reduced vector from `peer`; it replaces this rank's
};

struct doubling_step {
  doubling_action action = doubling_action::idle;
  int peer = -1;
};

// Rounds of the schedule for `world` ranks: floor(log2 world) + (world is a power of two ? 0 : 2); 0 for 1.
int recursive_doubling_rounds(int world);

// Rank `rank`'s step in every round (recursive_doubling_rounds(world) steps). Throws flopmeter::error unless
// 1 <= world and 0 <= rank < world.
std::vector<doubling_step> recursive_doubling_schedule(int rank, int world);

// Combines `other` into `into`: the first sum_count values add, the next max_count take the maximum. The
// result does not depend on which operand is which, bit for bit: a NaN on either side gives NaN (a broken
// value must not vanish in the maximum), and of two equal values +0 wins over -0.
void combine_sum_max(double* into, const double* other, std::size_t sum_count, std::size_t max_count);

// The messages of one rank, sent and received in the order the schedule gives. Each call returns once its
// messages are through, or throws (a failed or timed-out send or receive).
class doubling_transport {
 public:
  virtual ~doubling_transport() = default;
  virtual void send(int peer, const double* values, std::size_t count) = 0;
  virtual void receive(int peer, double* values, std::size_t count) = 0;
  // Sends `out` to `peer` and receives `peer`'s vector into `in`, both in flight together.
  virtual void exchange(int peer, const double* out, double* in, std::size_t count) = 0;
};

// Runs rank `rank`'s schedule over `transport`: on return values[0, sum_count + max_count) holds the SUM of
// every rank's first sum_count values and the maximum of the rest. Throws what the transport throws.
void run_recursive_doubling(doubling_transport& transport, int rank, int world, double* values, std::size_t sum_count,
                            std::size_t max_count);

}  // namespace flopmeter::detail
