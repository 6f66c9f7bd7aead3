// Loads the built libflopmeter.so with dlopen, the way a trainer loads a plugin, and drives it only through
// the C ABI: version check, create from a TOML path, events, metrics callback, errors, two ranks over a
// trainer-provided all-reduce.
#include <dlfcn.h>
#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include "flopmeter/c_api.h"

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
  }
  ~c_abi() {
    if (library != nullptr) dlclose(library);
  }
  template <class F>
  void resolve(F& f, const char* name) {
    f = reinterpret_cast<F>(dlsym(library, name));
  }
};

fs::path temp_dir() {
  const fs::path dir = fs::temp_directory_path() / ("flopmeter_c_api_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  return dir;
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

// The number after "\"name\":" in a JSON line.
double json_number(const std::string& json, const std::string& name) {
  const std::string key = "\"" + name + "\":";
  const std::size_t at = json.find(key);
  if (at == std::string::npos) return -1;
  return std::stod(json.substr(at + key.size()));
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

flopmeter_log log_at(int64_t step) {
  flopmeter_log l{};
  l.struct_size = sizeof(l);
  l.step = step;
  l.set_fields = FLOPMETER_LOG_LEARNING_RATE;
  l.learning_rate = 3e-4;
  return l;
}

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
  flopmeter_log l = log_at(1);
  EXPECT_EQ(abi.on_log(plugin, &l), 0);
  EXPECT_TRUE(out.records.empty());  // deferred to the next log or flush
  EXPECT_EQ(abi.flush(plugin), 0);
  ASSERT_EQ(out.records.size(), 1u);
  EXPECT_EQ(out.records[0].first, 1);
  const std::string& json = out.records[0].second;
  EXPECT_NE(json.find("\"perf/tokens_per_second\":"), std::string::npos) << json;
  EXPECT_NE(json.find("\"perf/mfu\":"), std::string::npos) << json;
  EXPECT_DOUBLE_EQ(json_number(json, "train/tokens_seen"), 1024.0);
  EXPECT_DOUBLE_EQ(json_number(json, "train/lr"), 3e-4);
  uint64_t health[5] = {};
  EXPECT_EQ(abi.health(plugin, health), 0);
  EXPECT_EQ(health[4], 1u);  // one collective started
  abi.destroy(plugin);
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

TEST(c_api, rejected_events_return_codes_and_never_abort) {
  c_abi abi;
  ASSERT_NE(abi.library, nullptr) << dlerror();
  char error[512] = {};
  flopmeter_plugin* plugin = abi.create(write_config().c_str(), nullptr, error, sizeof(error));
  ASSERT_NE(plugin, nullptr) << error;
  EXPECT_EQ(abi.on_microbatch(nullptr, nullptr), -1);
  EXPECT_EQ(abi.on_log(plugin, nullptr), -1);
  const std::vector<int64_t> negative = {5, -1};
  flopmeter_microbatch m = microbatch(negative, {});
  EXPECT_EQ(abi.on_microbatch(plugin, &m), -3);  // counted as a bad micro-batch
  m.struct_size = 4;                              // a caller with a broken struct
  EXPECT_EQ(abi.on_microbatch(plugin, &m), -2);
  const std::vector<flopmeter_grid> odd = {{1, 3, 4}};  // h not a multiple of the merge size
  flopmeter_microbatch with_odd = microbatch({}, odd);
  EXPECT_EQ(abi.on_microbatch(plugin, &with_odd), -3);
  uint64_t health[5] = {};
  abi.health(plugin, health);
  EXPECT_EQ(health[0], 2u);
  abi.destroy(plugin);
  abi.destroy(nullptr);
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

}  // namespace
