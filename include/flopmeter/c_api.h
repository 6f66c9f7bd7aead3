/* flopmeter/c_api.h — the C ABI for trainers that dlopen flopmeter as a plugin.
 *
 * Versioned and stable: every struct starts with `struct_size` (set it to sizeof(the struct) as your header
 * declares it) so later versions can add fields at the end; the library reads (or, for
 * flopmeter_health_counters, writes) only the fields that lie within struct_size. A struct_size below the
 * struct's first version is refused with FLOPMETER_E_STRUCT_SIZE. `flopmeter_abi_version()` returns
 * FLOPMETER_C_ABI_VERSION of the library you loaded: check it before use (version 2 named the return codes,
 * made health a struct and made destroy return a code; see "Changes" at the end).
 *
 * Life cycle: flopmeter_create (from a plugin TOML path, see plugin_configs/SCHEMA.md; or
 * flopmeter_create_from_config from keys set in code, c_api_config.h) -> on_microbatch / on_log events ->
 * flopmeter_flush -> flopmeter_destroy.
 *  - Intervals: the first interval starts at flopmeter_create; each flopmeter_on_log(step k) ends one and
 *    starts the next. Its record reaches the metrics callback one log later (during on_log of step k+1, or
 *    during flush / destroy for the last one), with `step` = k: the collective runs while you train. To keep
 *    set-up time (loading the model, the first compilation) out of the first record, create the plugin just
 *    before the training loop, or call on_log once before the first micro-batch. That warm-up interval (it
 *    ends before any rank of the world has recorded a micro-batch) is never delivered: neither the metrics
 *    callback nor the sinks get a record for it, its on_log returns FLOPMETER_OK as usual and no health
 *    counter changes. The first record is then that of the first interval with micro-batches; later
 *    intervals without micro-batches are delivered as usual.
 *  - Every rank calls on_log at the same steps, with the same, increasing `step`: the ranks' rows are
 *    matched by it (METRICS.md, "When things go wrong", for what a skipped or extra on_log costs). A single
 *    wrong step costs at most 3 records on every rank; no record mixes two steps.
 *  - Every rank loads the same plugin file: ranks whose model, scope, [parallel] layout or tpi_multiplier
 *    differ get no record at all (health config_mismatch_intervals), and every emitting rank logs one warning
 *    naming the ranks and the settings. The peak and the sinks may differ.
 *  - flopmeter_log's data time, forward-backward time and peak memory: a field whose FLOPMETER_LOG_* bit is
 *    set is reported, 0 included (emitted as 0); one whose bit is clear on every rank is left out of the
 *    record; set on some ranks only, the record holds the maximum over those ranks.
 *  - Every rank of a tensor-, context- or pipeline-parallel group passes the WHOLE micro-batch its replica
 *    runs (all documents and images, not its shard): flopmeter divides the work between the group's ranks
 *    itself ([parallel] in the plugin config). A context-parallel rank passing its shard would be billed
 *    for short documents, and attention grows with the square of a document's length.
 *  - Configuration errors make create return NULL and write a message (with file:line:col; for a key set in
 *    code, its key path and value) into the caller's buffer.
 *  - flopmeter_destroy flushes first (emits the last interval, waiting at most the plugin's collective
 *    timeout, [logging] collective_timeout_ms; the handle is still live in that record's callback), then frees
 *    the plugin. destroy(NULL) is allowed and does nothing.
 *  - A handle is a name, not a pointer flopmeter dereferences: every call looks it up among the live
 *    plugins. After destroy the handle is dead for good (values are never reused): calling anything with it,
 *    destroying it a second time included, returns FLOPMETER_E_INVALID_HANDLE and touches nothing. A
 *    call that races destroy on another thread is either refused the same way or runs on the flushed plugin.
 *  - After a successful create nothing is ever thrown or aborted into the caller. Event functions return
 *    FLOPMETER_OK or a negative FLOPMETER_E_* code; every refused event is counted in the health counters
 *    and logged (at most one line a minute per kind, on stderr), so the training loop can ignore the codes.
 *
 * Ownership: the plugin owns its state; pointers inside event structs are read during the call only. create
 * copies the flopmeter_comm struct; its `user` pointer and callbacks must stay valid until flopmeter_destroy
 * has returned (and any call racing it on another thread has returned too): every handle start_allreduce_sum
 * returned has been released by then. The metrics callback's `user` must stay valid while it is set.
 * Thread-safety: one plugin may be called from several threads (calls are serialized internally: whether an
 * event counts, comes after flush or is re-entrant is decided under the plugin's lock, so the returned code
 * is exactly what was counted); different plugins are independent. The flopmeter_comm callbacks of one plugin
 * are called one at a time, on the thread of the on_log, flush or destroy that needs them.
 * Re-entry: the metrics callback, and the flopmeter_comm callbacks, run on the thread that called on_log,
 * flush or destroy, while the plugin holds its lock. From inside them, on the same plugin:
 *  - flopmeter_health works (FLOPMETER_OK; the record being delivered is already counted in it);
 *  - flopmeter_set_metrics_callback works (it takes effect from the next record);
 *  - flopmeter_on_microbatch, flopmeter_on_log, flopmeter_flush and flopmeter_destroy return
 *    FLOPMETER_E_REENTRANT and do nothing but count it (reentrant_calls) and log it (once a minute): they
 *    would otherwise deadlock, and destroy would free the plugin under the call that is running it. Make
 *    those calls after the outer call returns. Calls on a different plugin, and calls from other threads,
 *    are not affected, with one rule for two plugins: plugin A's callback may call plugin B, but B's
 *    callback must not call A at the same time from another thread (each would wait, forever, for the lock
 *    the other holds while its callback runs). Keep such calls one-way, or make them after the outer call
 *    returns.
 */
