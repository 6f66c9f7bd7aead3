// The per-log collectives at 1,024, 16,384 and 131,072 ranks, simulated in one process.
//
// Each rank's row is filled like a real job's (tp 2, one micro-batch of a few documents, memory, times) with
// the protocol's identity (log_protocol::write_identity) and turned into its contribution by the plugin's own
// code (log_reduction.h: contribute). A simulated group then runs the SUM and MAX all-reduce as flopmeter's
// own Gloo groups run it (small_allreduce automatic): recursive halving then recursive doubling by the
// schedule the c10d adapter runs (plugin/comm/log_depth.h), with the fold-in and fold-out rounds when N is not
// a power of two; after log2 N + min(log2 N, 7) (+ 2) rounds every rank holds the reduction. The bytes each
// rank sends and receives and the rounds are counted as they happen; rank 0's result then goes through the
// protocol (resolve_reduced) and the record (reduced_record), and is checked against derivation from the
// gathered rows (derive.h) and against the other ranks' results. The per-rank table (an all-gather of one row
// per rank, every topk_interval_logs logs) is costed from its schedule, not run (N tables of N rows would not
// fit in memory): recursive doubling over blocks, log2 N (+ 2) rounds, against c10d's ring, N - 1 rounds.
//
// Predicted time per log, alpha-beta model (T = rounds x alpha + bytes sent x beta):
//   Gloo over TCP: alpha 50 us per round (a message over TCP between hosts through Gloo's pair; the issue's
//     model, of the order measured on this machine's loopback by the real Gloo runs, METRICS.md), beta 1 / 3.1
//     GB/s (25 GbE). c10d's Gloo all-reduce is a ring: 2 (N - 1) rounds of a chunk of the buffer.
//   NCCL over InfiniBand: alpha 7 us per round (NCCL's own tuning model, src/graph/tuning.cc: about 6.8 us
//     base and ~5 us per network hop for small messages), beta 1 / 25 GB/s (HDR 200 Gb/s). NCCL's tree
//     all-reduce: 2 log2(N) rounds of the whole (small) vector.
//   Gloo with flopmeter's log-depth all-reduce: the simulated rounds and the most bytes a rank sends. Before
//     it (flopmeter 0.3.0's first version): recursive doubling, floor(log2 N) (+ 2) rounds of the whole vector.
// Usage: bench_collective_sim [ranks ...]   (default 1024 16384 131072; any size from 2)
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <vector>

#include "flopmeter/model_config.h"
#include "flopmeter/throughput.h"
#include "accounting/config_fingerprint.h"
#include "accounting/derive.h"
#include "accounting/log_protocol.h"
#include "accounting/log_reduction.h"
#include "accounting/row_layout.h"
#include "comm/log_depth.h"

