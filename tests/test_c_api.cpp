// Loads the built libflopmeter.so with dlopen, the way a trainer loads a plugin, and drives it only through
// the C ABI: version check, create from a TOML path, events, metrics callback, errors, two ranks over a
// trainer-provided all-reduce, the life cycle of a handle and hostile callers.
#include <dlfcn.h>
#include <gtest/gtest.h>

#include <atomic>
#include <cstddef>
#include <climits>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iterator>
#include <map>
#include <string>
#include <system_error>
#include <chrono>
#include <thread>
#include <vector>

#include "flopmeter/c_api.h"
#include "support/json_reading.h"
#include "support/returns_within.h"

namespace {

namespace fs = std::filesystem;

// The C ABI resolved from the shared library, as a dlopen-ing trainer would.
struct c_abi {
  void* library = nullptr;
  decltype(&flopmeter_abi_version) abi_version = nullptr;
  decltype(&flopmeter_create) create = nullptr;
  decltype(&flopmeter_set_metrics_callback) set_metrics_callback = nullptr;
  decltype(&flopmeter_on_microbatch) on_microbatch = nullptr;
  decltype(&flopmeter_on_log) on_log = nullptr;
  decltype(&flopmeter_flush) flush = nullptr;
  decltype(&flopmeter_destroy) destroy = nullptr;
  decltype(&flopmeter_health) health = nullptr;
  decltype(&flopmeter_status_string) status_string = nullptr;
  decltype(&flopmeter_set_log_callback) set_log_callback = nullptr;
  decltype(&flopmeter_model_load) model_load = nullptr;
  decltype(&flopmeter_model_with_options) model_with_options = nullptr;
  decltype(&flopmeter_model_destroy) model_destroy = nullptr;
  decltype(&flopmeter_model_count) model_count = nullptr;
  decltype(&flopmeter_model_flops) model_flops = nullptr;
  decltype(&flopmeter_model_coefficients_json) model_coefficients_json = nullptr;
  decltype(&flopmeter_model_check_json) model_check_json = nullptr;

  c_abi() {
    library = dlopen(FLOPMETER_LIBRARY_PATH, RTLD_NOW | RTLD_LOCAL);
    if (library == nullptr) return;
    resolve(abi_version, "flopmeter_abi_version");
    resolve(create, "flopmeter_create");
    resolve(set_metrics_callback, "flopmeter_set_metrics_callback");
    resolve(on_microbatch, "flopmeter_on_microbatch");
    resolve(on_log, "flopmeter_on_log");
    resolve(flush, "flopmeter_flush");
    resolve(destroy, "flopmeter_destroy");
    resolve(health, "flopmeter_health");
    resolve(status_string, "flopmeter_status_string");
    resolve(set_log_callback, "flopmeter_set_log_callback");
    resolve(model_load, "flopmeter_model_load");
    resolve(model_with_options, "flopmeter_model_with_options");
    resolve(model_destroy, "flopmeter_model_destroy");
    resolve(model_count, "flopmeter_model_count");
    resolve(model_flops, "flopmeter_model_flops");
    resolve(model_coefficients_json, "flopmeter_model_coefficients_json");
    resolve(model_check_json, "flopmeter_model_check_json");
  }
  ~c_abi() {
    if (library != nullptr) dlclose(library);
  }
  template <class F>
  void resolve(F& f, const char* name) {
    f = reinterpret_cast<F>(dlsym(library, name));
  }
};

// This process's scratch directory, removed when the test binary exits (ctest runs each test in a process of
// its own: without the removal every run left hundreds of directories in /tmp).
struct scratch_dir {
  fs::path path = fs::temp_directory_path() / ("flopmeter_c_api_" + std::to_string(::getpid()));
  scratch_dir() { fs::create_directories(path); }
  ~scratch_dir() {
    std::error_code ignored;
    fs::remove_all(path, ignored);
  }
};

fs::path temp_dir() {
  static const scratch_dir dir;
  return dir.path;
}

// A plugin config over the shipped qwen3_vl_2b model with a round peak, no console, metrics to the callback.
fs::path write_config(const std::string& extra = "") {
  const fs::path path = temp_dir() / "plugin.toml";
  std::ofstream(path) << "[model]\nconfig = \"" FLOPMETER_SOURCE_DIR "/model_configs/qwen3_vl_2b.toml\"\n"
                      << "[peak]\ntflops_per_gpu = 100.0\n"
                      << "[logging]\nemit = \"all\"\n"
                      << "[sinks]\nconsole = false\n"
                      << extra;
  return path;
}

struct captured {
  std::vector<std::pair<std::int64_t, std::string>> records;
};

void capture(void* user, int64_t step, const char* json) {
  static_cast<captured*>(user)->records.emplace_back(step, json);
}

// The number `name` in a JSON line the metrics callback got (read with nlohmann-json).
double json_number(const std::string& json, const std::string& name) {
  return flopmeter::testing::number_field(flopmeter::testing::parse_json(json, "the metrics callback's line"), name);
}

flopmeter_microbatch microbatch(const std::vector<int64_t>& lengths, const std::vector<flopmeter_grid>& grids) {
  flopmeter_microbatch m{};
  m.struct_size = sizeof(m);
  m.document_lengths = lengths.data();
  m.num_document_lengths = lengths.size();
  m.grids = grids.data();
  m.num_grids = grids.size();
  m.samples = 1;
  return m;
}

flopmeter_health_counters health_struct() {
  flopmeter_health_counters h{};
  h.struct_size = sizeof(h);
  return h;
}

flopmeter_log log_at(int64_t step) {
  flopmeter_log l{};
  l.struct_size = sizeof(l);
  l.step = step;
  l.set_fields = FLOPMETER_LOG_LEARNING_RATE;
  l.learning_rate = 3e-4;
  return l;
}

// Most tests start the same way: the library loaded and a one-rank plugin (no communicator) created over
// write_config(). Each test destroys `plugin` itself, as its assertions about destroy require.
class c_api_plugin : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_NE(abi.library, nullptr) << dlerror();
    plugin = abi.create(write_config().c_str(), nullptr, error, sizeof(error));
    ASSERT_NE(plugin, nullptr) << error;
  }

  c_abi abi;
  char error[512] = {};
  flopmeter_plugin* plugin = nullptr;
};

TEST(c_api, loads_and_reports_through_the_callback) {
  c_abi abi;
  ASSERT_NE(abi.library, nullptr) << dlerror();
  ASSERT_NE(abi.create, nullptr);
  EXPECT_EQ(abi.abi_version(), FLOPMETER_C_ABI_VERSION);
  char error[512] = {};
  flopmeter_plugin* plugin = abi.create(write_config().c_str(), nullptr, error, sizeof(error));
  ASSERT_NE(plugin, nullptr) << error;
  captured out;
  EXPECT_EQ(abi.set_metrics_callback(plugin, capture, &out), 0);
  const std::vector<int64_t> docs = {1000, 24};
  const std::vector<flopmeter_grid> grids = {{1, 4, 4}};
  const flopmeter_microbatch m = microbatch(docs, grids);
  EXPECT_EQ(abi.on_microbatch(plugin, &m), 0);
  // Qwen3-VL-2B runs about 1.1e13 FLOPs on these 1,024 tokens: an interval of 250 ms or more keeps the MFU
  // against the configured 100 TFLOP/s below 100% (an MFU above 100% is not reported).
  std::this_thread::sleep_for(std::chrono::milliseconds(250));
  flopmeter_log l = log_at(1);
  EXPECT_EQ(abi.on_log(plugin, &l), 0);
  EXPECT_TRUE(out.records.empty());  // deferred to the next log or flush
  EXPECT_EQ(abi.flush(plugin), 0);
  ASSERT_EQ(out.records.size(), 1u);
  EXPECT_EQ(out.records[0].first, 1);
  const std::string& json = out.records[0].second;
  EXPECT_TRUE(flopmeter::testing::parse_json(json).contains("perf/tokens_per_second")) << json;
  EXPECT_TRUE(flopmeter::testing::parse_json(json).contains("perf/mfu")) << json;
  EXPECT_DOUBLE_EQ(json_number(json, "train/tokens_seen"), 1024.0);
  EXPECT_DOUBLE_EQ(json_number(json, "train/lr"), 3e-4);
  flopmeter_health_counters health = health_struct();
  EXPECT_EQ(abi.health(plugin, &health), FLOPMETER_OK);
  EXPECT_EQ(health.collectives_started, 1u);  // one collective started
  EXPECT_EQ(abi.destroy(plugin), FLOPMETER_OK);
}

