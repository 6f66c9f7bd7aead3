// plugin/comm/log_depth.h — internal: the log-depth collectives of flopmeter's own Gloo groups, as pure
// schedules and a run over a transport.
//
// Two collectives, each a schedule of steps (one per round) that names the peer and the ranges of elements
// sent and received. c10d's Gloo algorithms are rings, 2 (world - 1) or world - 1 message rounds, so their
// latency grows linearly with the job; these take a number of rounds logarithmic in it.
//
// 1. The ordinary log's all-reduce of N = sum_count + max_count doubles (log_reduction.h: 22 SUM + 49 MAX,
//    N = 71), SUM on the first sum_count elements and MAX on the rest: recursive halving (a reduce-scatter),
//    then recursive doubling (an all-gather), Rabenseifner's algorithm.
//    - Fold-in: with pof2 the largest power of two <= world and rem = world - pof2, each even rank r < 2 rem
//      sends its whole vector to r + 1, which combines it, and sits out until the fold-out. The other pof2
//      ranks take the indices 0 .. pof2 - 1 (rank 2i+1 is i for i < rem, rank r >= 2 rem is r - rem).
//    - Reduce-scatter, levels k = 0 .. L - 1 (L = log2 pof2), distance d = 2^k: index i and its partner i ^ d
//      hold the same segment [b, e) (they agree on every bit not yet used). While it has 2 elements or more it
//      splits at m = b + floor((e - b) / 2): the index whose bit d is 0 keeps [b, m), the other [m, e); each
//      sends the half it gives up and combines the partner's copy of the half it keeps into its own. A segment
//      of one element cannot split: both partners swap it and both combine it (a doubling level), with the
//      symmetric combination below.
//    - Shared levels. After H = min(L, ceil(log2 N)) levels every segment is one element, held by the
//      G = 2^(L - H) indices that agree on the low H bits. With D = L - H >= 4 such levels, instead of D
//      doubling levels (one element each way per level, D in all), a binary tree over those G indices
//      reduces the element and broadcasts it back: member j = index >> H, parent (j - 1) / 2, children
//      2j + 1 (left) and 2j + 2 (right). Reduce, for each depth d from D up to 1: the left children of
//      depth d send to their parents, which combine, then the right children do; broadcast, for d from 1 to
//      D: parents send to their left children, then to their right children, which replace their copy. The
//      deepest level has one node (2^D - 1, a left child), so its right-child round is left out both ways:
//      4D - 2 rounds. A member sends and receives at most 3 elements (2 children and a parent), whatever D.
//      Below 4 shared levels doubling moves at most 3 too, in D rounds instead of 4D - 2, so it stays.
//    - All-gather, the halving levels in reverse order: each sends the segment it kept (now reduced over
//      the whole group that shares it) and takes the partner's, which replaces its own stale copy.
//      Levels where no pair halved are left out: segments after k splits have at most ceil(N / 2^k)
//      elements, so level k halves somewhere only when N > 2^k, i.e. for k < ceil(log2 N).
//    - Fold-out: rank 2i+1 sends the whole result to rank 2i.
//    Rounds: 2H + D (D < 4) or 2H + 4D - 2 (D >= 4), H = min(L, ceil(log2 N)), D = L - H; + 2 when world
//    is not a power of two; 0 for world 1 or N 0. N = 71 (H = 7): L + 7 up to 1,024 ranks (L = 10), then
//    4L - 16: 40 at 16,384 ranks, 52 at 131,072.
//    Elements per rank: a rank that halves at levels 0 .. h - 1 with segment sizes s_0 = N, s_1, ..., s_h
//    sends s_k - s_(k+1) and receives s_(k+1) at level k, and the reverse in the all-gather; each doubling
//    level moves 1 each way, the tree at most 3. Sent, and received, at most
//      (N - s_h) + sum_(k=1..h) s_k + (H - h) + min(D, 3),
//    and with s_k <= ceil(N / 2^k), s_h >= 1 and h <= H, at most
//      (N - 1) + S(N) + min(D, 3),   S(N) = sum_(k=1..ceil(log2 N)) ceil(N / 2^k),
//    whatever the world: S(N) <= N + ceil(log2 N) - 1 (each ceil adds less than 1 to N / 2^k), so at most
//    2 N + ceil(log2 N) + 1 elements. For N = 71 (S = 36 + 18 + 9 + 5 + 3 + 2 + 1 = 74): at most 147 elements,
//    1,176 B, from 1,024 ranks (D = 3) on, at 16,384 and at 131,072 ranks alike, against the whole vector per
//    level by plain recursive doubling (568 B x 17 = 9,656 B at 131,072). A rank of the fold moves N more each
//    way (its fold message).
//    Worked example, world 4, N 5 (no fold; L = 2, ceil(log2 5) = 3, so no doubling level):
//      level 0 (d 1): pairs (0,1), (2,3) split [0,5) at 2. Rank 0 sends [2,5), receives [0,2), keeps [0,2);
//        rank 1 sends [0,2), receives [2,5), keeps [2,5); ranks 2 and 3 likewise.
//      level 1 (d 2): pair (0,2) splits [0,2) at 1: rank 0 keeps [0,1), sends [1,2); rank 2 keeps [1,2),
//        sends [0,1). Pair (1,3) splits [2,5) at 3: rank 1 keeps [2,3), sends [3,5); rank 3 keeps [3,5),
//        sends [2,3).
//      all-gather level 1: rank 0 sends [0,1), receives [1,2); rank 2 the reverse; rank 1 sends [2,3),
//        receives [3,5); rank 3 the reverse. All-gather level 0: rank 0 sends [0,2), receives [2,5); rank 1
//        the reverse; ranks 2 and 3 likewise. Rounds 4; rank 0 sends 3 + 1 + 1 + 2 = 7 elements, rank 3
//        2 + 1 + 2 + 3 = 8 (bound: (5 - 1) + S(5) = 4 + 3 + 2 + 1 = 10).
//    World 3, N 5 (pof2 2, rem 1): rank 0 sends [0,5) to rank 1 (fold-in); level 0: rank 1 (index 0) sends
//      [2,5) to rank 2 (index 1), receives [0,2); rank 2 sends [0,2), receives [2,5); all-gather: rank 1 sends
//      [0,2), receives [2,5), rank 2 the reverse; fold-out: rank 1 sends [0,5) to rank 0. Rounds 4.
//    Every rank ends with the same bits: each element's halving-phase reduction is done by one chain of
//    ranks, then its final owners (those sharing its segment) combine symmetrically at the doubling levels
//    (IEEE addition is commutative; the maximum below is made symmetric for NaN and signed zeros) or the
//    tree's root alone combines it and sends copies down, and every other rank receives copies of those bits.
//    Worked example of the tree, world 16, N 1 (H 0, D 4; members are the ranks, 14 rounds): reduce depth 4:
//    15 -> 7; depth 3: 7, 9, 11, 13 -> 3, 4, 5, 6, then 8, 10, 12, 14 -> 3, 4, 5, 6; depth 2: 3, 5 -> 1, 2,
//    then 4, 6 -> 1, 2; depth 1: 1 -> 0, then 2 -> 0. Broadcast: 0 -> 1, 0 -> 2; 1 -> 3, 2 -> 5, then
//    1 -> 4, 2 -> 6; 3 -> 7, ..., 6 -> 13, then 3 -> 8, ..., 6 -> 14; 7 -> 15. Rank 3 receives from 7 and 8
//    and sends to 1, then receives from 1 and sends to 7 and 8: 3 elements each way; rank 7 (one child, 15)
//    2 each way; rank 15 1.
//
// 2. The per-rank table's all-gather (count doubles per rank, recv world x count): recursive doubling over
//    blocks. Fold-in: even rank r < 2 rem sends its block to r + 1. Index i holds the blocks of the ranks of
//    the indices [i & ~(d - 1), + d) before level d (a contiguous range of ranks: index i stands for ranks
//    [first(i), first(i + 1)), first(i) = 2i for i < rem, else i + rem); it swaps that range with index i ^ d.
//    Fold-out: rank 2i+1 sends the whole table to rank 2i. Rounds: L, + 2 when world is not a power of two.
//    Elements sent per rank: (pof2 - 1) x blocks, about (world - 1) x count, as by a ring, in L rounds instead
//    of world - 1. Every rank ends with copies of each rank's block: the backend's all-gather, bit for bit.
//
// The schedules are pure functions, shared by the c10d adapter (c10d_log_depth.cpp, real sends over a Gloo
// group), the simulator (bench/bench_collective_sim.cpp), the tests, and through the C ABI
// (flopmeter_log_depth_schedule) the Python package, whose transport executes them. Thread-safety: pure
// functions.
#pragma once

