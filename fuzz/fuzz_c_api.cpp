// Fuzz target: the C ABI (include/flopmeter/c_api.h) as a hostile dlopen-ing trainer drives it. Each input
// creates one plugin (alone, or as rank r of a fabricated world of up to 8 ranks whose trainer-provided
// all-reduce succeeds, fails, hangs, answers garbage or cannot start), then plays a sequence of calls with
// fuzzed event structs: struct_size below, at and above the struct's size, array pointers NULL with
// non-zero counts, any set_fields bits, NaN and negative values; flush, health with any struct_size,
// set_metrics_callback, destroy (once, twice), and calls with handles flopmeter never returned.
//
// Invariants checked on every input:
//   - every return code is one the header names, and flopmeter_status_string names it;
//   - on_microbatch: FLOPMETER_OK leaves bad_microbatches unchanged; E_REJECTED, E_STRUCT_SIZE and
//     E_NULL_ARGUMENT (of a live plugin) add exactly 1 to it; E_AFTER_FLUSH adds 1 to events_after_flush
//     and happens exactly after a flush; a NULL array with a non-zero count and a struct_size below version
//     1 are always refused; on_log's E_STRUCT_SIZE adds 1 to rejected_logs;
//   - health never writes past its caller's struct_size, refuses (writing nothing) below version 2, and its
//     counters never decrease;
//   - every metrics record reaches the callback as one JSON object with no NaN or infinity in it;
//   - after destroy every call with the handle returns E_INVALID_HANDLE and destroy(NULL) is FLOPMETER_OK;
//   - nothing crashes, leaks or trips ASan/UBSan (the build's sanitizers).
#include <fuzzer/FuzzedDataProvider.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <limits>
#include <string>
#include <vector>

#include "flopmeter/c_api.h"
#include "fuzz_support.h"