#ifndef FLOPMETER_C_API_H_
#define FLOPMETER_C_API_H_

#include <stddef.h>
#include <stdint.h>

#include "flopmeter/export.h" /* FLOPMETER_EXPORT: these functions are what libflopmeter.so exports */

#ifdef __cplusplus
extern "C" {
#endif

#define FLOPMETER_C_ABI_VERSION 2u

/* Return codes of every int-returning function (flopmeter_status_string describes each).
 *   FLOPMETER_OK                done
 *   FLOPMETER_E_NULL_ARGUMENT   the plugin handle or the event / output pointer is NULL
 *   FLOPMETER_E_STRUCT_SIZE     struct_size below the struct's first version: refused, counted
 *   FLOPMETER_E_REJECTED        an invalid micro-batch description (negative length, odd grid, a NULL array
 *                               with a non-zero count, ...): in no metric, counted in bad_microbatches
 *   FLOPMETER_E_INVALID_HANDLE  not a live plugin: destroyed already, or never returned by create
 *   FLOPMETER_E_AFTER_FLUSH     an event after flush: ignored, counted in events_after_flush
 *   FLOPMETER_E_REENTRANT       on_microbatch / on_log / flush / destroy called from inside the same plugin's
 *                               metrics or communicator callback (see "Re-entry" above): ignored, counted in
 *                               reentrant_calls */
#define FLOPMETER_OK 0
#define FLOPMETER_E_NULL_ARGUMENT (-1)
#define FLOPMETER_E_STRUCT_SIZE (-2)
#define FLOPMETER_E_REJECTED (-3)
#define FLOPMETER_E_INVALID_HANDLE (-4)
#define FLOPMETER_E_AFTER_FLUSH (-5)
#define FLOPMETER_E_REENTRANT (-6)

typedef struct flopmeter_plugin flopmeter_plugin;

typedef struct flopmeter_grid {
  int64_t t, h, w; /* patches: temporal x height x width (Qwen's grid_thw) */
} flopmeter_grid;

/* One micro-batch: give exactly one of document_lengths, cu_seqlens, positions, positions_int32 (count 0 =
 * absent; two of them is FLOPMETER_E_REJECTED). An array pointer may be NULL only with a count of 0; NULL with
 * a non-zero count is FLOPMETER_E_REJECTED. */
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
  int64_t samples;      /* training samples (sequences before packing) in the micro-batch: train/num_samples */
  int has_loss;         /* nonzero: loss_sum and label_tokens are set */
  double loss_sum;      /* the SUM of the per-token losses over the label tokens, not their mean */
  int64_t label_tokens; /* the tokens that carry a label: train/loss = sum(loss_sum) / sum(label_tokens) over
                         * the interval and the data-parallel group. A non-zero loss_sum over 0 label tokens is
                         * FLOPMETER_E_REJECTED (a sum over no tokens is 0) */
  /* Added later in version 2; read only when struct_size covers both (a struct from an older header gives no
   * int32 positions). */
  const int32_t* positions_int32; /* positions as int32, for a trainer that holds them so: the same rules and
                                   * counts as `positions`, entries compared in 64 bits (METRICS.md, section 1) */
  size_t num_positions_int32;
} flopmeter_microbatch;

