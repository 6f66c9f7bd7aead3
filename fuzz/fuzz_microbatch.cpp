// Fuzz target: micro-batch descriptions (lengths, cu_seqlens, positions, image grids, with huge and negative
// values) through the count_* functions and through a throughput plugin: on_microbatch, on_log, flush and
// events after flush, on a local communicator or on a fabricated world of up to 8 ranks whose collective
// succeeds, fails, hangs, throws or completes late, with a clock that may stand still, go backwards or
// return NaN.
//
// Invariants checked on every input:
//   count_*: accepted counts are non-negative; the three descriptions agree whenever they describe the
//     same documents (lengths -> cu_seqlens and positions are derived and counted again, and fuzzed
//     cu_seqlens / positions are turned back into lengths), including on whether they are accepted.
//   positions scan: every kernel this CPU has (SSE2, AVX2) gives exactly the scalar kernel's totals or error
//     text, for int64 positions and, where they fit, the same entries as int32.
//   attention windows: every count runs again with sliding / chunked windows; the three descriptions and every
//     kernel agree on the window pairs too, tokens <= window pairs <= causal pairs, and nothing else changes.
//   plugin: a hook never throws (they are noexcept: a throw would terminate, a crash the fuzzer reports);
//     it rejects exactly the micro-batches a mirror of its accounting rejects (health().bad_microbatches);
//     every emitted value is finite and the counts behind them are non-negative; train/tokens_seen is the
//     sum of the emitted intervals' DP-group tokens; with a collective that always succeeds every interval
//     with a positive time and exactly representable counts, warm-ups aside (no micro-batch in it and nothing
//     seen before it: throughput.h), is emitted, with the expected tokens/s and
//     TFLOP/s, and exactly one collective is started per log; events after flush() are counted, not
//     reported.
#include <fuzzer/FuzzedDataProvider.h>
#include <spdlog/logger.h>
#include <spdlog/sinks/null_sink.h>

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <iterator>
#include <limits>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "flopmeter/communicator.h"
#include "flopmeter/error.h"
#include "flopmeter/flop_model.h"
#include "flopmeter/hooks.h"
#include "flopmeter/throughput.h"
#include "count/count_fields.h"
#include "count/positions_scan.h"
#include "fuzz_support.h"
#include "support/small_models.h"

namespace {

using namespace flopmeter;

constexpr std::int64_t kMax = std::numeric_limits<std::int64_t>::max();
constexpr std::int64_t kMin = std::numeric_limits<std::int64_t>::min();

// Values near every boundary the counting code checks: int64 limits, 2^31/2^32 (L(L+1)/2 overflows from
// about 4.3e9), sqrt(2^63) (patch products), 2^53 (what a double holds exactly).
constexpr std::int64_t kInteresting[] = {0,          1,          2,          3,          4,         7,
                                         64,         4096,       32768,      100000,     1000000,   -1,
                                         -2,         kMin,       kMax,       kMax - 1,   1LL << 31, 1LL << 32,
                                         4294967295, 4294967296, 3037000499, 3037000500, 1LL << 53, (1LL << 53) + 1,
                                         1LL << 62,  94906265,   94906266,   2097152};

std::int64_t pick(FuzzedDataProvider& in) {
  switch (in.ConsumeIntegralInRange<int>(0, 3)) {
    case 0: return in.ConsumeIntegralInRange<std::int64_t>(0, 64);
    case 1: return in.PickValueInArray(kInteresting);
    case 2: return in.ConsumeIntegral<std::int64_t>();
    default: return in.ConsumeIntegralInRange<std::int64_t>(0, 100000);
  }
}

// Grid sides: mostly small and even (the VLM merges 2x2), sometimes anything.
std::int64_t pick_side(FuzzedDataProvider& in) {
  return in.ConsumeBool() ? 2 * in.ConsumeIntegralInRange<std::int64_t>(0, 16) : pick(in);
}

// The small models of tests/support/small_models.h.
model_spec small_model(bool vision) { return vision ? testing::small_vlm() : testing::small_text_model(); }

std::shared_ptr<spdlog::logger> quiet_logger() {
  static const auto logger = std::make_shared<spdlog::logger>("fuzz", std::make_shared<spdlog::sinks::null_sink_mt>());
  return logger;
}

// ---- a fabricated world --------------------------------------------------------------------------------

enum class outcome { done, failed, hangs, late, throws };

class scripted_pending final : public pending_collective {
 public:
  explicit scripted_pending(outcome o) : outcome_(o) {}
  collective_status wait(std::chrono::milliseconds /*timeout*/) override {
    ++waits_;
    switch (outcome_) {
      case outcome::done: return collective_status::done;
      case outcome::failed: return collective_status::failed;
      case outcome::late: return waits_ > 1 ? collective_status::done : collective_status::pending;
      default: return collective_status::pending;
    }
  }
  std::string error_message() const override { return "scripted failure"; }