TEST(c_api, bad_config_returns_null_with_a_located_message) {
  c_abi abi;
  ASSERT_NE(abi.library, nullptr) << dlerror();
  const fs::path path = temp_dir() / "bad.toml";
  // Line 4 ("tp = 0"), column 6: where the value 0 starts.
  std::ofstream(path) << "[model]\nconfig = \"" FLOPMETER_SOURCE_DIR "/model_configs/qwen3_vl_2b.toml\"\n"
                      << "[parallel]\ntp = 0\n";
  char error[512] = {};
  EXPECT_EQ(abi.create(path.c_str(), nullptr, error, sizeof(error)), nullptr);
  const std::string message = error;
  EXPECT_NE(message.find(path.string() + ":4:6"), std::string::npos) << message;
  EXPECT_NE(message.find("parallel.tp"), std::string::npos) << message;
  EXPECT_EQ(abi.create(nullptr, nullptr, error, sizeof(error)), nullptr);
  EXPECT_STREQ(error, "config_path is NULL");
  // A tiny error buffer is truncated, never overrun.
  char tiny[4] = {'x', 'x', 'x', 'x'};
  EXPECT_EQ(abi.create("/nonexistent/plugin.toml", nullptr, tiny, sizeof(tiny)), nullptr);
  EXPECT_EQ(tiny[3], '\0');
}

// The error text is printable and valid UTF-8. The value of model.scope comes back in the message ("unknown
// FLOP scope '...'"): TOML's \u001b and \u009b escapes make it ESC and CSI, which would clear the screen of
// a trainer that prints the message; they come back as the six characters \u001b and \u009b. A buffer too
// small for the message is cut before a multi-byte character, not inside it: "/nonexistent/" is 13 bytes
// and "\xC3\xA9" (e acute) bytes 13-14, so a 15-byte buffer holds the 13 bytes before it and the NUL.
TEST(c_api, create_errors_are_printable_and_cut_at_a_character_boundary) {
  c_abi abi;
  ASSERT_NE(abi.library, nullptr) << dlerror();
  char error[512] = {};
  const fs::path hostile = temp_dir() / "hostile_scope.toml";
  std::ofstream(hostile) << "[model]\nconfig = \"" FLOPMETER_SOURCE_DIR "/model_configs/qwen3_vl_2b.toml\"\n"
                         << "scope = \"\\u001b[2J\\u009b\"\n";
  EXPECT_EQ(abi.create(hostile.c_str(), nullptr, error, sizeof(error)), nullptr);
  const std::string message = error;
  EXPECT_NE(message.find("unknown FLOP scope '\\u001b[2J\\u009b'"), std::string::npos) << message;
  EXPECT_EQ(message.find('\x1b'), std::string::npos) << message;
  EXPECT_EQ(message.find("\xC2\x9B"), std::string::npos) << message;

  char cut[15];
  std::memset(cut, 'x', sizeof(cut));
  EXPECT_EQ(abi.create("/nonexistent/\xC3\xA9.toml", nullptr, cut, sizeof(cut)), nullptr);
  EXPECT_STREQ(cut, "/nonexistent/");
}

TEST_F(c_api_plugin, rejected_events_return_codes_and_never_abort) {
  // The codes keep version 1's values, so a caller that compared numbers still works.
  static_assert(FLOPMETER_E_NULL_ARGUMENT == -1 && FLOPMETER_E_STRUCT_SIZE == -2 && FLOPMETER_E_REJECTED == -3,
                "version 1's values");
  EXPECT_EQ(abi.on_microbatch(nullptr, nullptr), FLOPMETER_E_NULL_ARGUMENT);
  EXPECT_EQ(abi.on_log(plugin, nullptr), FLOPMETER_E_NULL_ARGUMENT);
  const std::vector<int64_t> negative = {5, -1};
  flopmeter_microbatch m = microbatch(negative, {});
  EXPECT_EQ(abi.on_microbatch(plugin, &m), FLOPMETER_E_REJECTED);  // counted as a bad micro-batch
  const std::vector<flopmeter_grid> odd = {{1, 3, 4}};  // h not a multiple of the merge size
  flopmeter_microbatch with_odd = microbatch({}, odd);
  EXPECT_EQ(abi.on_microbatch(plugin, &with_odd), FLOPMETER_E_REJECTED);
  flopmeter_health_counters health = health_struct();
  abi.health(plugin, &health);
  EXPECT_EQ(health.bad_microbatches, 2u);
  EXPECT_EQ(abi.destroy(plugin), FLOPMETER_OK);
  EXPECT_EQ(abi.destroy(nullptr), FLOPMETER_OK);
}

// Two ranks in one thread over a trainer-provided all-reduce: the trainer's callbacks sum the two buffers
// once both ranks have started the same collective.
struct two_rank_allreduce {
  std::map<int, std::vector<double>> sums;  // collective index -> running sum
  std::map<int, int> joined;
  int next[2] = {0, 0};
};
struct rank_user {
  two_rank_allreduce* group;
  int rank;
};
struct handle {
  int index;
  double* values;
  std::size_t count;
};

void* start(void* user, double* values, size_t count) {
  auto* u = static_cast<rank_user*>(user);
  const int index = u->group->next[u->rank]++;
  auto& sum = u->group->sums[index];
  if (sum.empty()) sum.assign(count, 0.0);
  for (std::size_t i = 0; i < count; ++i) sum[i] += values[i];
  ++u->group->joined[index];
  return new handle{index, values, count};
}
int wait(void* user, void* h, int64_t /*timeout_ms*/) {
  auto* u = static_cast<rank_user*>(user);
  auto* hd = static_cast<handle*>(h);
  if (u->group->joined[hd->index] < 2) return 1;
  for (std::size_t i = 0; i < hd->count; ++i) hd->values[i] = u->group->sums[hd->index][i];
  return 0;
}
void release(void* /*user*/, void* h) { delete static_cast<handle*>(h); }

TEST(c_api, two_ranks_over_trainer_callbacks) {
  c_abi abi;
  ASSERT_NE(abi.library, nullptr) << dlerror();
  two_rank_allreduce group;
  rank_user users[2] = {{&group, 0}, {&group, 1}};
  flopmeter_plugin* plugins[2] = {};
  captured out[2];
  for (int r = 0; r < 2; ++r) {
    flopmeter_comm comm{};
    comm.struct_size = sizeof(comm);
    comm.rank = r;
    comm.world_size = 2;
    comm.user = &users[r];
    comm.start_allreduce_sum = start;
    comm.wait = wait;
    comm.release = release;
    char error[512] = {};
    plugins[r] = abi.create(write_config().c_str(), &comm, error, sizeof(error));
    ASSERT_NE(plugins[r], nullptr) << error;
    abi.set_metrics_callback(plugins[r], capture, &out[r]);
  }
  // Rank 0 runs 300 real tokens, rank 1 runs 500: the job saw 800.
  const std::vector<int64_t> docs0 = {300}, docs1 = {200, 300};
  const flopmeter_microbatch m0 = microbatch(docs0, {}), m1 = microbatch(docs1, {});
  abi.on_microbatch(plugins[0], &m0);
  abi.on_microbatch(plugins[1], &m1);
  for (auto* p : plugins) {
    flopmeter_log l = log_at(7);
    abi.on_log(p, &l);
  }
  for (auto* p : plugins) abi.flush(p);
  for (int r = 0; r < 2; ++r) {
    ASSERT_EQ(out[r].records.size(), 1u) << "rank " << r;
    EXPECT_DOUBLE_EQ(json_number(out[r].records[0].second, "train/tokens_seen"), 800.0);
    EXPECT_DOUBLE_EQ(json_number(out[r].records[0].second, "train/num_samples"), 2.0);
  }
  // A comm whose rank is outside the world is a creation error, not a crash.
  flopmeter_comm bad{};
  bad.struct_size = sizeof(bad);
  bad.rank = 2;
  bad.world_size = 2;
  bad.start_allreduce_sum = start;
  bad.wait = wait;
  bad.release = release;
  char error[512] = {};
  EXPECT_EQ(abi.create(write_config().c_str(), &bad, error, sizeof(error)), nullptr);
  EXPECT_NE(std::string(error).find("rank 2 is outside [0, 2)"), std::string::npos) << error;
  for (auto* p : plugins) abi.destroy(p);
}

// ---- version 2: named codes, the health struct, the life cycle of a handle ------------------------------

flopmeter_comm comm_of(rank_user* user, int rank, int world) {
  flopmeter_comm comm{};
  comm.struct_size = sizeof(comm);
  comm.rank = rank;
  comm.world_size = world;
  comm.user = user;
  comm.start_allreduce_sum = start;
  comm.wait = wait;
  comm.release = release;
  return comm;
}