/* Which optional fields of flopmeter_log are set. */
#define FLOPMETER_LOG_LEARNING_RATE 0x1u
#define FLOPMETER_LOG_GRAD_NORM 0x2u
#define FLOPMETER_LOG_DATA_TIME 0x4u
#define FLOPMETER_LOG_FORWARD_BACKWARD_TIME 0x8u
#define FLOPMETER_LOG_PEAK_MEMORY 0x10u
#define FLOPMETER_LOG_PEAK_RESERVED_MEMORY 0x20u /* 0.3: read only when struct_size covers the field */

typedef struct flopmeter_log {
  uint32_t struct_size;
  uint32_t set_fields; /* FLOPMETER_LOG_* bits */
  int64_t step;
  double learning_rate;
  double grad_norm;
  double data_time_seconds;
  double forward_backward_time_seconds;
  int64_t peak_memory_bytes;
  /* Added in 0.3; read only when struct_size covers it (and FLOPMETER_LOG_PEAK_RESERVED_MEMORY is set): the
   * allocator's reserved (cached) peak in the interval, perf/mem_reserved_gib (max over the world). */
  int64_t peak_reserved_memory_bytes;
} flopmeter_log;

#define FLOPMETER_MAX_WORLD_SIZE 1048576

/* The collectives flopmeter needs, provided by the trainer: an in-place SUM all-reduce of doubles, and
 * (optional, 0.3) an in-place MAX all-reduce. Each log runs a SUM and a MAX of a fixed size, whatever the job's
 * size, and every topk_interval_logs logs the per-rank table, a SUM of world_size rows. Without
 * start_allreduce_max (NULL, or a struct_size that ends before it) flopmeter runs the MAX as a SUM of
 * world_size copies of it (each rank's in its own slot): correct, but that log's bytes grow with the job.
 * start returns a non-NULL handle (NULL = could not start); wait returns 0 done, 1 still pending after
 * timeout_ms, -1 failed; release frees the handle (called exactly once per handle, also if unfinished). Both
 * starts return handles of the same kind: wait and release serve both.
 * rank and world_size must describe the group the all-reduce spans: world_size its size, every rank with its
 * own index. Each rank writes only its own row of `values` (the others are zero), so a world_size smaller
 * than the group (two ranks summing into one row) or larger (a row nobody fills) comes back as rows no rank
 * sent: flopmeter discards that interval as a failed collective, names world_size and rank in the warning and
 * backs off after 3 in a row, instead of reporting a rate that is off by the factor. */
struct flopmeter_collective; /* c_api_collectives.h */
typedef struct flopmeter_comm {
  uint32_t struct_size;
  int rank;       /* in [0, world_size) */
  int world_size; /* in [1, FLOPMETER_MAX_WORLD_SIZE]; larger is a create error (the per-log buffer is
                   * world_size rows of 34 doubles in this version: 272 MiB at the bound; use `count`) */
  void* user;
  void* (*start_allreduce_sum)(void* user, double* values, size_t count);
  int (*wait)(void* user, void* handle, int64_t timeout_ms);
  void (*release)(void* user, void* handle);
  /* Added in 0.3; read only when struct_size covers it; may be NULL (see above). */
  void* (*start_allreduce_max)(void* user, double* values, size_t count);
  /* Added in 0.3; read only when struct_size covers it; may be NULL. When set, every collective is one call
   * of it and the two starts above are not called; its handles follow other rules (c_api_collectives.h). */
  void* (*start)(void* user, const struct flopmeter_collective* request);
} flopmeter_comm;

/* Called with each emitted record as one JSON object (the JSONL line, no newline), on the thread that called
 * on_log, flush or destroy; `json` is valid during the call only. See "Re-entry" at the top for what it may
 * call on the same plugin. Deprecated in 0.3: flopmeter_set_record_callback (c_api_values.h) hands the values. */