 private:
  outcome outcome_;
  int waits_ = 0;
};

// Rank `rank` of a world in which every other rank reported exactly this rank's row (the row is copied
// into every other row at start), so the result of each collective is known: DP sums are dp x this row.
class scripted_communicator final : public communicator {
 public:
  scripted_communicator(int rank, int world, std::vector<outcome> script)
      : rank_(rank), world_(world), script_(std::move(script)) {}
  int rank() const override { return rank_; }
  int world_size() const override { return world_; }
  std::string backend_name() const override { return "scripted"; }
  std::unique_ptr<pending_collective> start_allreduce_sum(double* values, std::size_t count) override {
    const outcome o = script_.empty() ? outcome::done : script_[started_++ % script_.size()];
    if (o == outcome::throws) throw error("scripted: cannot start");
    const std::size_t fields = count / static_cast<std::size_t>(world_);
    const double* own = values + static_cast<std::size_t>(rank_) * fields;
    for (int r = 0; r < world_; ++r) {
      if (r != rank_) std::memcpy(values + static_cast<std::size_t>(r) * fields, own, fields * sizeof(double));
    }
    return std::make_unique<scripted_pending>(o);
  }

 private:
  int rank_;
  int world_;
  std::vector<outcome> script_;
  std::size_t started_ = 0;
};

// ---- count_*: the three descriptions agree ---------------------------------------------------------------

std::optional<batch_counts> try_count(const std::vector<std::int64_t>& values, int format, std::int64_t padding,
                                      const std::vector<image_grid>& grids, const vision_geometry& g) {
  try {
    switch (format) {
      case 0: return count_from_lengths(values, padding, grids, g);
      case 1: return count_from_cu_seqlens(values, padding, grids, g);
      default: return count_from_positions(values, padding, grids, g);
    }
  } catch (const error& e) {
    FUZZ_CHECK(std::strlen(e.what()) > 0, "an empty count_* error");
    return std::nullopt;
  }
}

void check_non_negative(const batch_counts& n, const vision_geometry& g) {
  detail::for_each_count_field([&](auto i) {
    FUZZ_CHECK(n.*detail::kCountMember<decltype(i)::value> >= 0,
               std::string("a negative count was accepted: ") + std::string(detail::kCountFields[i].name));
  });
  FUZZ_CHECK(n.causal_pairs >= n.real_tokens, "fewer causal pairs than tokens");
  FUZZ_CHECK(n.vision_pairs_whole >= n.vision_pairs_per_frame, "whole-item pairs below per-frame pairs");
  // Each query attends 1 to i + 1 keys under a window: tokens <= window pairs <= causal pairs; absent windows 0.
  for (std::size_t k = 0; k < kMaxAttentionWindows; ++k) {
    const std::int64_t pairs = n.*detail::kWindowPairs[k];
    if (static_cast<std::int64_t>(k) < g.window_count) {
      FUZZ_CHECK(pairs >= n.real_tokens && pairs <= n.causal_pairs, "window pairs outside [tokens, causal pairs]");
    } else {
      FUZZ_CHECK(pairs == 0, "a window the geometry does not have was counted");
    }
  }
}

// The count checks run again with windows (the plugin's model has none): chosen from the batch's size, so that
// the corpus keeps its meaning. Sliding and chunked, windows of 1 (every query attends itself), one beyond 2^32
// (the positions kernels clamp it) and sizes around the vector steps.
vision_geometry with_windows(vision_geometry g, std::size_t choice) {
  static constexpr attention_window kWindows[][2] = {
      {{window_kind::sliding, 3}, {window_kind::chunked, 5}},
      {{window_kind::chunked, 1}, {window_kind::sliding, std::int64_t{1} << 40}},
      {{window_kind::sliding, 64}, {window_kind::sliding, 1}},
      {{window_kind::chunked, 4096}, {window_kind::chunked, 3}}};
  const auto& pick = kWindows[choice % std::size(kWindows)];
  g.window_count = choice % 5 == 4 ? 1 : 2;
  g.windows[0] = pick[0];
  g.windows[1] = pick[1];
  return g;
}

bool same_except_documents(const batch_counts& a, const batch_counts& b) {
  batch_counts x = a;
  x.documents = b.documents;
  return x == b;
}

// Lengths -> cu_seqlens (when the prefix sums fit) and positions (when small enough to build).
void check_agreement_from_lengths(const std::vector<std::int64_t>& lengths, const std::optional<batch_counts>& counted,
                                  std::int64_t padding, const std::vector<image_grid>& grids, const vision_geometry& g) {
  std::vector<std::int64_t> cu = {0};
  bool representable = true;
  for (const std::int64_t l : lengths) {
    std::int64_t next = 0;
    if (__builtin_add_overflow(cu.back(), l, &next)) {
      representable = false;
      break;
    }
    cu.push_back(next);
  }
  if (representable) {
    const std::optional<batch_counts> from_cu = try_count(cu, 1, padding, grids, g);
    FUZZ_CHECK(counted.has_value() == from_cu.has_value(), "lengths and cu_seqlens disagree on acceptance");
    if (counted) FUZZ_CHECK(*counted == *from_cu, "lengths and cu_seqlens give different counts");
  }
  // Positions cannot describe a zero-length document; they describe the others, and nothing else differs.
  if (!counted || counted->real_tokens > 4096) return;  // small enough to build, large enough to matter
  std::vector<std::int64_t> positions;
  std::int64_t non_empty = 0;
  for (const std::int64_t l : lengths) {
    non_empty += l > 0 ? 1 : 0;
    for (std::int64_t i = 0; i < l; ++i) positions.push_back(i);
  }
  const std::optional<batch_counts> from_positions = try_count(positions, 2, padding, grids, g);
  FUZZ_CHECK(from_positions.has_value(), "positions of accepted lengths were rejected");
  FUZZ_CHECK(same_except_documents(*counted, *from_positions), "lengths and positions give different counts");
  FUZZ_CHECK(from_positions->documents == non_empty, "positions count a different number of documents");
}

// Accepted cu_seqlens or positions -> lengths, counted again.
void check_agreement_to_lengths(const std::vector<std::int64_t>& values, int format, const batch_counts& counted,
                                std::int64_t padding, const std::vector<image_grid>& grids, const vision_geometry& g) {
  std::vector<std::int64_t> lengths;
  if (format == 1) {
    for (std::size_t i = 1; i < values.size(); ++i) lengths.push_back(values[i] - values[i - 1]);  // checked by count
  } else {
    for (std::size_t i = 0; i < values.size(); ++i) {
      if (values[i] == 0) lengths.push_back(0);
      ++lengths.back();
    }
  }
  const std::optional<batch_counts> from_lengths = try_count(lengths, 0, padding, grids, g);
  FUZZ_CHECK(from_lengths.has_value() && *from_lengths == counted, "an accepted description and its lengths disagree");
}

// ---- the positions scan: every kernel against the scalar one ---------------------------------------------

template <class T>
std::string scan_outcome(const std::vector<T>& values, detail::positions_kernel kernel,
                         array_view<attention_window> windows) {
  try {
    const detail::positions_totals t = detail::scan_positions(array_view<T>(values), kernel, windows);
    return std::to_string(t.tokens) + " " + std::to_string(t.documents) + " " + std::to_string(t.causal_pairs) + " " +
           std::to_string(t.window_pairs[0]) + " " + std::to_string(t.window_pairs[1]);
  } catch (const error& e) {
    return std::string("error: ") + e.what();
  }
}

bool fits_int32(const std::vector<std::int64_t>& values) {
  for (const std::int64_t v : values) {
    if (v < std::numeric_limits<std::int32_t>::min() || v > std::numeric_limits<std::int32_t>::max()) return false;
  }
  return true;
}

void check_positions_kernels(const std::vector<std::int64_t>& values, const vision_geometry& g) {
  using detail::positions_kernel;
  const array_view<attention_window> windows(g.windows, static_cast<std::size_t>(g.window_count));
  const std::string reference = scan_outcome(values, positions_kernel::scalar, windows);
  const std::vector<std::int32_t> narrow(values.begin(), values.end());
  const bool narrow_same = fits_int32(values);
  for (const positions_kernel k : {positions_kernel::scalar, positions_kernel::sse2, positions_kernel::avx2}) {
    if (!detail::available(k)) continue;
    FUZZ_CHECK(scan_outcome(values, k, windows) == reference,
               std::string("int64 positions: kernel ") + detail::name_of(k) + " disagrees with the scalar one");
    if (narrow_same) {
      FUZZ_CHECK(scan_outcome(narrow, k, windows) == reference,
                 std::string("int32 positions: kernel ") + detail::name_of(k) + " disagrees with int64 scalar");
    }
  }
}

// ---- the plugin, and a mirror of its accounting -----------------------------------------------------------

struct mirror {
  batch_counts counts;
  std::int64_t samples = 0;
  double loss_sum = 0;
  std::int64_t label_tokens = 0;
  std::int64_t microbatches = 0;  // on_microbatch calls before flush, rejected ones included (they ran)
};

struct interval {
  double seconds = 0;
  batch_counts counts;
  bool emittable = false;  // positive finite time and every count exactly representable in the row
  __int128 running_real = 0;  // this rank's real tokens over every interval up to this one, emitted or not
};

// Every count below 2^53 is exact in the collective's double row; from 2^53 on the plugin skips the interval.
bool representable(const batch_counts& n) {
  return !detail::any_count_field(
      [&](auto i) { return n.*detail::kCountMember<decltype(i)::value> >= (std::int64_t{1} << 53); });
}

// What a record must satisfy on its own; the figures the run checks against the mirror afterwards.
struct emitted {
  std::int64_t step = 0;
  std::optional<double> tokens_seen;  // absent once a rank's running total reaches 2^53
  double tokens_per_second = 0, tflops_per_second = 0;
};

emitted check_record(const metrics_record& r) {
  for (const auto& [name, value] : r.values) {
    if (name == "train/lr" || name == "train/grad_norm") continue;  // the trainer's own figures, passed through
    FUZZ_CHECK(std::isfinite(value), name + " is not finite");
    // A loss may be negative, and so may the highest mean loss of a rank.
    FUZZ_CHECK(value >= 0 || name == "train/loss" || name == "train/max_loss", name + " is negative");
  }
  if (const double* eff = r.find("train/batch_efficiency")) FUZZ_CHECK(*eff <= 1.0, "batch efficiency above 1");
  const double* seen = r.find("train/tokens_seen");
  const double* tps = r.find("perf/tokens_per_second");
  const double* tflops = r.find("perf/tflops_per_second");
  FUZZ_CHECK(tps && tflops, "a record without its headline figures");
  return {r.step, seen ? std::optional<double>(*seen) : std::nullopt, *tps, *tflops};
}

bool near(double actual, double expected, double relative) {
  if (actual == expected) return true;
  return std::fabs(actual - expected) <= relative * std::fabs(expected);
}

void run_plugin(FuzzedDataProvider& in) {
  const bool vision = in.ConsumeBool();
  throughput_options o;
  o.model = small_model(vision);
  o.scope = in.ConsumeBool() ? flop_scope::complete : flop_scope::seed;
  o.parallel.tp = in.ConsumeIntegralInRange<std::int64_t>(1, 4);
  o.parallel.cp = in.ConsumeIntegralInRange<std::int64_t>(1, 2);
  o.parallel.pp = in.ConsumeIntegralInRange<std::int64_t>(1, 2);
  o.topk = in.ConsumeIntegralInRange<std::int64_t>(0, 3);
  if (in.ConsumeBool()) o.peak_tflops_per_gpu = 1e-6 * in.ConsumeIntegralInRange<int>(1, 1000);
  o.emit = emit_ranks::all;
  o.collective_timeout = std::chrono::milliseconds(0);  // scripted collectives never block
  o.logger = quiet_logger();
  // Each record is checked as it arrives and only the figures checked later are kept (copying every
  // record's ~80 names would be most of this target's cost).
  std::vector<emitted> records;
  o.sinks.push_back(make_callback_sink([&records](const metrics_record& r) { records.push_back(check_record(r)); }));
  double clock = 100.0;
  o.clock_seconds = [&clock] { return clock; };

  // World: 1 (the local communicator) or a fabricated one of up to 8 ranks with a scripted collective.
  const int world = in.ConsumeIntegralInRange<int>(1, 8);
  std::shared_ptr<communicator> comm;
  bool always_done = true;
  if (world == 1 && in.ConsumeBool()) {
    comm = make_local_communicator();
  } else {
    std::vector<outcome> script;
    const int n = in.ConsumeIntegralInRange<int>(0, 6);
    for (int i = 0; i < n; ++i) {
      const outcome oc = static_cast<outcome>(in.ConsumeIntegralInRange<int>(0, 4));
      always_done = always_done && oc == outcome::done;
      script.push_back(oc);
    }
    comm = std::make_shared<scripted_communicator>(in.ConsumeIntegralInRange<int>(0, world - 1), world, script);
  }
  std::shared_ptr<throughput_plugin> plugin;
  try {
    plugin = throughput_plugin::create(o, comm);
  } catch (const error&) {
    return;  // a layout that does not divide the world: a setup error, as documented
  }
  const std::int64_t model_parallel = o.parallel.tp * o.parallel.cp * o.parallel.pp;
  const double dp = static_cast<double>(world / model_parallel);
  const coefficients coeffs = compute_coefficients(o.model);
  const vision_geometry g = geometry_of(o.model);

  hooks h;
  registration reg = h.add(plugin);
  mirror current;
  std::uint64_t bad = 0, after_flush = 0, logs = 0;
  std::map<std::int64_t, interval> intervals;  // by step (= log number)
  double last_clock = clock;
  __int128 running_real = 0;  // this rank's real tokens over every closed interval (the row's running total)
  __int128 running_samples = 0;  // and its samples (the row's other running total)
  bool flushed = false;

  static constexpr double kClockSteps[] = {1.0, 0.5, 3.7, 1e-9, 1e6, 0.0, -1.0, std::numeric_limits<double>::quiet_NaN()};
  while (in.remaining_bytes() > 0) {
    const int op = in.ConsumeIntegralInRange<int>(0, 9);
    if (op <= 6) {
      // A micro-batch.
      const int format = in.ConsumeIntegralInRange<int>(0, 3);  // 3: two descriptions at once
      std::vector<std::int64_t> values(in.ConsumeIntegralInRange<std::size_t>(0, 24));
      for (auto& v : values) v = pick(in);
      if (format == 1 && !values.empty() && in.ConsumeBool()) values[0] = 0;
      if (format == 2 && in.ConsumeBool()) {  // mostly well-formed positions, with a few restarts
        std::int64_t p = 0;
        for (auto& v : values) v = (in.ConsumeIntegralInRange<int>(0, 5) == 0) ? (p = 0) : p++;
        if (!values.empty()) values[0] = 0;
      }
      std::vector<image_grid> grids(in.ConsumeIntegralInRange<std::size_t>(0, 3));
      for (auto& grid : grids) grid = {pick_side(in) / 2 + 1, pick_side(in), pick_side(in)};
      const std::int64_t padding = in.ConsumeBool() ? in.ConsumeIntegralInRange<std::int64_t>(0, 4096) : pick(in);
      const std::int64_t samples = in.ConsumeBool() ? in.ConsumeIntegralInRange<std::int64_t>(0, 8) : pick(in);
      std::optional<double> loss;
      std::optional<std::int64_t> labels;
      if (in.ConsumeBool()) {
        static constexpr double kLosses[] = {0.0, 2.5, 1e308, -3.0, std::numeric_limits<double>::infinity(),
                                             std::numeric_limits<double>::quiet_NaN()};
        loss = in.PickValueInArray(kLosses);
        if (in.ConsumeBool()) labels = pick(in);
      }

      // count_* on their own.
      const int counted_format = format == 3 ? 0 : format;
      const std::optional<batch_counts> counted = try_count(values, counted_format, padding, grids, g);
      if (counted) check_non_negative(*counted, g);
      if (counted_format == 0) check_agreement_from_lengths(values, counted, padding, grids, g);
      if (counted && counted_format != 0) check_agreement_to_lengths(values, counted_format, *counted, padding, grids, g);
      if (counted_format == 2) check_positions_kernels(values, g);
      // The same with attention windows: accepted exactly when without, the other counts unchanged.
      const vision_geometry gw = with_windows(g, values.size());
      const std::optional<batch_counts> windowed = try_count(values, counted_format, padding, grids, gw);
      FUZZ_CHECK(windowed.has_value() == counted.has_value(), "windows changed whether a batch is accepted");
      if (windowed) {
        check_non_negative(*windowed, gw);
        batch_counts without = *windowed;
        for (std::size_t k = 0; k < kMaxAttentionWindows; ++k) {
          without.*detail::kWindowPairs[k] = without.*detail::kItemlessWindowPairs[k] = 0;
        }
        FUZZ_CHECK(without == *counted, "windows changed a count other than the window pairs");
      }
      if (counted_format == 0) check_agreement_from_lengths(values, windowed, padding, grids, gw);
      if (windowed && counted_format != 0) {
        check_agreement_to_lengths(values, counted_format, *windowed, padding, grids, gw);
      }
      if (counted_format == 2) check_positions_kernels(values, gw);

      microbatch_event e;
      if (format == 0) e.document_lengths = values;
      if (format == 1) e.cu_seqlens = values;
      // Odd-length positions that fit go through the int32 field (no extra input byte: the corpus keeps its meaning).
      const std::vector<std::int32_t> narrow(values.begin(), values.end());
      if (format == 2 && (values.size() % 2 == 0 || !fits_int32(values))) e.positions = values;
      if (format == 2 && values.size() % 2 == 1 && fits_int32(values)) e.positions_int32 = narrow;
      const std::vector<std::int64_t> one = {1};
      if (format == 3) {
        e.document_lengths = values;
        e.cu_seqlens = one;
      }
      e.padding_tokens = padding;
      e.grid_thw = grids;
      e.samples = samples;
      e.loss_sum = loss;
      e.label_tokens = labels;
      h.on_microbatch(e);
      if (flushed) {
        ++after_flush;
        continue;
      }
      ++current.microbatches;

      // What the plugin must have decided.
      // A loss sum needs label tokens to be a sum over, and a sum over 0 of them is 0 (check_loss_pair).
      bool rejected = (format == 3 && !values.empty()) || samples < 0 || (labels && *labels < 0) ||
                      (loss && !std::isfinite(*loss)) || (loss && !labels) ||
                      (loss && labels && *labels == 0 && *loss != 0);
      const std::optional<batch_counts> plugin_counts =
          format == 3 ? (values.empty() ? try_count(one, 1, padding, grids, g) : std::nullopt) : counted;
      rejected = rejected || !plugin_counts;
      // A loss over more label tokens than the batch's real tokens (check_label_tokens_within).
      rejected = rejected || (loss && labels && *labels > plugin_counts->real_tokens);
      mirror next = current;
      if (!rejected) {
        try {
          next.counts += *plugin_counts;
        } catch (const error&) {
          rejected = true;
        }
      }
      rejected = rejected || __builtin_add_overflow(next.samples, samples, &next.samples);
      if (!rejected && loss && labels) {
        next.loss_sum += *loss;
        rejected = !std::isfinite(next.loss_sum) || __builtin_add_overflow(next.label_tokens, *labels, &next.label_tokens);
      }
      if (rejected) {
        ++bad;
      } else {
        current = next;
      }
      FUZZ_CHECK(plugin->health().bad_microbatches == bad,
                 "the plugin and the mirror disagree on a micro-batch: " + std::to_string(plugin->health().bad_microbatches) +
                     " rejected, expected " + std::to_string(bad));
    } else if (op <= 8) {
      // A log.
      clock += in.PickValueInArray(kClockSteps);
      log_event l;
      l.step = static_cast<std::int64_t>(logs) + 1;
      if (in.ConsumeBool()) l.peak_memory_bytes = pick(in);
      static constexpr double kTimes[] = {0.25, 0.0, -1.0, 1e300, std::numeric_limits<double>::infinity(),
                                          std::numeric_limits<double>::quiet_NaN()};
      if (in.ConsumeBool()) l.data_time = std::chrono::duration<double>(in.PickValueInArray(kTimes));
      if (in.ConsumeBool()) l.forward_backward_time = std::chrono::duration<double>(in.PickValueInArray(kTimes));
      h.on_log(l);
      if (flushed) {
        ++after_flush;
        continue;
      }
      ++logs;
      interval& closed = intervals[l.step];
      running_real += current.counts.real_tokens;
      running_samples += current.samples;
      closed.running_real = running_real;
      closed.seconds = clock - last_clock;
      closed.counts = current.counts;
      // An interval before any micro-batch, with nothing seen before it, is a warm-up: never written.
      const bool warm_up = current.microbatches == 0 && running_real == 0 && running_samples == 0;
      closed.emittable =
          closed.seconds > 0 && std::isfinite(closed.seconds) && representable(current.counts) && !warm_up;
      last_clock = clock;
      current = mirror{};
    } else {
      h.flush();
      flushed = true;
    }
  }
  h.flush();
  const std::size_t records_before_late_events = records.size();
  h.on_log(log_event{});  // events after flush: ignored
  ++after_flush;
  FUZZ_CHECK(records.size() == records_before_late_events, "an event after flush() emitted a record");

  const throughput_health health = plugin->health();
  FUZZ_CHECK(health.events_after_flush == after_flush, "events after flush are miscounted");
  FUZZ_CHECK(health.bad_microbatches == bad, "bad micro-batches are miscounted");

  // Every emitted value was finite and non-negative (check_record); tokens_seen is every interval's tokens up
  // to the record's log, skipped ones included, while each rank's running total is below 2^53.
  std::int64_t previous_step = 0;
  for (const emitted& r : records) {
    FUZZ_CHECK(r.step > previous_step, "records out of order or repeated");
    previous_step = r.step;
    const interval& i = intervals.at(r.step);
    FUZZ_CHECK(i.emittable, "an interval with a non-positive time or unrepresentable counts was emitted");
    const double real = static_cast<double>(i.counts.real_tokens);
    if (i.running_real < (__int128{1} << 53)) {
      FUZZ_CHECK(r.tokens_seen && near(*r.tokens_seen, dp * static_cast<double>(i.running_real), 1e-12),
                 "train/tokens_seen does not add up");
    } else {
      FUZZ_CHECK(!r.tokens_seen, "train/tokens_seen reported past 2^53, where a row no longer carries it exactly");
    }
    FUZZ_CHECK(near(r.tokens_per_second, dp * real / i.seconds, 1e-12), "perf/tokens_per_second");
    const double flops = compute_flops(coeffs, i.counts, o.scope).total();
    // Every rank's row is this rank's, so the per-GPU mean of the rows is this rank's own share:
    // batch FLOPs / tp (its TP share) / (cp*pp) / t / 1e12.
    const double expected_tflops = flops / static_cast<double>(o.parallel.tp) /
                                   static_cast<double>(o.parallel.cp * o.parallel.pp) / i.seconds / 1e12;
    FUZZ_CHECK(near(r.tflops_per_second, expected_tflops, 1e-9), "perf/tflops_per_second");
  }
  if (always_done) {
    // Nothing failed: every log started one collective and every emittable interval was emitted.
    FUZZ_CHECK(health.collectives_started == logs, "not exactly one collective per log");
    FUZZ_CHECK(health.failed_collectives == 0, "a collective failed on a healthy group");
    std::size_t emittable = 0;
    for (const auto& entry : intervals) emittable += entry.second.emittable ? 1 : 0;
    FUZZ_CHECK(records.size() == emittable, "an emittable interval was not emitted (" + std::to_string(records.size()) +
                                                " records, " + std::to_string(emittable) + " emittable)");
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  FuzzedDataProvider in(data, size);
  run_plugin(in);
  return 0;
}
