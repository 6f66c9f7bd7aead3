/* The soak's cost check, the run itself (bench/soak_cost.py compiles it, runs it under valgrind's callgrind
 * and judges): a plugin made from plugin TOML text through the C ABI, over no communicator (one process),
 * with the JSONL and TensorBoard sinks on; LOGS logs of MICROBATCHES micro-batches each (four documents of
 * 4,096 tokens with two images, loss and label tokens), one refused micro-batch (a decreasing cu_seqlens) in
 * every 97 and one skipped flopmeter_on_log in every 1,000 (its micro-batches join the next interval).
 *
 * The windows are the first and the last tenth of the logs. callgrind's counters are zeroed as a window
 * starts and dumped as it ends (CALLGRIND_ZERO_STATS, CALLGRIND_DUMP_STATS_AT: client requests, no-ops when
 * not under valgrind), so each dump holds exactly that window's calls: the hooks and this loop around them.
 * The program links the library the Python package installs (no LibTorch: valgrind starts in seconds).
 *
 * Usage: soak_cost LOGS MICROBATCHES PLUGIN_TOML_FILE
 * Prints one JSON line: the calls made in each window, this process's resident memory, threads and open
 * descriptors at the end of the first window and at the end of the run (the memory half of the soak, from
 * a run outside valgrind), and the health counters at the end. */
#define _POSIX_C_SOURCE 200809L /* opendir, readdir */
#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <valgrind/callgrind.h>

#include "flopmeter/c_api.h"

static char* read_all(const char* path, size_t* length) {
  FILE* f = fopen(path, "rb");
  if (f == NULL) return NULL;
  static char text[1 << 16];
  *length = fread(text, 1, sizeof text, f);
  fclose(f);
  return text;
}

/* This process's resident memory in KiB and threads (/proc/self/status), and its open descriptors. */
typedef struct {
  long rss_kib, threads, fds;
} footprint;

static footprint measure(void) {
  footprint f = {-1, -1, 0};
  FILE* status = fopen("/proc/self/status", "r");
  char line[256];
  while (status != NULL && fgets(line, sizeof line, status) != NULL) {
    if (strncmp(line, "VmRSS:", 6) == 0) f.rss_kib = strtol(line + 6, NULL, 10);
    if (strncmp(line, "Threads:", 8) == 0) f.threads = strtol(line + 8, NULL, 10);
  }
  if (status != NULL) fclose(status);
  DIR* fds = opendir("/proc/self/fd");
  for (struct dirent* e; fds != NULL && (e = readdir(fds)) != NULL;) {
    if (e->d_name[0] != '.') ++f.fds;
  }
  if (fds != NULL) closedir(fds);
  f.fds -= 1; /* the directory stream itself */
  return f;
}

int main(int argc, char** argv) {
  if (argc != 4) {
    fprintf(stderr, "usage: soak_cost LOGS MICROBATCHES PLUGIN_TOML_FILE\n");
    return 2;
  }
  const long logs = strtol(argv[1], NULL, 10);
  const long per_log = strtol(argv[2], NULL, 10);
  size_t length = 0;
  const char* text = read_all(argv[3], &length);
  if (logs < 10 || per_log < 1 || text == NULL) {
    fprintf(stderr, "soak_cost: LOGS >= 10, MICROBATCHES >= 1 and a readable plugin file are needed\n");
    return 2;
  }
  char error[2048] = "";
  flopmeter_plugin* plugin = flopmeter_create_from_text(text, length, argv[3], NULL, NULL, error, sizeof error);
  if (plugin == NULL) {
    fprintf(stderr, "soak_cost: %s\n", error);
    return 1;
  }
  static const int64_t cu[] = {0, 4096, 8192, 12288, 16384};
  static const int64_t bad[] = {0, 100, 50};
  static const flopmeter_grid grids[] = {{1, 16, 16}, {2, 8, 12}};
  flopmeter_microbatch good;
  memset(&good, 0, sizeof good);
  good.struct_size = sizeof good;
  good.cu_seqlens = cu;
  good.num_cu_seqlens = 5;
  good.grids = grids;
  good.num_grids = 2;
  good.samples = 4;
  good.has_loss = 1;
  good.loss_sum = 30000.0;
  good.label_tokens = 12000;
  flopmeter_microbatch refused;
  memset(&refused, 0, sizeof refused);
  refused.struct_size = sizeof refused;
  refused.cu_seqlens = bad;
  refused.num_cu_seqlens = 3;
  const long window = logs / 10;
  long calls[2][2] = {{0, 0}, {0, 0}}; /* [first, last][on_microbatch, on_log] */
  long n = 0;
  footprint early = {0, 0, 0}, late = {0, 0, 0};
  for (long log = 0; log < logs; ++log) {
    const int in = log < window ? 0 : (log >= logs - window ? 1 : -1);
    if (log == 0 || log == logs - window) CALLGRIND_ZERO_STATS;
    for (long m = 0; m < per_log; ++m) {
      ++n;
      flopmeter_on_microbatch(plugin, n % 97 == 0 ? &refused : &good);
      if (in >= 0) ++calls[in][0];
    }
    if (log % 1000 != 500) {
      flopmeter_log e;
      memset(&e, 0, sizeof e);
      e.struct_size = sizeof e;
      e.set_fields = FLOPMETER_LOG_DATA_TIME | FLOPMETER_LOG_PEAK_MEMORY;
      e.step = log + 1;
      e.data_time_seconds = 0.001;
      e.peak_memory_bytes = (int64_t)40 << 30;
      flopmeter_on_log(plugin, &e);
      if (in >= 0) ++calls[in][1];
    }
    if (log == window - 1) {
      CALLGRIND_DUMP_STATS_AT("first");
      early = measure();
    }
    if (log == logs - 1) {
      CALLGRIND_DUMP_STATS_AT("last");
      late = measure();
    }
  }
  flopmeter_flush(plugin);
  flopmeter_health_counters health;
  memset(&health, 0, sizeof health);
  health.struct_size = sizeof health;
  flopmeter_health(plugin, &health);
  printf(
      "{\"logs\": %ld, \"microbatches_per_log\": %ld, \"window_logs\": %ld, "
      "\"calls\": {\"first\": {\"on_microbatch\": %ld, \"on_log\": %ld}, "
      "\"last\": {\"on_microbatch\": %ld, \"on_log\": %ld}}, "
      "\"rss_kib\": [%ld, %ld], \"threads\": [%ld, %ld], \"fds\": [%ld, %ld], "
      "\"bad_microbatches\": %llu, \"dropped_records\": %llu}\n",
      logs, per_log, window, calls[0][0], calls[0][1], calls[1][0], calls[1][1], early.rss_kib, late.rss_kib,
      early.threads, late.threads, early.fds, late.fds, (unsigned long long)health.bad_microbatches,
      (unsigned long long)health.dropped_records);
  flopmeter_destroy(plugin);
  return 0;
}