typedef void (*flopmeter_metrics_callback)(void* user, int64_t step, const char* json);

FLOPMETER_EXPORT uint32_t flopmeter_abi_version(void);

/* comm NULL: a single process (rank 0 of 1). Returns NULL on error with the message in error[0..error_size):
 * NUL-terminated, UTF-8, control characters written as \u00XX (safe to print on a terminal), and cut at a
 * character boundary when the buffer is too small. */
FLOPMETER_EXPORT flopmeter_plugin* flopmeter_create(const char* config_path, const flopmeter_comm* comm, char* error,
                                                    size_t error_size);

/* Builds flopmeter's own Gloo group from RANK, WORLD_SIZE, MASTER_ADDR and MASTER_PORT + port_offset
 * (a separate TCPStore on that port, served by rank 0). port_offset must be >= 1 (0 is refused: that port
 * is the trainer's own store); MASTER_PORT + port_offset must be a free port on rank 0's host. Only in builds
 * with LibTorch; otherwise NULL with a message.
 * Rendezvous bound: on every rank this returns (a plugin, or NULL with a message) within the rendezvous
 * timeout + 0.5 s, even when rank 0, which serves the store, or another peer dies or hangs during the rendezvous;
 * the abandoned attempt is left to a helper thread that frees it when Gloo gives up. The timeout is the
 * plugin config's [logging] rendezvous_timeout_ms (default 60000), or flopmeter_gloo_options below; it is
 * also Gloo's timeout for each later collective.
 * SIGPIPE: Gloo writes to its peers with writev(), so a write to a peer that died raises SIGPIPE, whose
 * default action kills the trainer. Ignore it (signal(SIGPIPE, SIG_IGN), as Python does) before creating the
 * plugin; a dead peer then costs failed collectives (counted in health), not the run. flopmeter does not
 * change signal dispositions itself. */
FLOPMETER_EXPORT flopmeter_plugin* flopmeter_create_gloo_from_env(const char* config_path, int port_offset, char* error,
                                                                  size_t error_size);


/* Options of flopmeter_create_gloo_from_env_with (versioned by struct_size like every struct here). */
typedef struct flopmeter_gloo_options {
  uint32_t struct_size;
  int port_offset;                /* > 0: flopmeter's TCPStore listens on MASTER_PORT + port_offset (rank 0) */
  int64_t rendezvous_timeout_ms;  /* > 0: the rendezvous bound (and Gloo's collective timeout), overriding the
                                     plugin config; 0: the plugin config's rendezvous_timeout_ms */
} flopmeter_gloo_options;

/* flopmeter_create_gloo_from_env with options; NULL options or a too small struct_size: NULL with a message. */
FLOPMETER_EXPORT flopmeter_plugin* flopmeter_create_gloo_from_env_with(const char* config_path, const flopmeter_gloo_options* options,
                                                      char* error, size_t error_size);

/* Events. Each returns FLOPMETER_OK or a negative FLOPMETER_E_* code (see above); a refused event is counted
 * and logged, never fatal. on_microbatch returns FLOPMETER_E_REJECTED for a batch the plugin did not count.
 * on_log and on_microbatch after flush return FLOPMETER_E_AFTER_FLUSH. */
FLOPMETER_EXPORT int flopmeter_set_metrics_callback(flopmeter_plugin* plugin, flopmeter_metrics_callback callback,
                                                    void* user);
FLOPMETER_EXPORT int flopmeter_on_microbatch(flopmeter_plugin* plugin, const flopmeter_microbatch* microbatch);
/* flopmeter_on_microbatch with the reason of a refusal (leveldb's errptr, as a buffer): on any code but
 * FLOPMETER_OK, why[0..why_size) receives what is wrong, e.g. "cu_seqlens[0] must be 0 (got 3)" for
 * FLOPMETER_E_REJECTED (the text the plugin logs), the code's flopmeter_status_string for the others. The
 * text is UTF-8, NUL-terminated, control characters written as \u00XX, and cut at a character boundary to
 * fit why_size - 1 bytes. why NULL or why_size 0: nothing is written. On FLOPMETER_OK the buffer is left untouched and nothing is allocated: the
 * micro-batch path costs what flopmeter_on_microbatch costs. Added in 0.3. */