#include <cstddef>
#include <vector>

namespace flopmeter::detail {

// The elements [begin, end) of a buffer.
struct element_range {
  std::size_t begin = 0;
  std::size_t end = 0;
  std::size_t size() const { return end - begin; }
  bool empty() const { return end == begin; }
  friend bool operator==(const element_range& a, const element_range& b) {
    return a.begin == b.begin && a.end == b.end;
  }
};

// What one rank does in one round: nothing (peer -1), or send values[send) to `peer` and/or receive `peer`'s
// values for the range `receive`, both in flight together when both are non-empty.
struct log_depth_step {
  int peer = -1;
  element_range send;     // empty: nothing sent
  element_range receive;  // empty: nothing received
  bool combine = false;   // true: the received values are combined into values[receive) (combine_sum_max's
                          // rule by element index); false: they replace them
};

// Rounds of the all-reduce of `count` elements over `world` ranks (see above); 0 for world 1 or count 0.
int log_depth_allreduce_rounds(int world, std::size_t count);
// Rank `rank`'s step in every round of that all-reduce (log_depth_allreduce_rounds(world, count) steps).
// Throws flopmeter::error unless 1 <= world and 0 <= rank < world.
std::vector<log_depth_step> log_depth_allreduce_schedule(int rank, int world, std::size_t count);

// Rounds of the all-gather over `world` ranks: log2(pof2), + 2 when world is not a power of two; 0 for 1.
int log_depth_allgather_rounds(int world);
// Rank `rank`'s step in every round of the all-gather of `count` elements per rank, ranges in the
// world x count table (empty for count 0). Throws flopmeter::error unless 1 <= world and 0 <= rank < world.
std::vector<log_depth_step> log_depth_allgather_schedule(int rank, int world, std::size_t count);

// Combines `other` into `into`: the first sum_count values add, the next max_count take the maximum. The
// result does not depend on which operand is which, bit for bit: a NaN on either side gives NaN (a broken
// value must not vanish in the maximum), and of two equal values +0 wins over -0.
void combine_sum_max(double* into, const double* other, std::size_t sum_count, std::size_t max_count);
// The same over `count` elements whose first is the vector's element `first_index`: element first_index + j
// adds when it is below sum_count, else takes the maximum.
void combine_sum_max_from(double* into, const double* other, std::size_t count, std::size_t first_index,
                          std::size_t sum_count);

// The messages of one rank, sent and received in the order the schedule gives. Each call returns once its
// messages are through, or throws (a failed or timed-out send or receive).
class log_depth_transport {
 public:
  virtual ~log_depth_transport() = default;
  virtual void send(int peer, const double* values, std::size_t count) = 0;
  virtual void receive(int peer, double* values, std::size_t count) = 0;
  // Sends out[0, out_count) to `peer` and receives in_count values from `peer` into `in`, both in flight
  // together (`out` and `in` do not overlap).
  virtual void exchange(int peer, const double* out, std::size_t out_count, double* in, std::size_t in_count) = 0;
};

// Runs `steps` over `transport` on `values`; combining steps use combine_sum_max_from with `sum_count`.
// Throws what the transport throws.
void run_log_depth_steps(log_depth_transport& transport, const std::vector<log_depth_step>& steps, double* values,
                         std::size_t sum_count);

// Rank `rank`'s all-reduce: on return values[0, sum_count + max_count) holds the SUM of every rank's first
// sum_count values and the maximum of the rest, the same bits on every rank.
void run_log_depth_allreduce(log_depth_transport& transport, int rank, int world, double* values, std::size_t sum_count,
                             std::size_t max_count);

// Rank `rank`'s all-gather: on return recv[q count, (q + 1) count) holds rank q's send[0, count) for every q.
void run_log_depth_allgather(log_depth_transport& transport, int rank, int world, const double* send, std::size_t count,
                             double* recv);

}  // namespace flopmeter::detail