TEST(c_api, version_2_names_every_return_code) {
  c_abi abi;
  ASSERT_NE(abi.library, nullptr) << dlerror();
  EXPECT_EQ(abi.abi_version(), 2u);
  const std::pair<int, const char*> codes[] = {
      {FLOPMETER_OK, "FLOPMETER_OK"},
      {FLOPMETER_E_NULL_ARGUMENT, "FLOPMETER_E_NULL_ARGUMENT"},
      {FLOPMETER_E_STRUCT_SIZE, "FLOPMETER_E_STRUCT_SIZE"},
      {FLOPMETER_E_REJECTED, "FLOPMETER_E_REJECTED"},
      {FLOPMETER_E_INVALID_HANDLE, "FLOPMETER_E_INVALID_HANDLE"},
      {FLOPMETER_E_AFTER_FLUSH, "FLOPMETER_E_AFTER_FLUSH"},
      {FLOPMETER_E_REENTRANT, "FLOPMETER_E_REENTRANT"},
  };
  for (const auto& [code, name] : codes) {
    EXPECT_EQ(std::string(abi.status_string(code)).rfind(std::string(name) + ":", 0), 0u) << code;
  }
  EXPECT_STREQ(abi.status_string(42), "unknown flopmeter return code");
  EXPECT_STREQ(abi.status_string(INT_MIN), "unknown flopmeter return code");
}

TEST_F(c_api_plugin, health_is_a_struct_versioned_by_struct_size) {
  const std::vector<int64_t> bad = {-1};
  const flopmeter_microbatch m = microbatch(bad, {});
  EXPECT_EQ(abi.on_microbatch(plugin, &m), FLOPMETER_E_REJECTED);
  flopmeter_log l = log_at(1);
  EXPECT_EQ(abi.on_log(plugin, &l), FLOPMETER_OK);
  // A caller of a future version: a larger struct with a field this library does not know. The known fields
  // are filled, the unknown one is left as the caller set it.
  struct future_health {
    flopmeter_health_counters v2;
    uint64_t counter_from_the_future;
  } future{};
  future.v2.struct_size = sizeof(future);
  future.counter_from_the_future = 0xABCD;
  EXPECT_EQ(abi.health(plugin, &future.v2), FLOPMETER_OK);
  EXPECT_EQ(future.v2.bad_microbatches, 1u);
  EXPECT_EQ(future.v2.collectives_started, 1u);
  EXPECT_EQ(future.counter_from_the_future, 0xABCDu);
  EXPECT_EQ(future.v2.dropped_records, 0u);  // written (the caller's struct has it): nothing was dropped
  // A caller compiled against the first version-2 layout (ending at rejected_logs): the counters appended later
  // (out_of_step_intervals, dropped_records) lie beyond its struct_size and are not written.
  flopmeter_health_counters first_v2{};
  first_v2.struct_size = offsetof(flopmeter_health_counters, rejected_logs) + sizeof(uint64_t);
  first_v2.out_of_step_intervals = 55;
  first_v2.dropped_records = 66;
  first_v2.reentrant_calls = 88;
  EXPECT_EQ(abi.health(plugin, &first_v2), FLOPMETER_OK);
  EXPECT_EQ(first_v2.bad_microbatches, 1u);
  EXPECT_EQ(first_v2.out_of_step_intervals, 55u);
  EXPECT_EQ(first_v2.dropped_records, 66u);
  EXPECT_EQ(first_v2.reentrant_calls, 88u);
  // A caller whose struct ends at dropped_records (before reentrant_calls was appended): that one field is
  // not written.
  flopmeter_health_counters before_reentrant{};
  before_reentrant.struct_size = offsetof(flopmeter_health_counters, dropped_records) + sizeof(uint64_t);
  before_reentrant.reentrant_calls = 99;
  EXPECT_EQ(abi.health(plugin, &before_reentrant), FLOPMETER_OK);
  EXPECT_EQ(before_reentrant.dropped_records, 0u);
  EXPECT_EQ(before_reentrant.reentrant_calls, 99u);
  // A caller of 0.2, whose struct ends at reentrant_calls: config_mismatch_intervals (0.3) is not written; a
  // caller of this header gets it (0: every rank of this one-rank job has the same settings).
  flopmeter_health_counters v0_2{};
  v0_2.struct_size = offsetof(flopmeter_health_counters, reentrant_calls) + sizeof(uint64_t);
  v0_2.config_mismatch_intervals = 77;
  EXPECT_EQ(abi.health(plugin, &v0_2), FLOPMETER_OK);
  EXPECT_EQ(v0_2.config_mismatch_intervals, 77u);
  flopmeter_health_counters now{};
  now.struct_size = sizeof now;
  now.config_mismatch_intervals = 77;
  EXPECT_EQ(abi.health(plugin, &now), FLOPMETER_OK);
  EXPECT_EQ(now.config_mismatch_intervals, 0u);
  // Version 1's five counters (struct_size 4 + padding + 5 x 8 = 48 bytes) are below the first version of the
  // struct: refused, nothing written.
  flopmeter_health_counters small{};
  small.struct_size = 48;
  small.bad_microbatches = 77;
  EXPECT_EQ(abi.health(plugin, &small), FLOPMETER_E_STRUCT_SIZE);
  EXPECT_EQ(small.bad_microbatches, 77u);
  EXPECT_EQ(abi.health(plugin, nullptr), FLOPMETER_E_NULL_ARGUMENT);
  EXPECT_EQ(abi.destroy(plugin), FLOPMETER_OK);
}

// The code of each micro-batch comes from its own call: one thread sending only valid batches and one sending
// only invalid ones never see each other's result. (A health() diff around the call, as version 1 did, gives
// the valid thread a -3 whenever the other thread's rejection lands in between: about 1 in 10^5 of its calls
// on a loaded 2-core machine, so the valid thread keeps calling for as long as the other one runs.)
TEST_F(c_api_plugin, a_rejected_microbatch_is_reported_by_its_own_call_across_threads) {
  constexpr int kBadCalls = 20000;
  const std::vector<int64_t> good = {16}, bad = {-16};
  const flopmeter_microbatch good_batch = microbatch(good, {}), bad_batch = microbatch(bad, {});
  std::atomic<int> good_not_ok{0}, bad_not_rejected{0}, ready{0};
  std::atomic<bool> bad_done{false};
  std::int64_t good_calls = 0;
  const auto start_together = [&ready] {
    ++ready;
    while (ready.load() < 2) std::this_thread::yield();
  };
  std::thread good_thread([&] {
    start_together();
    while (!bad_done.load()) {
      ++good_calls;
      if (abi.on_microbatch(plugin, &good_batch) != FLOPMETER_OK) ++good_not_ok;
    }
  });
  std::thread bad_thread([&] {
    start_together();
    for (int i = 0; i < kBadCalls; ++i) {
      if (abi.on_microbatch(plugin, &bad_batch) != FLOPMETER_E_REJECTED) ++bad_not_rejected;
    }
    bad_done = true;
  });
  good_thread.join();
  bad_thread.join();
  EXPECT_EQ(good_not_ok.load(), 0) << "of " << good_calls << " valid batches";
  EXPECT_EQ(bad_not_rejected.load(), 0);
  flopmeter_health_counters health = health_struct();
  abi.health(plugin, &health);
  EXPECT_EQ(health.bad_microbatches, static_cast<uint64_t>(kBadCalls));
  EXPECT_EQ(abi.destroy(plugin), FLOPMETER_OK);
}

TEST_F(c_api_plugin, destroy_flushes_and_a_second_destroy_is_refused) {
  captured out;
  abi.set_metrics_callback(plugin, capture, &out);
  const std::vector<int64_t> docs = {100};
  const flopmeter_microbatch m = microbatch(docs, {});
  abi.on_microbatch(plugin, &m);
  flopmeter_log l = log_at(3);
  abi.on_log(plugin, &l);
  EXPECT_TRUE(out.records.empty());
  // No flush: destroy emits the deferred interval (100 tokens at step 3).
  EXPECT_EQ(abi.destroy(plugin), FLOPMETER_OK);
  ASSERT_EQ(out.records.size(), 1u);
  EXPECT_EQ(out.records[0].first, 3);
  EXPECT_DOUBLE_EQ(json_number(out.records[0].second, "train/tokens_seen"), 100.0);
  // The handle is dead: everything with it is refused, destroy included, and nothing crashes.
  EXPECT_EQ(abi.destroy(plugin), FLOPMETER_E_INVALID_HANDLE);
  EXPECT_EQ(abi.on_microbatch(plugin, &m), FLOPMETER_E_INVALID_HANDLE);
  EXPECT_EQ(abi.on_log(plugin, &l), FLOPMETER_E_INVALID_HANDLE);
  EXPECT_EQ(abi.flush(plugin), FLOPMETER_E_INVALID_HANDLE);
  EXPECT_EQ(abi.set_metrics_callback(plugin, capture, &out), FLOPMETER_E_INVALID_HANDLE);
  flopmeter_health_counters health = health_struct();
  EXPECT_EQ(abi.health(plugin, &health), FLOPMETER_E_INVALID_HANDLE);
  EXPECT_EQ(out.records.size(), 1u);
  // A handle value is never reused: a plugin created next is a different handle, and the dead one stays dead.
  flopmeter_plugin* next = abi.create(write_config().c_str(), nullptr, error, sizeof(error));
  ASSERT_NE(next, nullptr) << error;
  EXPECT_NE(next, plugin);
  EXPECT_EQ(abi.on_microbatch(plugin, &m), FLOPMETER_E_INVALID_HANDLE);
  EXPECT_EQ(abi.on_microbatch(next, &m), FLOPMETER_OK);
  EXPECT_EQ(abi.destroy(next), FLOPMETER_OK);
}