namespace {

using namespace flopmeter;
using namespace flopmeter::detail;

constexpr std::size_t kVector = static_cast<std::size_t>(kSumFields) + static_cast<std::size_t>(kMaxFields);
constexpr double kTableEvery = static_cast<double>(kTableIntervalLogsAtScale);

struct model_constants {
  const char* name;
  double alpha_s;
  double bytes_per_s;
};
constexpr model_constants kGloo{"Gloo/TCP", 50e-6, 3.125e9};
constexpr model_constants kNccl{"NCCL/IB", 7e-6, 25e9};

void fill_row(std::int64_t r, double* x, std::uint64_t& state) {
  const auto next = [&state] {
    state ^= state << 13;
    state ^= state >> 7;
    state ^= state << 17;
    return state;
  };
  batch_counts n;
  // tp 2: both ranks of a replica hold the same micro-batch.
  std::uint64_t replica = state;
  if (r % 2 == 0) replica = next();
  n.real_tokens = 30000 + static_cast<std::int64_t>(replica % 2768);
  n.padding_tokens = 32768 - n.real_tokens;
  n.documents = 11;
  n.causal_pairs = n.real_tokens * n.real_tokens / 22;
  counts_to_row(n, x);
  x[row_loss_sum] = 2.0 * static_cast<double>(n.real_tokens);
  x[row_label_tokens] = static_cast<double>(n.real_tokens);
  x[row_microbatches] = 1;
  x[row_interval_seconds] = 1.0 + static_cast<double>(next() % 1000) / 1e4;
  x[row_peak_memory_bytes] = static_cast<double>(60 + next() % 10) * 1073741824.0;
  x[row_peak_reserved_memory_bytes] = kNotReported;
  x[row_data_seconds] = static_cast<double>(next() % 100) / 1e4;
  x[row_forward_backward_seconds] = 0.9;
  x[row_log_wait_ms] = static_cast<double>(next() % 100) / 100;
  x[row_tokens_seen] = 100.0 * static_cast<double>(n.real_tokens);
  x[row_samples_seen] = 1100;
  x[row_label_tokens_seen] = 100.0 * static_cast<double>(n.real_tokens);
  x[row_megatron_flops] = 1e15;
}

double seconds_since(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
}

void simulate(std::int64_t world) {
  const model_spec model = load_model_spec(FLOPMETER_SOURCE_DIR "/model_configs/qwen3_vl_2b.toml");
  config_settings settings;
  settings.model_name = model.name;
  settings.model = compute_coefficients(model);
  settings.parallel.tp = 2;
  derive_setup setup;
  setup.flop_coefficients = compute_coefficients(model, training_regime{});
  setup.tp = 2;
  setup.peak_tflops_per_gpu = 989.0;
  setup.topk = 3;
  for (std::int64_t r = 0; r < world; r += 2) setup.dp_group.push_back(r);
  reduction_setup reduction;
  reduction.flop_coefficients = setup.flop_coefficients;
  reduction.tp = 2;

  // Every rank: its row, its identity, its contribution (the plugin's code).
  const auto n = static_cast<std::size_t>(world);
  std::vector<double> rows(n * kRowFields, 0.0), vectors(n * kVector);
  std::uint64_t state = 0x9e3779b97f4a7c15ull;
  log_protocol identity(0, world, std::chrono::milliseconds(1000), settings);  // every rank's: log 1, step 7
  identity.begin_log();
  auto start = std::chrono::steady_clock::now();
  for (std::int64_t r = 0; r < world; ++r) {
    double* x = rows.data() + static_cast<std::size_t>(r) * kRowFields;
    fill_row(r, x, state);
    identity.write_identity(x, 7);
    reduction.in_dp_sums = r % 2 == 0;
    double* v = vectors.data() + static_cast<std::size_t>(r) * kVector;
    contribute(reduction, x, r, v, v + kSumFields);
  }
  const double contribute_s = seconds_since(start) / static_cast<double>(world);

  // The simulated group: the schedule flopmeter's own Gloo groups run (plugin/comm/log_depth.h, the same code
  // as c10d_log_depth.cpp), round by round over every rank: first every message of the round is posted (a copy
  // of the sender's range, kept at its place in the sender's slot), then every receiver combines or takes it
  // (the peer's send range is the receiver's receive range).
  std::vector<std::uint64_t> sent(n, 0), received(n, 0);
  std::vector<double> posted(n * kVector);
  std::vector<std::vector<log_depth_step>> schedules(n);
  for (std::int64_t r = 0; r < world; ++r) {
    schedules[static_cast<std::size_t>(r)] =
        log_depth_allreduce_schedule(static_cast<int>(r), static_cast<int>(world), kVector);
  }
  const int rounds = log_depth_allreduce_rounds(static_cast<int>(world), kVector);
  for (int round = 0; round < rounds; ++round) {
    for (std::size_t r = 0; r < n; ++r) {
      const log_depth_step& step = schedules[r][static_cast<std::size_t>(round)];
      if (step.peer < 0 || step.send.empty()) continue;
      std::copy_n(vectors.data() + r * kVector + step.send.begin, step.send.size(),
                  posted.data() + r * kVector + step.send.begin);
      sent[r] += step.send.size() * sizeof(double);
    }
    for (std::size_t r = 0; r < n; ++r) {
      const log_depth_step& step = schedules[r][static_cast<std::size_t>(round)];
      if (step.peer < 0 || step.receive.empty()) continue;
      const double* message = posted.data() + static_cast<std::size_t>(step.peer) * kVector + step.receive.begin;
      double* into = vectors.data() + r * kVector + step.receive.begin;
      if (step.combine) {
        combine_sum_max_from(into, message, step.receive.size(), step.receive.begin, kSumFields);
      } else {
        std::copy_n(message, step.receive.size(), into);
      }
      received[r] += step.receive.size() * sizeof(double);
    }
  }
  const std::uint64_t most_sent = *std::max_element(sent.begin(), sent.end());
  const std::uint64_t most_received = *std::max_element(received.begin(), received.end());
  // The table's all-gather by recursive doubling: its rounds, and the most bytes a rank sends and receives,
  // from every rank's schedule.
  const int table_rounds = log_depth_allgather_rounds(static_cast<int>(world));
  std::uint64_t table_most_sent = 0, table_most_received = 0;
  for (std::int64_t r = 0; r < world; ++r) {
    std::uint64_t s = 0, in = 0;
    for (const log_depth_step& step :
         log_depth_allgather_schedule(static_cast<int>(r), static_cast<int>(world), kRowFields)) {
      s += step.send.size() * sizeof(double);
      in += step.receive.size() * sizeof(double);
    }
    table_most_sent = std::max(table_most_sent, s);
    table_most_received = std::max(table_most_received, in);
  }
  // Before: recursive doubling of the whole vector, floor(log2 N) rounds (+ 2 for a fold); a rank of the fold
  // also sends its result once more.
  int levels = 0;
  while ((std::int64_t{2} << levels) <= world) ++levels;
  const bool power_of_two = (std::int64_t{1} << levels) == world;
  const int doubling_rounds = levels + (power_of_two ? 0 : 2);
  const std::uint64_t doubling_most_sent =
      kVector * sizeof(double) * static_cast<std::uint64_t>(levels + (power_of_two ? 0 : 1));
  // Every rank holds the same result.
  bool agree = true;
  for (std::size_t r = 1; r < n; ++r) {
    for (std::size_t i = 0; i < kVector; ++i) agree = agree && vectors[r * kVector + i] == vectors[i];
  }

  // Rank 0's protocol and record, against derivation from the whole table.
  log_protocol protocol(0, world, std::chrono::milliseconds(1000), settings);
  protocol.begin_log();
  const log_verdict verdict = protocol.resolve_reduced(7, collective_status::done, "", rows.data(), vectors.data(),
                                                       vectors.data() + kSumFields);
  derive_context context;
  context.step = 7;
  start = std::chrono::steady_clock::now();
  const derive_result reduced = reduced_record(setup, vectors.data(), vectors.data() + kSumFields, world, context);
  const double record_s = seconds_since(start);
  metrics_deriver deriver(setup);
  derive_result table = deriver.derive(rows.data(), world, context);  // warm: the deriver keeps its columns
  start = std::chrono::steady_clock::now();
  table = deriver.derive(rows.data(), world, context);
  const double table_s = seconds_since(start);
  double worst = 0;
  std::size_t compared = 0;
  for (const auto& [name, value] : reduced.record.values) {
    for (const auto& [tname, tvalue] : table.record.values) {
      if (tname == name && tvalue != 0) {
        worst = std::max(worst, std::abs(value / tvalue - 1));
        ++compared;
      }
    }
  }

  const double vector_bytes = static_cast<double>(kVector * sizeof(double));
  const double row_bytes = static_cast<double>(kRowFields * sizeof(double));
  const double w = static_cast<double>(world);
  const double log2w = std::log2(w);
  const double ring_table_bytes = (w - 1) * row_bytes;  // a ring all-gather: each rank sends N - 1 rows
  const double table_bytes = static_cast<double>(table_most_sent);
  std::printf("\n%lld ranks\n", static_cast<long long>(world));
  std::printf(
      "  ordinary log: 1 call (a SUM of %zu and a MAX of %zu doubles, one vector), flopmeter's log-depth all-reduce "
      "(recursive halving + doubling): %d rounds, at most %llu B sent and %llu B received per rank (rank 0: %llu B); "
      "every rank alike: %s; protocol verdict %s, %zu figures within %.1e of the table's\n",
      kSumFields, kMaxFields, rounds, static_cast<unsigned long long>(most_sent),
      static_cast<unsigned long long>(most_received), static_cast<unsigned long long>(sent[0]), agree ? "yes" : "NO",
      verdict.what == log_verdict::kind::derive ? "derive" : "NOT derive", compared, worst);
  std::printf(
      "  ordinary log before (recursive doubling of the whole vector): %d rounds, at most %llu B sent per rank\n",
      doubling_rounds, static_cast<unsigned long long>(doubling_most_sent));
  std::printf(
      "  table log (every %lld logs), one %g B row per rank: recursive doubling %d rounds, at most %llu B sent and "
      "%llu B received per rank; c10d's ring (before) %lld rounds, %.0f B sent per rank\n",
      static_cast<long long>(kTableIntervalLogsAtScale), row_bytes, table_rounds,
      static_cast<unsigned long long>(table_most_sent), static_cast<unsigned long long>(table_most_received),
      static_cast<long long>(world - 1), ring_table_bytes);
  std::printf(
      "  bytes per rank per log: table every log %.0f B; ordinary %llu B (most), %.0f B amortised "
      "(+ table / %lld)\n",
      table_bytes, static_cast<unsigned long long>(most_sent),
      static_cast<double>(most_sent) + table_bytes / kTableEvery, static_cast<long long>(kTableIntervalLogsAtScale));
  std::printf(
      "  cpu per log: contribute %.2f us per rank, record from the reduction %.1f us, derive from the table "
      "%.2f ms\n",
      contribute_s * 1e6, record_s * 1e6, table_s * 1e3);
  // Ordinary log, by the algorithm each group runs: flopmeter's own Gloo group (small_allreduce automatic,
  // log-depth from log_depth_min_ranks ranks on): the rounds simulated above, and the most bytes a rank sends;
  // c10d's Gloo ring (small_allreduce backend, or below the threshold): 2 (N - 1) rounds of chunks, about 2 x
  // the vector sent; NCCL's tree: 2 log2 N rounds of the whole (small) vector.
  const double log_depth = rounds * kGloo.alpha_s + static_cast<double>(most_sent) / kGloo.bytes_per_s;
  const double doubling = doubling_rounds * kGloo.alpha_s + static_cast<double>(doubling_most_sent) / kGloo.bytes_per_s;
  const double ring = 2 * (w - 1) * kGloo.alpha_s + 2 * vector_bytes * (w - 1) / w / kGloo.bytes_per_s;
  const double tree = 2 * log2w * kNccl.alpha_s + 2 * vector_bytes / kNccl.bytes_per_s;
  const double log_depth_ib = rounds * kNccl.alpha_s + static_cast<double>(most_sent) / kNccl.bytes_per_s;
  const double gloo_table = table_rounds * kGloo.alpha_s + table_bytes / kGloo.bytes_per_s;
  const double gloo_ring_table = (w - 1) * kGloo.alpha_s + ring_table_bytes / kGloo.bytes_per_s;
  const double nccl_table = (w - 1) * kNccl.alpha_s + ring_table_bytes / kNccl.bytes_per_s;
  std::printf(
      "  %-9s (alpha %.0f us, %.2f GB/s): chosen (own group, log-depth, %d rounds) %.5f s per log; recursive "
      "doubling (before, %d rounds) %.5f s; c10d's ring (%lld rounds) %.3f s; table log %.4f s (c10d's ring "
      "all-gather %.3f s); amortised with the table every %lld logs %.5f s\n",
      kGloo.name, kGloo.alpha_s * 1e6, kGloo.bytes_per_s / 1e9, rounds, log_depth, doubling_rounds, doubling,
      static_cast<long long>(2 * (world - 1)), ring, gloo_table, gloo_ring_table,
      static_cast<long long>(kTableIntervalLogsAtScale), log_depth + gloo_table / kTableEvery);
  std::printf(
      "  %-9s (alpha %.0f us, %.0f GB/s): chosen (NCCL's tree, %.0f rounds) %.5f s per log; log-depth "
      "over the same links %.5f s; table log (NCCL's ring all-gather) %.3f s; amortised %.4f s\n",
      kNccl.name, kNccl.alpha_s * 1e6, kNccl.bytes_per_s / 1e9, 2 * log2w, tree, log_depth_ib, nccl_table,
      tree + nccl_table / kTableEvery);
}

}  // namespace
int main(int argc, char** argv) {
  std::vector<std::int64_t> sizes = {1024, 16384, 131072};
  if (argc > 1) {
    sizes.clear();
    for (int i = 1; i < argc; ++i) sizes.push_back(std::atoll(argv[i]));
  }
  std::printf(
      "flopmeter per-log collectives, simulated (bench/bench_collective_sim.cpp); vector %zu doubles (%zu B), "
      "row %zu doubles\n",
      kVector, kVector * sizeof(double), static_cast<std::size_t>(kRowFields));
  for (const std::int64_t world : sizes) {
    if (world < 2 || world > flopmeter::max_world_size) {
      std::fprintf(stderr, "ranks must be in [2, %d] (got %lld)\n", flopmeter::max_world_size,
                   static_cast<long long>(world));
      return 2;
    }
    simulate(world);
  }
  return 0;
}
