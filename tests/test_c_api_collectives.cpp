// flopmeter_comm.start (flopmeter/c_api_collectives.h): every collective the library needs is one call, an
// ordinary log's SUM and MAX as one request, the per-rank table as an all-gather; a wait that finishes a
// handle releases it. Two ranks in one thread over an in-process transport, through the shared library.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include "flopmeter/c_api.h"

namespace {

namespace fs = std::filesystem;

// The transport: collective i completes once both ranks started it; its result is computed then.
struct job {
  flopmeter_collective request[2] = {};
  bool started[2] = {false, false};
};
struct group {
  std::map<int, job> jobs;
  int next[2] = {0, 0};
  int sum_max_requests = 0;
  int allgather_requests = 0;
  int legacy_starts = 0;  // start_allreduce_sum / _max: must not be called when start is set
  int releases = 0;
  int waits = 0;
};
struct rank_user {
  group* g;
  int rank;
};
struct handle {
  int index;
  int rank;
};

void finish(job& j, int world) {
  const flopmeter_collective& a = j.request[0];
  if (a.kind == FLOPMETER_COLLECTIVE_SUM_MAX) {
    for (std::size_t i = 0; i < a.count; ++i) {
      const double x = j.request[0].values[i], y = j.request[1].values[i];
      const double r = i < a.sum_count ? x + y : std::max(x, y);
      j.request[0].values[i] = j.request[1].values[i] = r;
    }
  } else {  // each rank's send into every table, in its slot
    for (int q = 0; q < world; ++q) {
      for (int r = 0; r < world; ++r) {
        std::copy(j.request[q].send, j.request[q].send + a.count, j.request[r].values + q * a.count);
      }
    }
  }
}

void* start(void* user, const flopmeter_collective* request) {
  auto* u = static_cast<rank_user*>(user);
  EXPECT_EQ(request->struct_size, sizeof(flopmeter_collective));
  const int index = u->g->next[u->rank]++;
  job& j = u->g->jobs[index];
  j.request[u->rank] = *request;
  j.started[u->rank] = true;
  if (u->rank == 0) {
    (request->kind == FLOPMETER_COLLECTIVE_SUM_MAX ? u->g->sum_max_requests : u->g->allgather_requests) += 1;
  }
  if (request->kind == FLOPMETER_COLLECTIVE_ALLGATHER) {
    // Zeros but this rank's slot, which holds send (c_api_collectives.h).
    for (std::size_t i = 0; i < 2 * request->count; ++i) {
      const bool own = i / request->count == static_cast<std::size_t>(u->rank);
      EXPECT_EQ(request->values[i], own ? request->send[i % request->count] : 0.0) << i;
    }
  }
  if (j.started[0] && j.started[1]) finish(j, 2);
  return new handle{index, u->rank};
}

int wait(void* user, void* h, int64_t) {
  auto* u = static_cast<rank_user*>(user);
  ++u->g->waits;
  auto* hd = static_cast<handle*>(h);
  const job& j = u->g->jobs[hd->index];
  if (!(j.started[0] && j.started[1])) return 1;
  delete hd;  // a finished handle is released by this answer
  return 0;
}

void release(void* user, void* h) {
  ++static_cast<rank_user*>(user)->g->releases;
  delete static_cast<handle*>(h);
}

void* legacy_start(void* user, double*, size_t) {
  ++static_cast<rank_user*>(user)->g->legacy_starts;
  return nullptr;
}

struct captured {
  std::vector<std::int64_t> steps;
  std::vector<std::map<std::string, double>> records;
};

void on_record(void* user, const flopmeter_record* r) {
  auto* out = static_cast<captured*>(user);
  out->steps.push_back(r->step);
  std::map<std::string, double> values;
  for (std::size_t i = 0; i < r->num_values; ++i) values[r->name_table[r->names[i]]] = r->values[i];
  out->records.push_back(values);
}

TEST(c_api_collectives, one_start_per_collective_and_a_finishing_wait_releases_the_handle) {
  const fs::path config = fs::temp_directory_path() / ("flopmeter_collectives_" + std::to_string(::getpid()) + ".toml");
  // The table at every second log: logs 1 and 3 reduce (SUM and MAX), logs 2 and 4 gather (or the reverse).
  std::ofstream(config) << "[model]\nconfig = \"" FLOPMETER_SOURCE_DIR "/model_configs/qwen3_vl_2b.toml\"\n"
                        << "[peak]\ntflops_per_gpu = 100.0\n[logging]\nemit = \"all\"\ntopk_interval_logs = 2\n"
                        << "[sinks]\nconsole = false\n";
  group g;
  rank_user users[2] = {{&g, 0}, {&g, 1}};
  flopmeter_plugin* plugins[2] = {};
  captured out[2];
  for (int r = 0; r < 2; ++r) {
    flopmeter_comm comm{};
    comm.struct_size = sizeof(comm);
    comm.rank = r;
    comm.world_size = 2;
    comm.user = &users[r];
    comm.start_allreduce_sum = legacy_start;
    comm.start_allreduce_max = legacy_start;
    comm.wait = wait;
    comm.release = release;
    comm.start = start;
    char error[512] = {};
    plugins[r] = flopmeter_create(config.c_str(), &comm, error, sizeof(error));
    ASSERT_NE(plugins[r], nullptr) << error;
    ASSERT_EQ(flopmeter_set_record_callback(plugins[r], on_record, &out[r]), FLOPMETER_OK);
  }
  // Rank 0 runs 300 real tokens per log, rank 1 500: the job saw 800 per log.
  const std::vector<int64_t> docs[2] = {{300}, {200, 300}};
  for (std::int64_t step = 1; step <= 4; ++step) {
    for (int r = 0; r < 2; ++r) {
      flopmeter_microbatch m{};
      m.struct_size = sizeof(m);
      m.document_lengths = docs[r].data();
      m.num_document_lengths = docs[r].size();
      m.samples = 1;
      ASSERT_EQ(flopmeter_on_microbatch(plugins[r], &m), FLOPMETER_OK);
    }
    for (auto* p : plugins) {
      flopmeter_log l{};
      l.struct_size = sizeof(l);
      l.step = step;
      ASSERT_EQ(flopmeter_on_log(p, &l), FLOPMETER_OK);
    }
  }
  for (auto* p : plugins) EXPECT_EQ(flopmeter_flush(p), FLOPMETER_OK);
  for (auto* p : plugins) EXPECT_EQ(flopmeter_destroy(p), FLOPMETER_OK);
  fs::remove(config);

  EXPECT_EQ(g.legacy_starts, 0);
  EXPECT_EQ(g.sum_max_requests + g.allgather_requests, 4);  // one request per log
  EXPECT_EQ(g.sum_max_requests, 2);
  EXPECT_EQ(g.allgather_requests, 2);
  EXPECT_EQ(g.waits, 8);     // each rank's four collectives, each finished at its first wait
  EXPECT_EQ(g.releases, 0);  // every handle was finished, and so released, by a wait
  for (int r = 0; r < 2; ++r) {
    ASSERT_EQ(out[r].steps, (std::vector<std::int64_t>{1, 2, 3, 4})) << "rank " << r;
    for (std::size_t k = 0; k < 4; ++k) {
      // Running totals: 800 tokens and 2 samples per log.
      EXPECT_EQ(out[r].records[k].at("train/tokens_seen"), 800.0 * static_cast<double>(k + 1)) << k;
      EXPECT_EQ(out[r].records[k].at("train/num_samples"), 2.0 * static_cast<double>(k + 1)) << k;
    }
  }
}

}  // namespace