TEST(c_api, a_world_beyond_the_bound_is_a_clear_create_error) {
  c_abi abi;
  ASSERT_NE(abi.library, nullptr) << dlerror();
  two_rank_allreduce group;
  rank_user user{&group, 0};
  for (const int world : {INT_MAX, FLOPMETER_MAX_WORLD_SIZE + 1}) {
    const flopmeter_comm comm = comm_of(&user, 0, world);
    char error[512] = {};
    EXPECT_EQ(abi.create(write_config().c_str(), &comm, error, sizeof(error)), nullptr);
    EXPECT_NE(std::string(error).find("world_size " + std::to_string(world) + " exceeds 1048576 ranks"),
              std::string::npos)
        << error;
  }
}

// Each array pointer NULL with a non-zero count: refused, counted, and none of its samples, padding or
// tokens reach a metric. By hand: only the valid 1024-token, 1-sample batch is counted.
TEST_F(c_api_plugin, a_null_array_with_a_count_is_refused_and_counted) {
  captured out;
  abi.set_metrics_callback(plugin, capture, &out);
  for (int which = 0; which < 4; ++which) {
    flopmeter_microbatch m = microbatch({}, {});
    m.samples = 5;
    m.padding_tokens = 100;
    switch (which) {
      case 0: m.num_document_lengths = 3; break;
      case 1: m.num_cu_seqlens = 3; break;
      case 2: m.num_positions = 3; break;
      default: m.num_grids = 1; break;
    }
    EXPECT_EQ(abi.on_microbatch(plugin, &m), FLOPMETER_E_REJECTED) << which;
  }
  const std::vector<int64_t> docs = {1024};
  const flopmeter_microbatch valid = microbatch(docs, {});
  EXPECT_EQ(abi.on_microbatch(plugin, &valid), FLOPMETER_OK);
  flopmeter_log l = log_at(1);
  abi.on_log(plugin, &l);
  abi.flush(plugin);
  ASSERT_EQ(out.records.size(), 1u);
  EXPECT_DOUBLE_EQ(json_number(out.records[0].second, "train/tokens_seen"), 1024.0);
  EXPECT_DOUBLE_EQ(json_number(out.records[0].second, "train/num_samples"), 1.0);
  EXPECT_DOUBLE_EQ(json_number(out.records[0].second, "train/batch_efficiency"), 1.0);
  flopmeter_health_counters health = health_struct();
  abi.health(plugin, &health);
  EXPECT_EQ(health.bad_microbatches, 4u);
  abi.destroy(plugin);
}

// flopmeter_log's reserved peak (0.3) is read only when its bit is set and struct_size covers it. Log 1: 3 GiB
// reserved, bit set, whole struct: perf/mem_reserved_gib 3. Log 2: the same value and bit, but a struct_size of
// 0.2 (ending at peak_memory_bytes): not read, so log 2's record has no perf/mem_reserved_gib.
TEST_F(c_api_plugin, the_reserved_memory_peak_is_read_only_within_struct_size) {
  captured out;
  abi.set_metrics_callback(plugin, capture, &out);
  const std::vector<int64_t> docs = {64};
  const flopmeter_microbatch m = microbatch(docs, {});
  for (int64_t step = 1; step <= 2; ++step) {
    EXPECT_EQ(abi.on_microbatch(plugin, &m), FLOPMETER_OK);
    flopmeter_log l = log_at(step);
    l.set_fields |= FLOPMETER_LOG_PEAK_RESERVED_MEMORY;
    l.peak_reserved_memory_bytes = int64_t{3} << 30;
    if (step == 2) l.struct_size = offsetof(flopmeter_log, peak_memory_bytes) + sizeof(int64_t);
    EXPECT_EQ(abi.on_log(plugin, &l), FLOPMETER_OK);
  }
  abi.flush(plugin);
  ASSERT_EQ(out.records.size(), 2u);
  EXPECT_DOUBLE_EQ(json_number(out.records[0].second, "perf/mem_reserved_gib"), 3.0);
  EXPECT_EQ(out.records[1].second.find("perf/mem_reserved_gib"), std::string::npos) << out.records[1].second;
  abi.destroy(plugin);
}

// Positions as int32 (added to flopmeter_microbatch later in version 2) count as the same positions in int64
// and as the lengths they describe. Documents of 3 and 5 tokens: lengths {3, 5}, positions
// {0,1,2, 0,1,2,3,4}: 8 real tokens, 2 documents, 3*4/2 + 5*6/2 = 21 causal pairs in every form, so each
// interval adds 8 to train/tokens_seen (8, 16, 24) and has the same FLOPs per token: tflops/tps is the
// interval's FLOPs / tokens / 1e12 (the interval's time cancels), equal in all three records.
TEST_F(c_api_plugin, int32_positions_count_as_the_int64_ones) {
  captured out;
  abi.set_metrics_callback(plugin, capture, &out);
  const std::vector<int64_t> lengths = {3, 5};
  const std::vector<int64_t> positions64 = {0, 1, 2, 0, 1, 2, 3, 4};
  const std::vector<int32_t> positions32 = {0, 1, 2, 0, 1, 2, 3, 4};
  flopmeter_microbatch by_lengths = microbatch(lengths, {});
  flopmeter_microbatch by_positions64 = microbatch({}, {});
  by_positions64.positions = positions64.data();
  by_positions64.num_positions = positions64.size();
  flopmeter_microbatch by_positions32 = microbatch({}, {});
  by_positions32.positions_int32 = positions32.data();
  by_positions32.num_positions_int32 = positions32.size();
  const flopmeter_microbatch* forms[] = {&by_lengths, &by_positions64, &by_positions32};
  for (int i = 0; i < 3; ++i) {
    ASSERT_EQ(abi.on_microbatch(plugin, forms[i]), FLOPMETER_OK) << i;
    flopmeter_log l = log_at(i + 1);
    abi.on_log(plugin, &l);
  }
  abi.flush(plugin);
  ASSERT_EQ(out.records.size(), 3u);
  double flops_per_token[3];
  for (int i = 0; i < 3; ++i) {
    const std::string& json = out.records[static_cast<std::size_t>(i)].second;
    EXPECT_DOUBLE_EQ(json_number(json, "train/tokens_seen"), 8.0 * (i + 1)) << i;
    flops_per_token[i] = json_number(json, "perf/tflops_per_second") / json_number(json, "perf/tokens_per_second");
  }
  EXPECT_NEAR(flops_per_token[1] / flops_per_token[0], 1.0, 1e-12);
  EXPECT_NEAR(flops_per_token[2] / flops_per_token[0], 1.0, 1e-12);
  abi.destroy(plugin);
}

// The int32 positions follow the rules of the other arrays: with the int64 ones (two descriptions) or NULL
// with a count, the batch is refused and counted; a struct from a header older than positions_int32
// (struct_size up to label_tokens) is read without them, whatever lies in memory after it.
TEST_F(c_api_plugin, int32_positions_follow_the_array_rules_and_struct_size) {
  captured out;
  abi.set_metrics_callback(plugin, capture, &out);
  const std::vector<int64_t> positions64 = {0, 1, 2};
  const std::vector<int32_t> positions32 = {0, 1, 2};
  flopmeter_microbatch both = microbatch({}, {});
  both.positions = positions64.data();
  both.num_positions = positions64.size();
  both.positions_int32 = positions32.data();
  both.num_positions_int32 = positions32.size();
  EXPECT_EQ(abi.on_microbatch(plugin, &both), FLOPMETER_E_REJECTED);
  flopmeter_microbatch null_with_count = microbatch({}, {});
  null_with_count.num_positions_int32 = 3;
  EXPECT_EQ(abi.on_microbatch(plugin, &null_with_count), FLOPMETER_E_REJECTED);
  // Version 1's struct_size: the int32 fields lie beyond it and are not read, so this is the int64
  // positions alone (3 tokens), not two descriptions.
  flopmeter_microbatch old = both;
  old.struct_size = offsetof(flopmeter_microbatch, label_tokens) + sizeof(int64_t);
  EXPECT_EQ(abi.on_microbatch(plugin, &old), FLOPMETER_OK);
  flopmeter_log l = log_at(1);
  abi.on_log(plugin, &l);
  abi.flush(plugin);
  ASSERT_EQ(out.records.size(), 1u);
  EXPECT_DOUBLE_EQ(json_number(out.records[0].second, "train/tokens_seen"), 3.0);
  flopmeter_health_counters health = health_struct();
  abi.health(plugin, &health);
  EXPECT_EQ(health.bad_microbatches, 2u);
  abi.destroy(plugin);
}