namespace {

// ---- the plugin config: written once per process (named by the process: -jobs runs several at once) ------

std::string temp_path(const char* name) {
  return "/tmp/flopmeter_fuzz_c_api_" + std::to_string(::getpid()) + "_" + name + ".toml";
}

const std::string& config_path(bool all_ranks_emit) {
  static const std::string paths[2] = {
      [] {
        const std::string path = temp_path("rank0");
        std::ofstream(path) << "[model]\nconfig = \"" FLOPMETER_SOURCE_DIR "/model_configs/tiny_vlm.toml\"\n"
                            << "[peak]\ntflops_per_gpu = 100.0\n[sinks]\nconsole = false\n";
        return path;
      }(),
      [] {
        const std::string path = temp_path("all");
        std::ofstream(path) << "[model]\nconfig = \"" FLOPMETER_SOURCE_DIR "/model_configs/tiny_vlm.toml\"\n"
                            << "[peak]\ntflops_per_gpu = 100.0\n[logging]\nemit = \"all\"\ncollective_timeout_ms = 0\n"
                            << "[sinks]\nconsole = false\n";
        return path;
      }(),
  };
  return paths[all_ranks_emit ? 1 : 0];
}

// ---- a fabricated world behind the trainer's C callbacks -------------------------------------------------

enum class outcome : int { done, failed, hangs, late, garbage, cannot_start };

struct world {
  int rank = 0;
  int size = 1;
  std::vector<outcome> script;
  std::size_t started = 0;
  int live_handles = 0;
};

struct pending {
  outcome o;
  int waits = 0;
};

void* start_allreduce(void* user, double* values, size_t count) {
  auto* w = static_cast<world*>(user);
  const outcome o = w->script.empty() ? outcome::done : w->script[w->started++ % w->script.size()];
  if (o == outcome::cannot_start) return nullptr;
  // Every other rank reports exactly this rank's row, so the result is a valid all-reduce.
  FUZZ_CHECK(w->size > 0 && count % static_cast<std::size_t>(w->size) == 0, "a buffer not a multiple of the world");
  const std::size_t fields = count / static_cast<std::size_t>(w->size);
  const double* own = values + static_cast<std::size_t>(w->rank) * fields;
  for (int r = 0; r < w->size; ++r) {
    if (r != w->rank) std::memcpy(values + static_cast<std::size_t>(r) * fields, own, fields * sizeof(double));
  }
  ++w->live_handles;
  return new pending{o};
}

int wait_allreduce(void* /*user*/, void* handle, int64_t timeout_ms) {
  FUZZ_CHECK(timeout_ms >= 0, "a negative wait timeout");
  auto* p = static_cast<pending*>(handle);
  ++p->waits;
  switch (p->o) {
    case outcome::done: return 0;
    case outcome::failed: return -1;
    case outcome::late: return p->waits > 1 ? 0 : 1;
    case outcome::garbage: return 7;
    default: return 1;
  }
}

void release_allreduce(void* user, void* handle) {
  --static_cast<world*>(user)->live_handles;
  delete static_cast<pending*>(handle);
}

// ---- the metrics callback ------------------------------------------------------------------------------

struct records {
  int count = 0;
  // Re-entry: what the callback calls on the plugin that is emitting (-1: nothing; see on_record), and how
  // many of those calls were refused with FLOPMETER_E_REENTRANT (each counted once in reentrant_calls).
  flopmeter_plugin* plugin = nullptr;
  int reenter = -1;
  std::uint64_t refused = 0;
};

void on_record(void* user, int64_t step, const char* json);

// One call on the emitting plugin from inside its own callback: health and set_metrics_callback work, the
// others are refused with FLOPMETER_E_REENTRANT (never a deadlock: the fuzzer's timeout would catch one).
void call_back_into_the_plugin(records& r) {
  if (r.plugin == nullptr || r.reenter < 0) return;
  int code = FLOPMETER_OK;
  bool refused = true;
  switch (r.reenter) {
    case 0: {
      flopmeter_health_counters h{};
      h.struct_size = sizeof(h);
      code = flopmeter_health(r.plugin, &h);
      FUZZ_CHECK(code == FLOPMETER_OK, "health from inside the callback: " + std::to_string(code));
      FUZZ_CHECK(h.reentrant_calls == r.refused,
                 "reentrant_calls " + std::to_string(h.reentrant_calls) + ", refused " + std::to_string(r.refused));
      refused = false;
      break;
    }
    case 1: {
      flopmeter_log l{};
      l.struct_size = sizeof(l);
      l.step = 1;
      code = flopmeter_on_log(r.plugin, &l);
      break;
    }
    case 2: code = flopmeter_flush(r.plugin); break;
    case 3: code = flopmeter_destroy(r.plugin); break;
    case 4: {
      const int64_t length = 10;
      flopmeter_microbatch m{};
      m.struct_size = sizeof(m);
      m.document_lengths = &length;
      m.num_document_lengths = 1;
      code = flopmeter_on_microbatch(r.plugin, &m);
      break;
    }
    default:
      code = flopmeter_set_metrics_callback(r.plugin, on_record, &r);
      FUZZ_CHECK(code == FLOPMETER_OK, "set_metrics_callback from inside the callback: " + std::to_string(code));
      refused = false;
      break;
  }
  if (refused) {
    FUZZ_CHECK(code == FLOPMETER_E_REENTRANT,
               "a re-entrant call (" + std::to_string(r.reenter) + ") got " + std::to_string(code));
    ++r.refused;
  }
}

void on_record(void* user, int64_t /*step*/, const char* json) {
  FUZZ_CHECK(json != nullptr, "a NULL record");
  const std::string line(json);
  FUZZ_CHECK(line.size() >= 2 && line.front() == '{' && line.back() == '}', "not one JSON object: " + line);
  FUZZ_CHECK(line.find('\n') == std::string::npos, "a newline in a record: " + line);
  for (const char* bad : {"nan", "NaN", "inf", "Infinity"}) {
    FUZZ_CHECK(line.find(bad) == std::string::npos, "a non-finite value in a record: " + line);
  }
  auto& r = *static_cast<records*>(user);
  ++r.count;
  call_back_into_the_plugin(r);
}

// ---- helpers -------------------------------------------------------------------------------------------

bool known_code(int code) {
  return code == FLOPMETER_OK || code == FLOPMETER_E_NULL_ARGUMENT || code == FLOPMETER_E_STRUCT_SIZE ||
         code == FLOPMETER_E_REJECTED || code == FLOPMETER_E_INVALID_HANDLE || code == FLOPMETER_E_AFTER_FLUSH ||
         code == FLOPMETER_E_REENTRANT;
}

void check_code(int code) {
  FUZZ_CHECK(known_code(code), "an unnamed return code " + std::to_string(code));
  const std::string name = flopmeter_status_string(code);
  FUZZ_CHECK(name.rfind("FLOPMETER_", 0) == 0, "status string without its name: " + name);
}

// The struct_size of flopmeter_microbatch in version 1 (up to label_tokens), and the one that covers
// positions_int32 (added later in version 2).
constexpr std::size_t kMicrobatchV1Size = offsetof(flopmeter_microbatch, label_tokens) + sizeof(int64_t);
constexpr std::size_t kMicrobatchInt32Size = offsetof(flopmeter_microbatch, num_positions_int32) + sizeof(size_t);

constexpr std::int64_t kInteresting[] = {0,
                                         1,
                                         2,
                                         4,
                                         8,
                                         16,
                                         64,
                                         -1,
                                         std::numeric_limits<std::int64_t>::max(),
                                         std::numeric_limits<std::int64_t>::min(),
                                         1LL << 32,
                                         1LL << 53};

std::int64_t pick(FuzzedDataProvider& in) {
  switch (in.ConsumeIntegralInRange<int>(0, 2)) {
    case 0: return in.ConsumeIntegralInRange<std::int64_t>(0, 64);
    case 1: return in.PickValueInArray(kInteresting);
    default: return in.ConsumeIntegral<std::int64_t>();
  }
}

double pick_double(FuzzedDataProvider& in) {
  switch (in.ConsumeIntegralInRange<int>(0, 3)) {
    case 0: return in.ConsumeFloatingPointInRange<double>(0.0, 10.0);
    case 1: return std::numeric_limits<double>::quiet_NaN();
    case 2: return -std::numeric_limits<double>::infinity();
    default: return in.ConsumeFloatingPoint<double>();
  }
}

// A struct_size: the real one most of the time, else below it (down to 0) or above it (a future header).
uint32_t pick_struct_size(FuzzedDataProvider& in, std::size_t real) {
  switch (in.ConsumeIntegralInRange<int>(0, 5)) {
    case 0: return in.ConsumeIntegralInRange<uint32_t>(0, static_cast<uint32_t>(real) - 1);
    case 1: return static_cast<uint32_t>(real) + 8 * in.ConsumeIntegralInRange<uint32_t>(1, 4);
    default: return static_cast<uint32_t>(real);
  }
}

// Room for a struct of a future version: the struct, then zeroed fields flopmeter does not know.
template <class T>
struct padded {
  T value;
  std::uint64_t future[4];
};

// An array argument: a real vector, or NULL with a count (0 or not).
template <class T>
struct array_arg {
  std::vector<T> data;
  bool null = false;
  std::size_t count = 0;
  const T* pointer() const { return null ? nullptr : data.data(); }
  std::size_t size() const { return null ? count : data.size(); }
  bool null_with_count() const { return null && count != 0; }
};

// int64 lengths, cu_seqlens or positions, or int32 positions (the same picks, converted: small ones stay).
template <class T = std::int64_t>
array_arg<T> pick_values(FuzzedDataProvider& in) {
  array_arg<T> a;
  const int kind = in.ConsumeIntegralInRange<int>(0, 7);
  if (kind == 0) {
    a.null = true;
    a.count = in.ConsumeBool() ? 0 : in.ConsumeIntegralInRange<std::size_t>(1, 1u << 20);
    return a;
  }
  if (kind <= 3) return a;  // absent
  const std::size_t n = in.ConsumeIntegralInRange<std::size_t>(1, 8);
  for (std::size_t i = 0; i < n; ++i) a.data.push_back(static_cast<T>(pick(in)));
  return a;
}

array_arg<flopmeter_grid> pick_grids(FuzzedDataProvider& in) {
  array_arg<flopmeter_grid> a;
  const int kind = in.ConsumeIntegralInRange<int>(0, 5);
  if (kind == 0) {
    a.null = true;
    a.count = in.ConsumeBool() ? 0 : in.ConsumeIntegralInRange<std::size_t>(1, 1u << 20);
    return a;
  }
  if (kind <= 2) return a;
  const std::size_t n = in.ConsumeIntegralInRange<std::size_t>(1, 3);
  for (std::size_t i = 0; i < n; ++i) {
    const bool small = in.ConsumeBool();
    a.data.push_back({small ? in.ConsumeIntegralInRange<std::int64_t>(1, 2) : pick(in),
                      small ? 2 * in.ConsumeIntegralInRange<std::int64_t>(0, 4) : pick(in),
                      small ? 2 * in.ConsumeIntegralInRange<std::int64_t>(0, 4) : pick(in)});
  }
  return a;
}

flopmeter_health_counters read_health(flopmeter_plugin* plugin) {
  flopmeter_health_counters h{};
  h.struct_size = sizeof(h);
  const int code = flopmeter_health(plugin, &h);
  FUZZ_CHECK(code == FLOPMETER_OK, "health of a live plugin failed: " + std::to_string(code));
  return h;
}

void check_monotone(const flopmeter_health_counters& before, const flopmeter_health_counters& after) {
  FUZZ_CHECK(after.bad_microbatches >= before.bad_microbatches &&
                 after.failed_collectives >= before.failed_collectives &&
                 after.skipped_intervals >= before.skipped_intervals &&
                 after.events_after_flush >= before.events_after_flush &&
                 after.collectives_started >= before.collectives_started && after.rejected_logs >= before.rejected_logs,
             "a health counter decreased");
}

void check_dead(flopmeter_plugin* handle) {
  flopmeter_microbatch m{};
  m.struct_size = sizeof(m);
  flopmeter_log l{};
  l.struct_size = sizeof(l);
  flopmeter_health_counters h{};
  h.struct_size = sizeof(h);
  FUZZ_CHECK(flopmeter_on_microbatch(handle, &m) == FLOPMETER_E_INVALID_HANDLE, "a dead handle took a micro-batch");
  FUZZ_CHECK(flopmeter_on_log(handle, &l) == FLOPMETER_E_INVALID_HANDLE, "a dead handle took a log");
  FUZZ_CHECK(flopmeter_flush(handle) == FLOPMETER_E_INVALID_HANDLE, "a dead handle flushed");
  FUZZ_CHECK(flopmeter_health(handle, &h) == FLOPMETER_E_INVALID_HANDLE, "a dead handle reported health");
  FUZZ_CHECK(flopmeter_set_metrics_callback(handle, nullptr, nullptr) == FLOPMETER_E_INVALID_HANDLE,
             "a dead handle took a callback");
  FUZZ_CHECK(flopmeter_destroy(handle) == FLOPMETER_E_INVALID_HANDLE, "a dead handle was destroyed again");
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  FuzzedDataProvider in(data, size);

  // The world: alone (comm NULL) or rank r of up to 8 behind the trainer's callbacks.
  world w;
  flopmeter_comm comm{};
  const bool with_comm = in.ConsumeBool();
  if (with_comm) {
    w.size = in.ConsumeIntegralInRange<int>(1, 8);
    w.rank = in.ConsumeIntegralInRange<int>(0, w.size - 1);
    const int steps = in.ConsumeIntegralInRange<int>(0, 4);
    for (int i = 0; i < steps; ++i) w.script.push_back(static_cast<outcome>(in.ConsumeIntegralInRange<int>(0, 5)));
    comm.struct_size = sizeof(comm);
    comm.rank = w.rank;
    comm.world_size = w.size;
    comm.user = &w;
    comm.start_allreduce_sum = start_allreduce;
    comm.wait = wait_allreduce;
    comm.release = release_allreduce;
  }
  char error[256];
  flopmeter_plugin* plugin =
      flopmeter_create(config_path(in.ConsumeBool()).c_str(), with_comm ? &comm : nullptr, error, sizeof(error));
  FUZZ_CHECK(plugin != nullptr, std::string("create failed: ") + error);
  records out;
  out.plugin = plugin;
  check_code(flopmeter_set_metrics_callback(plugin, on_record, &out));

  bool flushed = false;
  bool destroyed = false;
  flopmeter_health_counters last = read_health(plugin);
  int ops = 0;
  while (in.remaining_bytes() > 0 && ops++ < 64) {
    if (destroyed) break;
    switch (in.ConsumeIntegralInRange<int>(0, 9)) {
      case 0:
      case 1:
      case 2:
      case 3: {  // a micro-batch
        const array_arg<std::int64_t> lengths = pick_values(in);
        const array_arg<std::int64_t> cu =
            in.ConsumeIntegralInRange<int>(0, 3) == 0 ? pick_values(in) : array_arg<std::int64_t>{};
        const array_arg<std::int64_t> positions =
            in.ConsumeIntegralInRange<int>(0, 3) == 0 ? pick_values(in) : array_arg<std::int64_t>{};
        const array_arg<std::int32_t> positions32 =
            in.ConsumeIntegralInRange<int>(0, 3) == 0 ? pick_values<std::int32_t>(in) : array_arg<std::int32_t>{};
        const array_arg<flopmeter_grid> grids = pick_grids(in);
        padded<flopmeter_microbatch> buffer{};
        flopmeter_microbatch& m = buffer.value;
        // Sometimes the struct of version 1, from a header without positions_int32: those fields are not read.
        m.struct_size = in.ConsumeIntegralInRange<int>(0, 7) == 0 ? static_cast<uint32_t>(kMicrobatchV1Size)
                                                                  : pick_struct_size(in, sizeof(flopmeter_microbatch));
        m.positions_int32 = positions32.pointer();
        m.num_positions_int32 = positions32.size();
        m.document_lengths = lengths.pointer();
        m.num_document_lengths = lengths.size();
        m.cu_seqlens = cu.pointer();
        m.num_cu_seqlens = cu.size();
        m.positions = positions.pointer();
        m.num_positions = positions.size();
        m.padding_tokens = in.ConsumeBool() ? 0 : pick(in);
        m.grids = grids.pointer();
        m.num_grids = grids.size();
        m.samples = in.ConsumeBool() ? 1 : pick(in);
        m.has_loss = in.ConsumeIntegral<int>();
        m.loss_sum = pick_double(in);
        m.label_tokens = pick(in);
        const bool null_event = in.ConsumeIntegralInRange<int>(0, 15) == 0;
        const int code = flopmeter_on_microbatch(plugin, null_event ? nullptr : &m);
        check_code(code);
        const flopmeter_health_counters now = read_health(plugin);
        check_monotone(last, now);
        const bool int32_read = m.struct_size >= kMicrobatchInt32Size;  // else positions_int32 is not there
        const bool null_array = lengths.null_with_count() || cu.null_with_count() || positions.null_with_count() ||
                                (int32_read && positions32.null_with_count()) || grids.null_with_count();
        const int formats = (lengths.size() != 0) + (cu.size() != 0) + (positions.size() != 0) +
                            (int32_read && positions32.size() != 0);
        if (null_event) {
          FUZZ_CHECK(code == FLOPMETER_E_NULL_ARGUMENT, "a NULL micro-batch was not refused");
        } else if (m.struct_size < kMicrobatchV1Size) {
          FUZZ_CHECK(code == FLOPMETER_E_STRUCT_SIZE, "a short struct_size was not refused");
        } else if (null_array) {
          FUZZ_CHECK(code == FLOPMETER_E_REJECTED, "a NULL array with a count was not refused");
        } else if (flushed) {
          FUZZ_CHECK(code == FLOPMETER_E_AFTER_FLUSH, "a micro-batch after flush got " + std::to_string(code));
        } else if (formats > 1) {
          FUZZ_CHECK(code == FLOPMETER_E_REJECTED, "a micro-batch with two document formats was not refused");
        } else {
          FUZZ_CHECK(code == FLOPMETER_OK || code == FLOPMETER_E_REJECTED, "on_microbatch: " + std::to_string(code));
        }
        if (code == FLOPMETER_OK) {
          FUZZ_CHECK(now.bad_microbatches == last.bad_microbatches, "a counted batch moved bad_microbatches");
        } else if (code == FLOPMETER_E_AFTER_FLUSH) {
          FUZZ_CHECK(now.events_after_flush == last.events_after_flush + 1, "an event after flush not counted");
          FUZZ_CHECK(now.bad_microbatches == last.bad_microbatches, "an event after flush counted as bad");
        } else {
          FUZZ_CHECK(now.bad_microbatches == last.bad_microbatches + 1,
                     "a refused batch not counted once (code " + std::to_string(code) + ")");
        }
        last = now;
        // int32 positions are the same entries as int64 ones: a description refused with them is refused
        // widened too (the refusal changed nothing, so the plugin's state is the same for the second call).
        if (code == FLOPMETER_E_REJECTED && int32_read && formats == 1 && positions32.size() != 0 && !null_array) {
          const std::vector<std::int64_t> widened(positions32.data.begin(), positions32.data.end());
          flopmeter_microbatch wide = m;
          wide.struct_size = sizeof(wide);
          wide.positions = widened.data();
          wide.num_positions = widened.size();
          wide.positions_int32 = nullptr;
          wide.num_positions_int32 = 0;
          const int wide_code = flopmeter_on_microbatch(plugin, &wide);
          FUZZ_CHECK(wide_code == FLOPMETER_E_REJECTED,
                     "int32 positions refused, the same as int64 got " + std::to_string(wide_code));
          last = read_health(plugin);
        }
        break;
      }
      case 4:
      case 5: {  // a log
        padded<flopmeter_log> buffer{};
        flopmeter_log& l = buffer.value;
        l.struct_size = pick_struct_size(in, sizeof(flopmeter_log));
        l.set_fields = in.ConsumeIntegral<uint32_t>();
        l.step = pick(in);
        l.learning_rate = pick_double(in);
        l.grad_norm = pick_double(in);
        l.data_time_seconds = pick_double(in);
        l.forward_backward_time_seconds = pick_double(in);
        l.peak_memory_bytes = pick(in);
        l.peak_reserved_memory_bytes = pick(in);  // read only when struct_size covers it (0.3)
        const int code = flopmeter_on_log(plugin, &l);
        check_code(code);
        const flopmeter_health_counters now = read_health(plugin);
        check_monotone(last, now);
        // The first version of flopmeter_log ends at peak_memory_bytes; later fields are optional.
        if (l.struct_size < offsetof(flopmeter_log, peak_memory_bytes) + sizeof(int64_t)) {
          FUZZ_CHECK(code == FLOPMETER_E_STRUCT_SIZE, "a short log struct_size was not refused");
          FUZZ_CHECK(now.rejected_logs == last.rejected_logs + 1, "a refused log not counted");
        } else {
          FUZZ_CHECK(code == (flushed ? FLOPMETER_E_AFTER_FLUSH : FLOPMETER_OK), "on_log: " + std::to_string(code));
        }
        last = now;
        break;
      }
      case 6:  // flush
        FUZZ_CHECK(flopmeter_flush(plugin) == FLOPMETER_OK, "flush of a live plugin failed");
        flushed = true;
        break;
      case 7: {  // health with any struct_size: never written past it, nothing below version 2
        padded<flopmeter_health_counters> buffer;
        std::memset(&buffer, 0xA5, sizeof(buffer));
        buffer.value.struct_size = pick_struct_size(in, sizeof(flopmeter_health_counters));
        const uint32_t asked = buffer.value.struct_size;
        const int code = flopmeter_health(plugin, &buffer.value);
        // Refused: nothing after struct_size written. Filled: nothing past the fields this library knows.
        const auto* bytes = reinterpret_cast<const unsigned char*>(&buffer);
        // The counters appended after the first version-2 layout are written only when struct_size covers them.
        const std::size_t first_untouched =
            code == FLOPMETER_OK ? std::min<std::size_t>(asked, sizeof(flopmeter_health_counters)) : sizeof(uint32_t);
        for (std::size_t i = first_untouched; i < sizeof(buffer); ++i) {
          FUZZ_CHECK(bytes[i] == 0xA5, "health wrote byte " + std::to_string(i) + " (struct_size " +
                                           std::to_string(asked) + ", code " + std::to_string(code) + ")");
        }
        constexpr std::size_t first_v2_size = offsetof(flopmeter_health_counters, rejected_logs) + sizeof(uint64_t);
        FUZZ_CHECK(code == (asked < first_v2_size ? FLOPMETER_E_STRUCT_SIZE : FLOPMETER_OK),
                   "health with struct_size " + std::to_string(asked) + ": " + std::to_string(code));
        break;
      }
      case 8:  // the callback unset or set again, calling back into the plugin or not
        check_code(flopmeter_set_metrics_callback(plugin, in.ConsumeBool() ? on_record : nullptr, &out));
        out.reenter = in.ConsumeIntegralInRange<int>(-1, 5);
        break;
      default: {  // calls with handles flopmeter never returned
        const std::uintptr_t garbage = in.ConsumeIntegral<std::uintptr_t>() | 1u;  // odd: never a live handle
        check_dead(reinterpret_cast<flopmeter_plugin*>(garbage));
        if (in.ConsumeIntegralInRange<int>(0, 7) == 0) {
          FUZZ_CHECK(flopmeter_destroy(plugin) == FLOPMETER_OK, "destroy of a live plugin failed");
          destroyed = true;
        }
        break;
      }
    }
  }
  if (!destroyed) {
    FUZZ_CHECK(read_health(plugin).reentrant_calls == out.refused, "re-entrant calls not counted once each");
    FUZZ_CHECK(flopmeter_destroy(plugin) == FLOPMETER_OK, "destroy of a live plugin failed");
  }
  check_dead(plugin);
  FUZZ_CHECK(flopmeter_destroy(nullptr) == FLOPMETER_OK, "destroy(NULL) failed");
  FUZZ_CHECK(w.live_handles == 0, "a collective handle was never released: " + std::to_string(w.live_handles));
  return 0;
}