FLOPMETER_EXPORT int flopmeter_on_microbatch_ex(flopmeter_plugin* plugin, const flopmeter_microbatch* microbatch,
                                                char* why, size_t why_size);
FLOPMETER_EXPORT int flopmeter_on_log(flopmeter_plugin* plugin, const flopmeter_log* log);
FLOPMETER_EXPORT int flopmeter_flush(flopmeter_plugin* plugin);

/* Flushes (bounded by the collective timeout) and frees the plugin. NULL: FLOPMETER_OK, nothing done. A
 * handle destroyed already (or never created): FLOPMETER_E_INVALID_HANDLE, nothing done. From inside the
 * same plugin's callback: FLOPMETER_E_REENTRANT, nothing done (the handle stays live; destroy it later). */
FLOPMETER_EXPORT int flopmeter_destroy(flopmeter_plugin* plugin);

/* The plugin's health counters; all zero in a healthy run. Set struct_size = sizeof(flopmeter_health_counters)
 * before the call; the library fills the fields that lie within it. */
typedef struct flopmeter_health_counters {
  uint32_t struct_size;
  uint64_t bad_microbatches;    /* refused micro-batches: invalid descriptions, and those the C ABI refused
                                 * (a NULL array with a count, struct_size too small) */
  uint64_t failed_collectives;  /* intervals lost to a failed or timed-out collective, or ranks out of step */
  uint64_t skipped_intervals;   /* intervals not emitted (no positive time, failures, backing off, ...) */
  uint64_t events_after_flush;  /* events that arrived after flush */
  uint64_t collectives_started; /* one per on_log on the default path */
  uint64_t rejected_logs;       /* on_log events the C ABI refused (NULL, struct_size too small) */
  /* Added later in version 2; written only when struct_size covers them. */
  uint64_t out_of_step_intervals; /* of failed_collectives: intervals whose rows came from different logs */
  uint64_t dropped_records;       /* records a sink could not write (full disk, closed file, ...) */
  uint64_t reentrant_calls;       /* calls refused with FLOPMETER_E_REENTRANT (see "Re-entry" at the top) */
  /* Added in 0.3; written only when struct_size covers it. */
  uint64_t config_mismatch_intervals; /* of skipped_intervals: intervals not delivered because the ranks loaded
                                       * different settings (model, scope, [parallel], tpi_multiplier); one
                                       * warning on each emitting rank names the ranks and the settings */
} flopmeter_health_counters;

/* FLOPMETER_OK; FLOPMETER_E_NULL_ARGUMENT (plugin or out NULL), FLOPMETER_E_STRUCT_SIZE (out->struct_size
 * below this struct's first version; nothing written) or FLOPMETER_E_INVALID_HANDLE. */
FLOPMETER_EXPORT int flopmeter_health(const flopmeter_plugin* plugin, flopmeter_health_counters* out);

/* A static, NUL-terminated description of a return code ("FLOPMETER_E_REJECTED: ..."); never NULL. */
FLOPMETER_EXPORT const char* flopmeter_status_string(int code);

/* ---- Added later in version 2 (library 0.3): what a Python (or other) host layer needs beside the events ---- */

/* A plugin from plugin TOML text instead of a file: `toml_text` (length bytes; need not be NUL-terminated) is
 * read as a plugin file named `source_name` (used in every message: "source_name:line:col: key
 * 'parallel.tp': ..."), whose relative model.config resolves against `base_dir` (NULL or "" = the working
 * directory). Otherwise as flopmeter_create. */
FLOPMETER_EXPORT flopmeter_plugin* flopmeter_create_from_text(const char* toml_text, size_t length,
                                                              const char* source_name, const char* base_dir,
                                                              const flopmeter_comm* comm, char* error,
                                                              size_t error_size);

/* Where the library's messages go: warnings (rate-limited ones included), errors, and the console sink's
 * records (info). By default every message is written to stderr. With a callback set, each message at or above
 * `min_level` (FLOPMETER_LOG_LEVEL_*) is handed to callback(user, level, message) instead (message: UTF-8,
 * NUL-terminated, without the logger's prefix; valid during the call only); the others still go to stderr.
 * NULL restores stderr for all. Process-wide: it applies to every plugin, also those created before. It is
 * called on the thread that logs (a hook's caller, or the thread a collective completes on), must return, and
 * must not call flopmeter functions of the plugin that logs. Set it before creating plugins and clear it only
 * after destroying them when `user` is freed with it. FLOPMETER_OK, or FLOPMETER_E_REJECTED for a level outside
 * FLOPMETER_LOG_LEVEL_TRACE..FLOPMETER_LOG_LEVEL_CRITICAL. */