// train/loss is sum(loss_sum) / sum(label_tokens): a non-zero loss sum over 0 label tokens is refused (a sum
// over no tokens is 0), so the interval's loss is that of the valid batch alone, 4 / 1 = 4 (before: (-4 + 4)
// / 1 = 0). 0 over 0 (a batch whose labels are all masked) is accepted and changes nothing.
TEST_F(c_api_plugin, a_loss_sum_over_zero_label_tokens_is_refused) {
  captured out;
  abi.set_metrics_callback(plugin, capture, &out);
  const std::vector<int64_t> docs = {16};
  flopmeter_microbatch m = microbatch(docs, {});
  m.has_loss = 1;
  m.loss_sum = -4.0;
  m.label_tokens = 0;
  EXPECT_EQ(abi.on_microbatch(plugin, &m), FLOPMETER_E_REJECTED);
  m.loss_sum = 0.0;
  EXPECT_EQ(abi.on_microbatch(plugin, &m), FLOPMETER_OK);
  m.loss_sum = 4.0;
  m.label_tokens = 1;
  EXPECT_EQ(abi.on_microbatch(plugin, &m), FLOPMETER_OK);
  flopmeter_log l = log_at(1);
  abi.on_log(plugin, &l);
  abi.flush(plugin);
  ASSERT_EQ(out.records.size(), 1u);
  EXPECT_DOUBLE_EQ(json_number(out.records[0].second, "train/loss"), 4.0);
  EXPECT_DOUBLE_EQ(json_number(out.records[0].second, "train/tokens_seen"), 32.0);  // the two accepted batches
  flopmeter_health_counters health = health_struct();
  abi.health(plugin, &health);
  EXPECT_EQ(health.bad_microbatches, 1u);
  abi.destroy(plugin);
}

TEST_F(c_api_plugin, a_struct_size_too_small_is_counted_and_logged) {
  const std::vector<int64_t> docs = {10};
  flopmeter_microbatch m = microbatch(docs, {});
  m.struct_size = offsetof(flopmeter_microbatch, label_tokens);  // a caller whose struct lacks label_tokens
  flopmeter_log l = log_at(1);
  l.struct_size = 8;
  testing::internal::CaptureStderr();
  EXPECT_EQ(abi.on_microbatch(plugin, &m), FLOPMETER_E_STRUCT_SIZE);
  EXPECT_EQ(abi.on_log(plugin, &l), FLOPMETER_E_STRUCT_SIZE);
  const std::string logged = testing::internal::GetCapturedStderr();
  EXPECT_NE(logged.find("micro-batch refused by the C ABI (FLOPMETER_E_STRUCT_SIZE"), std::string::npos) << logged;
  EXPECT_NE(logged.find("log refused by the C ABI (FLOPMETER_E_STRUCT_SIZE"), std::string::npos) << logged;
  flopmeter_health_counters health = health_struct();
  abi.health(plugin, &health);
  EXPECT_EQ(health.bad_microbatches, 1u);
  EXPECT_EQ(health.rejected_logs, 1u);
  EXPECT_EQ(health.collectives_started, 0u);  // the refused log started no collective
  abi.destroy(plugin);
}

// ---- hostile callers: codes, never a crash ---------------------------------------------------------------

int wait_with_garbage(void*, void*, int64_t) { return 7; }  // neither 0, 1 nor -1
void* start_refusing(void*, double*, size_t) { return nullptr; }

TEST(c_api, hostile_callers_get_codes_not_crashes) {
  c_abi abi;
  ASSERT_NE(abi.library, nullptr) << dlerror();
  char error[512] = {};
  const std::string config = write_config();
  const std::vector<int64_t> docs = {64};
  const flopmeter_microbatch m = microbatch(docs, {});
  flopmeter_log l = log_at(1);

  // 1-3. Handles flopmeter never returned: small numbers, a stack address, all bits set.
  int local = 0;
  for (flopmeter_plugin* garbage :
       {reinterpret_cast<flopmeter_plugin*>(0x1), reinterpret_cast<flopmeter_plugin*>(&local),
        reinterpret_cast<flopmeter_plugin*>(~std::uintptr_t{0})}) {
    EXPECT_EQ(abi.on_microbatch(garbage, &m), FLOPMETER_E_INVALID_HANDLE);
    EXPECT_EQ(abi.on_log(garbage, &l), FLOPMETER_E_INVALID_HANDLE);
    EXPECT_EQ(abi.destroy(garbage), FLOPMETER_E_INVALID_HANDLE);
  }
  EXPECT_EQ(local, 0);

  // 4. A comm whose struct_size is too small.
  two_rank_allreduce group;
  rank_user user{&group, 0};
  flopmeter_comm comm = comm_of(&user, 0, 1);
  comm.struct_size = 8;
  EXPECT_EQ(abi.create(config.c_str(), &comm, error, sizeof(error)), nullptr);
  EXPECT_NE(std::string(error).find("flopmeter_comm.struct_size is 8"), std::string::npos) << error;
  // 5. A comm missing its wait callback.
  comm = comm_of(&user, 0, 1);
  comm.wait = nullptr;
  EXPECT_EQ(abi.create(config.c_str(), &comm, error, sizeof(error)), nullptr);
  EXPECT_NE(std::string(error).find("must all be set"), std::string::npos) << error;
  // 6-7. A world of 0 or -1 ranks: the world size is what is wrong, whatever the rank (METRICS.md's catalogue),
  // not "rank 0 is outside [0, 0)".
  for (const int world : {0, -1}) {
    comm = comm_of(&user, 0, world);
    EXPECT_EQ(abi.create(config.c_str(), &comm, error, sizeof(error)), nullptr);
    EXPECT_EQ(std::string(error), "flopmeter_comm: world_size must be >= 1, got " + std::to_string(world));
  }
  // A negative rank in a world of 2.
  comm = comm_of(&user, -1, 2);
  EXPECT_EQ(abi.create(config.c_str(), &comm, error, sizeof(error)), nullptr);
  EXPECT_NE(std::string(error).find("rank -1 is outside [0, 2)"), std::string::npos) << error;
  // 8. No error buffer (NULL with a size, or a size of 0): create fails quietly, writing nothing.
  EXPECT_EQ(abi.create(nullptr, nullptr, nullptr, 512), nullptr);
  char untouched[4] = {'a', 'b', 'c', 'd'};
  EXPECT_EQ(abi.create(nullptr, nullptr, untouched, 0), nullptr);
  EXPECT_EQ(std::string(untouched, 4), "abcd");

  flopmeter_plugin* plugin = abi.create(config.c_str(), nullptr, error, sizeof(error));
  ASSERT_NE(plugin, nullptr) << error;
  // 9. A caller built against a future header: a larger struct_size is read up to the fields known here.
  struct future_microbatch {
    flopmeter_microbatch v1;
    int64_t field_from_the_future;
  } future{};
  future.v1 = m;
  future.v1.struct_size = sizeof(future);
  future.field_from_the_future = -1;
  EXPECT_EQ(abi.on_microbatch(plugin, &future.v1), FLOPMETER_OK);
  // 10. A NULL metrics callback (unset) and a flush with nothing to emit.
  EXPECT_EQ(abi.set_metrics_callback(plugin, nullptr, nullptr), FLOPMETER_OK);
  EXPECT_EQ(abi.on_log(plugin, &l), FLOPMETER_OK);
  EXPECT_EQ(abi.flush(plugin), FLOPMETER_OK);
  EXPECT_EQ(abi.flush(plugin), FLOPMETER_OK);  // a second flush does nothing
  // 11. Events after flush: refused with their own code and counted.
  EXPECT_EQ(abi.on_microbatch(plugin, &m), FLOPMETER_E_AFTER_FLUSH);
  EXPECT_EQ(abi.on_log(plugin, &l), FLOPMETER_E_AFTER_FLUSH);
  flopmeter_health_counters health = health_struct();
  EXPECT_EQ(abi.health(plugin, &health), FLOPMETER_OK);
  EXPECT_EQ(health.events_after_flush, 2u);
  EXPECT_EQ(abi.destroy(plugin), FLOPMETER_OK);

  // 12. A trainer whose wait callback returns a code outside {0, 1, -1}, and 13. one whose start cannot start
  // the collective: each log's interval is lost and counted, the plugin goes on.
  for (int variant = 0; variant < 2; ++variant) {
    comm = comm_of(&user, 0, 1);
    if (variant == 0) comm.wait = wait_with_garbage;
    if (variant == 1) comm.start_allreduce_sum = start_refusing;
    flopmeter_plugin* p = abi.create(config.c_str(), &comm, error, sizeof(error));
    ASSERT_NE(p, nullptr) << error;
    captured out;
    abi.set_metrics_callback(p, capture, &out);
    for (int step = 1; step <= 3; ++step) {
      EXPECT_EQ(abi.on_microbatch(p, &m), FLOPMETER_OK);
      flopmeter_log log = log_at(step);
      EXPECT_EQ(abi.on_log(p, &log), FLOPMETER_OK);
    }
    EXPECT_EQ(abi.destroy(p), FLOPMETER_OK);
    EXPECT_TRUE(out.records.empty()) << variant;
  }
}

