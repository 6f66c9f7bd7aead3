/* A C program that links libflopmeter through pkg-config (tests/packaging/run_consumer.cmake,
 * packaging_pkg_config_consumer): `cc -std=c99 c_consumer.c $(pkg-config --cflags --libs flopmeter)`. It
 * proves that c_api.h is C, that the C ABI is exported, and that the installed plugin_configs/example.toml
 * loads with its model path relative to the installed tree.
 *   c_consumer PLUGIN.toml
 * Exits 0 when: the ABI version matches the header, create succeeds, one micro-batch of 1000 + 24 tokens
 * is counted, a micro-batch with a NULL array and a count is refused, and destroy flushes. */
#include <stdio.h>
#include <string.h>

#include "flopmeter/c_api.h"

static int records = 0;

static void on_record(void* user, int64_t step, const char* json) {
  (void)user;
  if (step == 1 && strstr(json, "\"train/tokens_seen\":1024") != NULL) ++records;
  printf("record: %s\n", json);
}

int main(int argc, char** argv) {
  char error[1024] = {0};
  flopmeter_plugin* plugin;
  flopmeter_microbatch batch;
  flopmeter_log log;
  flopmeter_health_counters health;
  const int64_t lengths[2] = {1000, 24};
  int code;
  if (argc != 2) {
    fprintf(stderr, "usage: %s PLUGIN.toml\n", argv[0]);
    return 2;
  }
  if (flopmeter_abi_version() != FLOPMETER_C_ABI_VERSION) {
    fprintf(stderr, "ABI version %u, header %u\n", flopmeter_abi_version(), FLOPMETER_C_ABI_VERSION);
    return 1;
  }
  plugin = flopmeter_create(argv[1], NULL, error, sizeof error);
  if (plugin == NULL) {
    fprintf(stderr, "flopmeter_create: %s\n", error);
    return 1;
  }
  flopmeter_set_metrics_callback(plugin, on_record, NULL);
  memset(&batch, 0, sizeof batch);
  batch.struct_size = sizeof batch;
  batch.document_lengths = lengths;
  batch.num_document_lengths = 2;
  batch.samples = 1;
  code = flopmeter_on_microbatch(plugin, &batch);
  if (code != FLOPMETER_OK) {
    fprintf(stderr, "on_microbatch: %s\n", flopmeter_status_string(code));
    return 1;
  }
  batch.document_lengths = NULL; /* a NULL array with a count of 2 */
  code = flopmeter_on_microbatch(plugin, &batch);
  if (code != FLOPMETER_E_REJECTED) {
    fprintf(stderr, "a NULL array with a count: %s\n", flopmeter_status_string(code));
    return 1;
  }
  memset(&log, 0, sizeof log);
  log.struct_size = sizeof log;
  log.step = 1;
  flopmeter_on_log(plugin, &log);
  memset(&health, 0, sizeof health);
  health.struct_size = sizeof health;
  if (flopmeter_health(plugin, &health) != FLOPMETER_OK || health.bad_microbatches != 1) {
    fprintf(stderr, "health: bad_microbatches %llu, expected 1\n", (unsigned long long)health.bad_microbatches);
    return 1;
  }
  if (flopmeter_destroy(plugin) != FLOPMETER_OK || records != 1) {
    fprintf(stderr, "destroy did not emit the step-1 record of 1024 tokens (%d records)\n", records);
    return 1;
  }
  printf("c_consumer: OK\n");
  return 0;
}