#define FLOPMETER_LOG_LEVEL_TRACE 0
#define FLOPMETER_LOG_LEVEL_DEBUG 1
#define FLOPMETER_LOG_LEVEL_INFO 2
#define FLOPMETER_LOG_LEVEL_WARN 3
#define FLOPMETER_LOG_LEVEL_ERROR 4
#define FLOPMETER_LOG_LEVEL_CRITICAL 5
typedef void (*flopmeter_log_callback)(void* user, int level, const char* message);
FLOPMETER_EXPORT int flopmeter_set_log_callback(flopmeter_log_callback callback, void* user, int min_level);

/* Changes.
 * Version 2: return codes named (the values of version 1 kept: -1, -2, -3); flopmeter_health fills a
 * flopmeter_health_counters struct instead of uint64_t out[5]; flopmeter_destroy returns an int and refuses a
 * second destroy; on_log / on_microbatch after flush return FLOPMETER_E_AFTER_FLUSH (was 0); a NULL array with
 * a non-zero count is refused (was read as empty); flopmeter_comm.world_size above 1,048,576 is a create
 * error; flopmeter_status_string added.
 * Later in version 2 (additions only; a caller built against an older header is unaffected):
 * flopmeter_health_counters gained out_of_step_intervals, dropped_records, then reentrant_calls (written only
 * when struct_size covers them); flopmeter_microbatch gained positions_int32 and num_positions_int32 (read
 * only when struct_size covers them); FLOPMETER_E_REENTRANT (-6) added: on_microbatch, on_log, flush and destroy
 * called from inside the same plugin's callback used to deadlock and are now refused with it, while health
 * called from there, which also deadlocked, now returns FLOPMETER_OK with the counters.
 * Later in version 2, library 0.3 (additions only: every earlier call, struct and code is unchanged; check for
 * the new functions with dlsym when the library may be older): flopmeter_create_from_text,
 * and the FLOP model alone (flopmeter_model_*: load, parse_json, count, flops, the
 * coefficients and estimate reports; flopmeter_plugin_model).
 * Also in 0.3 (within struct_size): flopmeter_health_counters gained config_mismatch_intervals;
 * flopmeter_log gained peak_reserved_memory_bytes with FLOPMETER_LOG_PEAK_RESERVED_MEMORY. A FLOPMETER_LOG_*
 * bit set with the value 0 is now reported as 0 (before, a 0 on every rank read as not reported).
 * Also in 0.3: flopmeter_counts gained window_pairs_0 and window_pairs_1 (within struct_size),
 * flopmeter_count_field names the counts, flopmeter_model_window gives the windows; the row's counts grew by
 * the window pairs (num_counts says how many).
 * Also in 0.3: flopmeter_set_log_callback (the library's messages to the trainer's logging instead of stderr).
 * Also in 0.3: flopmeter_model_with_options and flopmeter_model_options (the training regime of a model alone);
 * flopmeter_plugin_model's model is in the plugin's regime (before, full training whatever [training] said).
 * Also in 0.3: flopmeter_on_microbatch_ex (a refusal's reason); the typed configuration builder
 * (flopmeter_config_*, flopmeter_create_from_config: c_api_config.h); the FLOP model's declarations moved to
 * c_api_model.h, which this header includes (the ABI is unchanged). */

#ifdef __cplusplus
}
#endif

/* The rest of the C ABI, in headers of their own (each includes this one): */
#include "flopmeter/c_api_config.h"      /* the typed configuration builder: flopmeter_config_* */
#include "flopmeter/c_api_model.h"       /* the FLOP model alone: flopmeter_model_*, flopmeter_counts, ... */
#include "flopmeter/c_api_values.h"      /* records, coefficients and estimates as values */
#include "flopmeter/c_api_collectives.h" /* the collectives asked of flopmeter_comm, their schedules */

#endif /* FLOPMETER_C_API_H_ */