// Re-entry: the metrics callback runs on the thread that called on_log, while the plugin holds its lock.
// Each call on the same plugin from inside it deadlocked (a hostile tester's driver, modes 1-5); now health
// works and the others return FLOPMETER_E_REENTRANT.

void returns_within_10s(const char* what, std::function<void()> body) {
  flopmeter::testing::returns_within(std::chrono::seconds(10), what, std::move(body));
}

enum class reentry { health, on_log, destroy, flush, on_microbatch };

// What the callback does on its first record: one call of `kind` on the plugin that is emitting.
struct reentry_probe {
  c_abi* abi = nullptr;
  flopmeter_plugin* plugin = nullptr;
  reentry kind = reentry::health;
  int records = 0;
  int code = 12345;  // the re-entrant call's return code
  flopmeter_health_counters seen{};
  int later_health_code = 12345;  // flopmeter_health's code in the callback of the later records
};

void call_back_into_the_plugin(void* user, int64_t /*step*/, const char* /*json*/) {
  auto& probe = *static_cast<reentry_probe*>(user);
  if (++probe.records != 1) {
    flopmeter_health_counters h = health_struct();
    probe.later_health_code = probe.abi->health(probe.plugin, &h);
    return;
  }
  switch (probe.kind) {
    case reentry::health:
      probe.seen = health_struct();
      probe.code = probe.abi->health(probe.plugin, &probe.seen);
      break;
    case reentry::on_log: {
      flopmeter_log l = log_at(102);
      probe.code = probe.abi->on_log(probe.plugin, &l);
      break;
    }
    case reentry::destroy: probe.code = probe.abi->destroy(probe.plugin); break;
    case reentry::flush: probe.code = probe.abi->flush(probe.plugin); break;
    case reentry::on_microbatch: {
      const std::vector<int64_t> five = {5};
      const flopmeter_microbatch m = microbatch(five, {});
      probe.code = probe.abi->on_microbatch(probe.plugin, &m);
      break;
    }
  }
}

// Two intervals of one 100-token micro-batch each, with one rejected micro-batch in the first: on_log(2)
// emits step 1's record, so the callback (and its re-entrant call) runs inside on_log(2).
void two_intervals(c_abi& abi, flopmeter_plugin* plugin) {
  const std::vector<int64_t> hundred = {100}, negative = {-1};
  const flopmeter_microbatch good = microbatch(hundred, {}), bad = microbatch(negative, {});
  EXPECT_EQ(abi.on_microbatch(plugin, &bad), FLOPMETER_E_REJECTED);
  EXPECT_EQ(abi.on_microbatch(plugin, &good), FLOPMETER_OK);
  flopmeter_log first = log_at(1);
  EXPECT_EQ(abi.on_log(plugin, &first), FLOPMETER_OK);
  EXPECT_EQ(abi.on_microbatch(plugin, &good), FLOPMETER_OK);
  flopmeter_log second = log_at(2);
  EXPECT_EQ(abi.on_log(plugin, &second), FLOPMETER_OK);  // the outer call: OK whatever the callback did
}

TEST_F(c_api_plugin, health_from_inside_the_metrics_callback_works) {
  reentry_probe probe{&abi, plugin, reentry::health};
  ASSERT_EQ(abi.set_metrics_callback(plugin, call_back_into_the_plugin, &probe), FLOPMETER_OK);
  returns_within_10s("flopmeter_health inside the callback", [&] { two_intervals(abi, plugin); });
  ASSERT_EQ(probe.records, 1);
  EXPECT_EQ(probe.code, FLOPMETER_OK);
  // Inside on_log(2), after step 1's interval was derived and before log 2's collective starts: one
  // collective (log 1's), the one rejected micro-batch, nothing refused.
  EXPECT_EQ(probe.seen.collectives_started, 1u);
  EXPECT_EQ(probe.seen.bad_microbatches, 1u);
  EXPECT_EQ(probe.seen.reentrant_calls, 0u);
  flopmeter_health_counters after = health_struct();
  EXPECT_EQ(abi.health(plugin, &after), FLOPMETER_OK);
  EXPECT_EQ(after.collectives_started, 2u);  // log 2's started once the callback returned
  EXPECT_EQ(abi.destroy(plugin), FLOPMETER_OK);
}

TEST_F(c_api_plugin, on_log_from_inside_the_metrics_callback_is_refused) {
  reentry_probe probe{&abi, plugin, reentry::on_log};
  ASSERT_EQ(abi.set_metrics_callback(plugin, call_back_into_the_plugin, &probe), FLOPMETER_OK);
  returns_within_10s("flopmeter_on_log inside the callback", [&] { two_intervals(abi, plugin); });
  EXPECT_EQ(probe.code, FLOPMETER_E_REENTRANT);
  flopmeter_health_counters h = health_struct();
  EXPECT_EQ(abi.health(plugin, &h), FLOPMETER_OK);
  EXPECT_EQ(h.reentrant_calls, 1u);
  EXPECT_EQ(h.collectives_started, 2u);  // logs 1 and 2; the refused log 102 started none
  EXPECT_EQ(h.rejected_logs, 0u);        // refused for where it was called, not for what it said
  EXPECT_EQ(abi.flush(plugin), FLOPMETER_OK);
  EXPECT_EQ(probe.records, 2);  // steps 1 and 2: the refused log closed no interval
  EXPECT_EQ(abi.destroy(plugin), FLOPMETER_OK);
}

TEST_F(c_api_plugin, destroy_from_inside_the_metrics_callback_is_refused_and_the_handle_stays_live) {
  reentry_probe probe{&abi, plugin, reentry::destroy};
  ASSERT_EQ(abi.set_metrics_callback(plugin, call_back_into_the_plugin, &probe), FLOPMETER_OK);
  returns_within_10s("flopmeter_destroy inside the callback", [&] { two_intervals(abi, plugin); });
  EXPECT_EQ(probe.code, FLOPMETER_E_REENTRANT);
  flopmeter_health_counters h = health_struct();
  EXPECT_EQ(abi.health(plugin, &h), FLOPMETER_OK);  // still a live handle
  EXPECT_EQ(h.reentrant_calls, 1u);
  // The plugin was not flushed: events still count, and destroy after the call works once.
  const std::vector<int64_t> hundred = {100};
  const flopmeter_microbatch m = microbatch(hundred, {});
  EXPECT_EQ(abi.on_microbatch(plugin, &m), FLOPMETER_OK);
  EXPECT_EQ(abi.destroy(plugin), FLOPMETER_OK);  // emits step 2's record (the callback's second)
  EXPECT_EQ(probe.records, 2);
  EXPECT_EQ(probe.later_health_code, FLOPMETER_OK);  // the handle was live while destroy emitted its last record
  EXPECT_EQ(abi.destroy(plugin), FLOPMETER_E_INVALID_HANDLE);
}

TEST_F(c_api_plugin, flush_from_inside_the_metrics_callback_is_refused) {
  reentry_probe probe{&abi, plugin, reentry::flush};
  ASSERT_EQ(abi.set_metrics_callback(plugin, call_back_into_the_plugin, &probe), FLOPMETER_OK);
  returns_within_10s("flopmeter_flush inside the callback", [&] { two_intervals(abi, plugin); });
  EXPECT_EQ(probe.code, FLOPMETER_E_REENTRANT);
  // Not flushed: a micro-batch after it is still counted (FLOPMETER_E_AFTER_FLUSH otherwise).
  const std::vector<int64_t> hundred = {100};
  const flopmeter_microbatch m = microbatch(hundred, {});
  EXPECT_EQ(abi.on_microbatch(plugin, &m), FLOPMETER_OK);
  flopmeter_health_counters h = health_struct();
  EXPECT_EQ(abi.health(plugin, &h), FLOPMETER_OK);
  EXPECT_EQ(h.reentrant_calls, 1u);
  EXPECT_EQ(h.events_after_flush, 0u);
  EXPECT_EQ(abi.flush(plugin), FLOPMETER_OK);
  EXPECT_EQ(probe.records, 2);
  EXPECT_EQ(abi.destroy(plugin), FLOPMETER_OK);
}

