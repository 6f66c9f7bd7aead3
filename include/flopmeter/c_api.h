/* flopmeter/c_api.h — the C ABI for trainers that dlopen flopmeter as a plugin.
 *
 * Versioned and stable: every struct starts with `struct_size` (set it to sizeof(the struct) as your header
 * declares it) so later versions can add fields at the end; `flopmeter_abi_version()` returns
 * FLOPMETER_C_ABI_VERSION of the library you loaded — check it before use.
 *
 * Life cycle: flopmeter_create (from a plugin TOML path, see plugin_configs/SCHEMA.md) -> on_microbatch /
 * on_log events -> flopmeter_flush -> flopmeter_destroy. Configuration errors make create return NULL and
 * write a message (with file:line:col) into the caller's buffer. After a successful create nothing is ever
 * thrown or aborted into the caller: event functions return 0 on success and a negative code when the
 * event was rejected (counted, logged rate-limited); the training loop can ignore the return value.
 *
 * Ownership: the plugin owns its state; pointers inside event structs are read during the call only.
 * Thread-safety: one plugin may be called from several threads (calls are serialized internally).
 */
#ifndef FLOPMETER_C_API_H_
#define FLOPMETER_C_API_H_

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define FLOPMETER_C_ABI_VERSION 1u

typedef struct flopmeter_plugin flopmeter_plugin;

typedef struct flopmeter_grid {
  int64_t t, h, w; /* patches: temporal x height x width (Qwen's grid_thw) */
} flopmeter_grid;

/* One micro-batch: give exactly one of document_lengths, cu_seqlens, positions (count 0 = absent). */
typedef struct flopmeter_microbatch {
  uint32_t struct_size;
  const int64_t* document_lengths;
  size_t num_document_lengths;
  const int64_t* cu_seqlens;
  size_t num_cu_seqlens;
  const int64_t* positions;
  size_t num_positions;
  int64_t padding_tokens;
  const flopmeter_grid* grids;
  size_t num_grids;
  int64_t samples;
  int has_loss;         /* nonzero: loss_sum and label_tokens are set */
  double loss_sum;
  int64_t label_tokens;
} flopmeter_microbatch;

/* Which optional fields of flopmeter_log are set. */
#define FLOPMETER_LOG_LEARNING_RATE 0x1u
#define FLOPMETER_LOG_GRAD_NORM 0x2u
#define FLOPMETER_LOG_DATA_TIME 0x4u
#define FLOPMETER_LOG_FORWARD_BACKWARD_TIME 0x8u
#define FLOPMETER_LOG_PEAK_MEMORY 0x10u

typedef struct flopmeter_log {
  uint32_t struct_size;
  uint32_t set_fields; /* FLOPMETER_LOG_* bits */
  int64_t step;
  double learning_rate;
  double grad_norm;
  double data_time_seconds;
  double forward_backward_time_seconds;
  int64_t peak_memory_bytes;
} flopmeter_log;

/* The one collective flopmeter needs, provided by the trainer: an in-place SUM all-reduce of doubles.
 * start returns a non-NULL handle (NULL = could not start); wait returns 0 done, 1 still pending after
 * timeout_ms, -1 failed; release frees the handle (called exactly once per handle, also if unfinished). */
typedef struct flopmeter_comm {
  uint32_t struct_size;
  int rank;
  int world_size;
  void* user;
  void* (*start_allreduce_sum)(void* user, double* values, size_t count);
  int (*wait)(void* user, void* handle, int64_t timeout_ms);
  void (*release)(void* user, void* handle);
} flopmeter_comm;

/* Called with each emitted record as one JSON object (the JSONL line, no newline). */
typedef void (*flopmeter_metrics_callback)(void* user, int64_t step, const char* json);

uint32_t flopmeter_abi_version(void);

/* comm NULL: a single process (rank 0 of 1). Returns NULL on error with the message in error[0..error_size). */
flopmeter_plugin* flopmeter_create(const char* config_path, const flopmeter_comm* comm, char* error,
                                   size_t error_size);

/* Builds flopmeter's own Gloo group from RANK, WORLD_SIZE, MASTER_ADDR and MASTER_PORT + port_offset
 * (a separate TCPStore on that port, served by rank 0). Only in builds with LibTorch; otherwise NULL with
 * a message.
 * Rendezvous bound: on every rank this returns (a plugin, or NULL with a message) within the rendezvous
 * timeout + 0.5 s, even when rank 0, which serves the store, or another peer dies or hangs during the rendezvous;
 * the abandoned attempt is left to a helper thread that frees it when Gloo gives up. The timeout is the
 * plugin config's [logging] rendezvous_timeout_ms (default 60000), or flopmeter_gloo_options below; it is
 * also Gloo's timeout for each later collective.
 * SIGPIPE: Gloo writes to its peers with writev(), so a write to a peer that died raises SIGPIPE, whose
 * default action kills the trainer. Ignore it (signal(SIGPIPE, SIG_IGN), as Python does) before creating the
 * plugin; a dead peer then costs failed collectives (counted in health), not the run. flopmeter does not
 * change signal dispositions itself. */
flopmeter_plugin* flopmeter_create_gloo_from_env(const char* config_path, int port_offset, char* error,
                                                 size_t error_size);

/* Options of flopmeter_create_gloo_from_env_with (versioned by struct_size like every struct here). */
typedef struct flopmeter_gloo_options {
  uint32_t struct_size;
  int port_offset;                /* > 0: flopmeter's TCPStore listens on MASTER_PORT + port_offset (rank 0) */
  int64_t rendezvous_timeout_ms;  /* > 0: the rendezvous bound (and Gloo's collective timeout), overriding the
                                     plugin config; 0: the plugin config's rendezvous_timeout_ms */
} flopmeter_gloo_options;

/* flopmeter_create_gloo_from_env with options; NULL options or a too small struct_size: NULL with a message. */
flopmeter_plugin* flopmeter_create_gloo_from_env_with(const char* config_path, const flopmeter_gloo_options* options,
                                                      char* error, size_t error_size);

int flopmeter_set_metrics_callback(flopmeter_plugin* plugin, flopmeter_metrics_callback callback, void* user);
int flopmeter_on_microbatch(flopmeter_plugin* plugin, const flopmeter_microbatch* microbatch);
int flopmeter_on_log(flopmeter_plugin* plugin, const flopmeter_log* log);
int flopmeter_flush(flopmeter_plugin* plugin);
void flopmeter_destroy(flopmeter_plugin* plugin);

/* Copies the plugin's health counters (bad micro-batches, failed collectives, skipped intervals, events after
 * flush, collectives started) into out[0..5). Returns 0, or -1 for a NULL plugin. */
int flopmeter_health(const flopmeter_plugin* plugin, uint64_t out[5]);

#ifdef __cplusplus
}
#endif

#endif /* FLOPMETER_C_API_H_ */