TEST_F(c_api_plugin, on_microbatch_from_inside_the_metrics_callback_is_refused_and_not_counted) {
  reentry_probe probe{&abi, plugin, reentry::on_microbatch};
  captured out;
  ASSERT_EQ(abi.set_metrics_callback(plugin, call_back_into_the_plugin, &probe), FLOPMETER_OK);
  returns_within_10s("flopmeter_on_microbatch inside the callback", [&] { two_intervals(abi, plugin); });
  EXPECT_EQ(probe.code, FLOPMETER_E_REENTRANT);
  ASSERT_EQ(abi.set_metrics_callback(plugin, capture, &out), FLOPMETER_OK);
  EXPECT_EQ(abi.flush(plugin), FLOPMETER_OK);
  ASSERT_EQ(out.records.size(), 1u);
  // Step 2's interval holds its one 100-token micro-batch: tokens seen 100 + 100 = 200 (205 had the refused
  // 5-token batch been counted).
  EXPECT_DOUBLE_EQ(json_number(out.records[0].second, "train/tokens_seen"), 200.0);
  EXPECT_DOUBLE_EQ(json_number(out.records[0].second, "health/reentrant_calls"), 1.0);
  flopmeter_health_counters h = health_struct();
  EXPECT_EQ(abi.health(plugin, &h), FLOPMETER_OK);
  EXPECT_EQ(h.reentrant_calls, 1u);
  EXPECT_EQ(h.bad_microbatches, 1u);  // the one rejected in interval 1 only: a refused call is not a bad batch
  EXPECT_EQ(abi.destroy(plugin), FLOPMETER_OK);
}

// flopmeter_counts grew in 0.3 by window_pairs_0/1 at its end, versioned by struct_size. A caller built with
// the nine-count struct (struct_size = the offset of window_pairs_0) still counts and bills a model without
// windows, and the library writes nothing past its struct_size; the counts are named in the table's order.
TEST(c_api, counts_are_named_by_the_library_and_an_older_counts_struct_still_works) {
  void* library = dlopen(FLOPMETER_LIBRARY_PATH, RTLD_NOW | RTLD_LOCAL);
  ASSERT_NE(library, nullptr) << dlerror();
  const auto count_field = reinterpret_cast<decltype(&flopmeter_count_field)>(dlsym(library, "flopmeter_count_field"));
  const auto load = reinterpret_cast<decltype(&flopmeter_model_load)>(dlsym(library, "flopmeter_model_load"));
  const auto count = reinterpret_cast<decltype(&flopmeter_model_count)>(dlsym(library, "flopmeter_model_count"));
  const auto flops = reinterpret_cast<decltype(&flopmeter_model_flops)>(dlsym(library, "flopmeter_model_flops"));
  const auto window = reinterpret_cast<decltype(&flopmeter_model_window)>(dlsym(library, "flopmeter_model_window"));
  const auto destroy = reinterpret_cast<decltype(&flopmeter_model_destroy)>(dlsym(library, "flopmeter_model_destroy"));
  ASSERT_TRUE(count_field && load && count && flops && window && destroy);

  // The names: flopmeter_counts' fields in order (in_counts_struct 1), then the row's others, then NULL.
  const std::vector<std::string> struct_fields = {"real_tokens",
                                                  "padding_tokens",
                                                  "documents",
                                                  "causal_pairs",
                                                  "items",
                                                  "patches",
                                                  "merged_tokens",
                                                  "vision_pairs_per_frame",
                                                  "vision_pairs_whole",
                                                  "window_pairs_0",
                                                  "window_pairs_1",
                                                  "vision_window_pairs",
                                                  "vision_cls_tokens",
                                                  "image_block_pairs"};
  std::vector<std::string> named, others;
  int in_struct = -1;
  for (uint32_t i = 0; const char* name = count_field(i, &in_struct); ++i) {
    (in_struct == 1 ? named : others).push_back(name);
    EXPECT_TRUE(in_struct == 0 || others.empty()) << name << ": the struct's fields come first";
  }
  EXPECT_EQ(named, struct_fields);
  EXPECT_EQ(others, (std::vector<std::string>{"itemless_device_tokens", "itemless_causal_pairs",
                                              "itemless_window_pairs_0", "itemless_window_pairs_1"}));
  EXPECT_EQ(count_field(1000, nullptr), nullptr);

  char error[256] = {};
  flopmeter_model* model = load(FLOPMETER_SOURCE_DIR "/model_configs/tiny_vlm.toml", error, sizeof error);
  ASSERT_NE(model, nullptr) << error;
  int kind = -1;
  int64_t size = -1;
  EXPECT_EQ(window(model, 0, &kind, &size), FLOPMETER_E_REJECTED);  // tiny_vlm attends fully: no window
  EXPECT_EQ(window(model, 0, nullptr, &size), FLOPMETER_E_NULL_ARGUMENT);

  // Documents of 3 and 5 tokens, 2 padding tokens: 21 causal pairs (test_flop_model.py's batch).
  const int64_t lengths[] = {3, 5};
  flopmeter_microbatch mb{};
  mb.struct_size = sizeof mb;
  mb.document_lengths = lengths;
  mb.num_document_lengths = 2;
  mb.padding_tokens = 2;
  flopmeter_counts current{};
  current.struct_size = sizeof current;
  ASSERT_EQ(count(model, &mb, &current, error, sizeof error), FLOPMETER_OK) << error;
  EXPECT_EQ(current.causal_pairs, 21);
  EXPECT_EQ(current.window_pairs_0, 0);

  // The older struct: the library writes its nine counts and leaves the caller's memory after them alone.
  flopmeter_counts older{};
  older.struct_size = static_cast<uint32_t>(offsetof(flopmeter_counts, window_pairs_0));
  older.window_pairs_0 = older.window_pairs_1 = 77;  // stands for the caller's own memory past its struct
  ASSERT_EQ(count(model, &mb, &older, error, sizeof error), FLOPMETER_OK) << error;
  EXPECT_EQ(older.causal_pairs, 21);
  EXPECT_EQ(older.real_tokens, 8);
  EXPECT_EQ(older.window_pairs_0, 77);
  EXPECT_EQ(older.window_pairs_1, 77);
  // Billed alike: the same FLOPs from either struct (the older one's window fields are not read).
  flopmeter_flops from_current{}, from_older{};
  from_current.struct_size = from_older.struct_size = sizeof(flopmeter_flops);
  ASSERT_EQ(flops(model, &current, FLOPMETER_SCOPE_COMPLETE, &from_current), FLOPMETER_OK);
  ASSERT_EQ(flops(model, &older, FLOPMETER_SCOPE_COMPLETE, &from_older), FLOPMETER_OK);
  EXPECT_STREQ(from_older.exact_total, from_current.exact_total);
  EXPECT_GT(from_current.total, 0);
  // Below the first version: refused.
  flopmeter_counts too_small{};
  too_small.struct_size = static_cast<uint32_t>(offsetof(flopmeter_counts, vision_pairs_whole));
  EXPECT_EQ(count(model, &mb, &too_small, error, sizeof error), FLOPMETER_E_STRUCT_SIZE);
  EXPECT_EQ(flops(model, &too_small, FLOPMETER_SCOPE_COMPLETE, &from_older), FLOPMETER_E_STRUCT_SIZE);
  EXPECT_EQ(destroy(model), FLOPMETER_OK);
  dlclose(library);
}

}  // namespace

// ---- flopmeter_model_with_options: the training regime of a model alone -------------------------------------

namespace {

const c_abi& model_abi() {
  static const c_abi abi;
  return abi;
}

struct model_handle {
  flopmeter_model* model = nullptr;
  ~model_handle() { model_abi().model_destroy(model); }
};

// The exact FLOPs of one micro-batch (document lengths and image grids) as a decimal string.
std::string exact_flops(const flopmeter_model* model, const std::vector<int64_t>& lengths,
                        const std::vector<flopmeter_grid>& grids) {
  flopmeter_microbatch mb{};
  mb.struct_size = sizeof mb;
  mb.document_lengths = lengths.data();
  mb.num_document_lengths = lengths.size();
  mb.grids = grids.data();
  mb.num_grids = grids.size();
  flopmeter_counts counts{};
  counts.struct_size = sizeof counts;
  char error[256] = "";
  EXPECT_EQ(model_abi().model_count(model, &mb, &counts, error, sizeof error), FLOPMETER_OK) << error;
  flopmeter_flops flops{};
  flops.struct_size = sizeof flops;
  EXPECT_EQ(model_abi().model_flops(model, &counts, FLOPMETER_SCOPE_COMPLETE, &flops), FLOPMETER_OK);
  return flops.exact_total;
}

}  // namespace

TEST(c_api_model, a_frozen_vision_tower_bills_less_for_images_and_the_same_for_text) {
  char error[512] = "";
  model_handle full{model_abi().model_load(FLOPMETER_SOURCE_DIR "/model_configs/tiny_vlm.toml", error, sizeof error)};
  ASSERT_NE(full.model, nullptr) << error;
  flopmeter_model_options options{};
  options.struct_size = sizeof options;
  options.vision_frozen = 1;
  model_handle frozen{model_abi().model_with_options(full.model, &options, error, sizeof error)};
  ASSERT_NE(frozen.model, nullptr) << error;
  // Text only: a frozen ViT changes nothing (no vision GEMM runs).
  EXPECT_EQ(exact_flops(frozen.model, {100, 28}, {}), exact_flops(full.model, {100, 28}, {}));
  // With an image the ViT's weight gradients are gone: fewer FLOPs (and its input gradients, nothing upstream
  // of the ViT training).
  const std::vector<flopmeter_grid> image = {{1, 8, 8}};
  EXPECT_LT(std::stod(exact_flops(frozen.model, {100, 28}, image)),
            std::stod(exact_flops(full.model, {100, 28}, image)));
  std::vector<char> json(1 << 16);
  ASSERT_GT(model_abi().model_coefficients_json(frozen.model, json.data(), json.size()), 0);
  EXPECT_NE(std::string(json.data()).find("\"frozen\": [\"vision\"]"), std::string::npos) << json.data();
}

// flopmeter_model_check_json: one report of `flopmeter check --json` (tools/cli_check.cpp prints the same
// function's output), sized and written like the other *_json calls; a seq_len the check cannot take is refused
// with the check's own reason.
TEST(c_api_model, the_check_of_a_model_is_one_report_of_the_tools_json) {
  const c_abi& abi = model_abi();
  ASSERT_NE(abi.model_check_json, nullptr);
  char error[512] = "";
  model_handle tiny{abi.model_load(FLOPMETER_SOURCE_DIR "/model_configs/tiny_vlm.toml", error, sizeof error)};
  ASSERT_NE(tiny.model, nullptr) << error;
  const int64_t needed = abi.model_check_json(tiny.model, 100, nullptr, 0, error, sizeof error);
  ASSERT_GT(needed, 0) << error;
  std::vector<char> text(static_cast<std::size_t>(needed) + 1);
  EXPECT_EQ(abi.model_check_json(tiny.model, 100, text.data(), text.size(), nullptr, 0), needed);
  const std::string json(text.data());
  EXPECT_EQ(json.size(), static_cast<std::size_t>(needed));
  EXPECT_EQ(json.rfind("{\"model\": \"tiny_vlm\", \"seq_len\": 100, ", 0), 0u) << json;
  EXPECT_DOUBLE_EQ(flopmeter::testing::number_field(flopmeter::testing::parse_json(json, "check"), "seq_len"), 100.0);
  EXPECT_NE(json.find("\"pass\": true, \"rows\": ["), std::string::npos) << json;
  EXPECT_EQ(json.find("\"pass\": false"), std::string::npos) << json;
  // A buffer too small: the full length returned, the text cut and NUL-terminated.
  char small[8];
  EXPECT_EQ(abi.model_check_json(tiny.model, 100, small, sizeof small, nullptr, 0), needed);
  EXPECT_EQ(std::string(small), json.substr(0, 7));
  // One document of S = 2^32 tokens has more causal pairs than an int64 holds; S = 0 is no row length.
  EXPECT_EQ(abi.model_check_json(tiny.model, int64_t{1} << 32, nullptr, 0, error, sizeof error), FLOPMETER_E_REJECTED);
  EXPECT_EQ(std::string(error).rfind("seq_len 4294967296 is too large", 0), 0u) << error;
  EXPECT_EQ(abi.model_check_json(tiny.model, 0, nullptr, 0, error, sizeof error), FLOPMETER_E_REJECTED);
  EXPECT_STREQ(error, "seq_len must be >= 1 (got 0)");
  EXPECT_EQ(abi.model_check_json(nullptr, 100, nullptr, 0, error, sizeof error), FLOPMETER_E_NULL_ARGUMENT);
}

// train/flops_seen through the C ABI: the running total of the exact FLOPs flopmeter_model_flops gives for the
// same micro-batches (qwen3_vl_2b, documents of 1000 and 24 tokens and a 1 x 4 x 4 image, twice: 2 x F).
TEST(c_api_model, flops_seen_is_the_running_total_of_the_models_exact_flops) {
  const c_abi& abi = model_abi();
  char error[512] = "";
  model_handle model{abi.model_load(FLOPMETER_SOURCE_DIR "/model_configs/qwen3_vl_2b.toml", error, sizeof error)};
  ASSERT_NE(model.model, nullptr) << error;
  const std::vector<int64_t> docs = {1000, 24};
  const std::vector<flopmeter_grid> grids = {{1, 4, 4}};
  const double f = std::stod(exact_flops(model.model, docs, grids));
  flopmeter_plugin* plugin = abi.create(write_config().c_str(), nullptr, error, sizeof error);
  ASSERT_NE(plugin, nullptr) << error;
  captured out;
  ASSERT_EQ(abi.set_metrics_callback(plugin, capture, &out), FLOPMETER_OK);
  const flopmeter_microbatch m = microbatch(docs, grids);
  for (int64_t step = 1; step <= 2; ++step) {
    ASSERT_EQ(abi.on_microbatch(plugin, &m), FLOPMETER_OK);
    const flopmeter_log l = log_at(step);
    ASSERT_EQ(abi.on_log(plugin, &l), FLOPMETER_OK);
  }
  ASSERT_EQ(abi.flush(plugin), FLOPMETER_OK);
  ASSERT_EQ(out.records.size(), 2u);
  EXPECT_EQ(json_number(out.records[0].second, "train/flops_seen"), f);
  EXPECT_EQ(json_number(out.records[1].second, "train/flops_seen"), 2 * f);
  EXPECT_EQ(abi.destroy(plugin), FLOPMETER_OK);
}

TEST(c_api_model, bad_options_are_refused_with_the_field) {
  char error[512] = "";
  model_handle full{model_abi().model_load(FLOPMETER_SOURCE_DIR "/model_configs/tiny_vlm.toml", error, sizeof error)};
  ASSERT_NE(full.model, nullptr) << error;
  flopmeter_model_options options{};
  options.struct_size = sizeof options;
  const char* targets[] = {"q_proj", "qkv_proj"};
  options.lora_rank = 8;
  options.lora_targets = targets;
  options.num_lora_targets = 2;
  EXPECT_EQ(model_abi().model_with_options(full.model, &options, error, sizeof error), nullptr);
  EXPECT_NE(std::string(error).find("lora_targets[1]"), std::string::npos) << error;
  options.lora_targets = nullptr;
  EXPECT_EQ(model_abi().model_with_options(full.model, &options, error, sizeof error), nullptr);
  EXPECT_NE(std::string(error).find("NULL"), std::string::npos) << error;
  options.struct_size = 4;
  EXPECT_EQ(model_abi().model_with_options(full.model, &options, error, sizeof error), nullptr);
  EXPECT_NE(std::string(error).find("struct_size"), std::string::npos) << error;
  flopmeter_model_options everything{};
  everything.struct_size = sizeof everything;
  everything.vision_frozen = everything.merger_frozen = everything.text_frozen = 1;
  EXPECT_EQ(model_abi().model_with_options(full.model, &everything, error, sizeof error), nullptr);
  EXPECT_NE(std::string(error).find("nothing trains"), std::string::npos) << error;
}

// ---- flopmeter_set_log_callback: the library's messages to the trainer's logging ------------------------------

namespace {

struct logged {
  std::vector<std::pair<int, std::string>> messages;
};

void keep_message(void* user, int level, const char* message) {
  static_cast<logged*>(user)->messages.emplace_back(level, message);
}

}  // namespace

// A refused micro-batch is warned about (rate-limited: once, then held back): with a callback at WARN the
// warning reaches it, at its level, without the logger's prefix; nothing below WARN does.
TEST_F(c_api_plugin, warnings_reach_the_log_callback_and_stderr_again_once_it_is_cleared) {
  logged out;
  ASSERT_EQ(abi.set_log_callback(keep_message, &out, FLOPMETER_LOG_LEVEL_WARN), FLOPMETER_OK);
  EXPECT_EQ(abi.set_log_callback(keep_message, &out, 6), FLOPMETER_E_REJECTED);
  flopmeter_microbatch m = microbatch({}, {});
  m.num_cu_seqlens = 3;  // NULL with a count: refused with a warning
  EXPECT_EQ(abi.on_microbatch(plugin, &m), FLOPMETER_E_REJECTED);
  EXPECT_EQ(abi.on_microbatch(plugin, &m), FLOPMETER_E_REJECTED);  // held back by the rate limit
  ASSERT_EQ(abi.set_log_callback(nullptr, nullptr, FLOPMETER_LOG_LEVEL_WARN), FLOPMETER_OK);
  ASSERT_EQ(out.messages.size(), 1u);
  EXPECT_EQ(out.messages[0].first, FLOPMETER_LOG_LEVEL_WARN);
  EXPECT_NE(out.messages[0].second.find("refused"), std::string::npos) << out.messages[0].second;
  EXPECT_EQ(out.messages[0].second.find("[warning]"), std::string::npos) << out.messages[0].second;
  EXPECT_EQ(abi.on_microbatch(plugin, &m), FLOPMETER_E_REJECTED);
  EXPECT_EQ(out.messages.size(), 1u);  // cleared: nothing more reaches it
}
