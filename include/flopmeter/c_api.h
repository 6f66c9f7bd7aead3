/* flopmeter/c_api.h — the C ABI for trainers that dlopen flopmeter as a plugin.
 *
 * Versioned and stable: every struct starts with `struct_size` (set it to sizeof(the struct) as your header
 * declares it) so later versions can add fields at the end; the library reads (or, for
 * flopmeter_health_counters, writes) only the fields that lie within struct_size. A struct_size below the
 * struct's first version is refused with FLOPMETER_E_STRUCT_SIZE. `flopmeter_abi_version()` returns
 * FLOPMETER_C_ABI_VERSION of the library you loaded: check it before use (version 2 named the return codes,
 * made health a struct and made destroy return a code; see "Changes" at the end).
 *
 * Life cycle: flopmeter_create (from a plugin TOML path, see plugin_configs/SCHEMA.md) -> on_microbatch /
 * on_log events -> flopmeter_flush -> flopmeter_destroy.
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
 *  - Configuration errors make create return NULL and write a message (with file:line:col) into the
 *    caller's buffer.
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

/* Where a rank's interval counts sit in the per-rank table (world_size rows of row_doubles doubles; this
 * rank's row starts at rank * row_doubles). A layer that accumulates a micro-batch's counts where they were
 * computed (a CUDA device) adds them into its own row inside start_allreduce_sum, before the reduction,
 * as the C++ tensor path does: the counts then travel in the table and are never read back on the
 * micro-batch path (such a layer needs the table at every log: [logging] topk_interval_logs = 1). Such micro-batches are reported to on_microbatch without documents (so that they
 * count as run) and their counts, samples, loss and rejections are added here. Every value is a double,
 * exact below 2^53. Offsets are indices into the row. */
typedef struct flopmeter_row_layout {
  uint32_t struct_size;
  uint32_t row_doubles; /* doubles per rank in this library version */
  uint32_t counts;      /* the counts of flopmeter_counts, in its field order, from here */
  uint32_t loss_sum;
  uint32_t label_tokens;
  uint32_t device_rejected;   /* micro-batches rejected where they were counted: health's bad_microbatches */
  uint32_t tokens_seen;       /* this rank's running total of real tokens, this interval included */
  uint32_t samples_seen;      /* this rank's running total of samples, this interval included */
  uint32_t label_tokens_seen; /* this rank's running total of label tokens: train/assistant_tokens_seen */
  uint32_t num_counts;        /* how many counts start at `counts`: those of flopmeter_counts, then the
                             * device tokens, causal pairs and window pairs of the micro-batches without images
                             * (which a regime with a frozen decoder bills with other coefficients); named by
                             * flopmeter_count_field */
  uint32_t megatron_flops;    /* what the Megatron constant bills for the interval's micro-batches: for each
                             * micro-batch of S device tokens and P patches, text_linear * S +
                             * text_attention_slope * S^2 + vision_linear * P + vision_attention_slope * S * P,
                             * with the four factors below, in that order of operations */
  double megatron_text_linear;
  double megatron_text_attention_slope;
  double megatron_vision_linear;
  double megatron_vision_attention_slope;
  /* Added in 0.3 (a caller's struct_size without it still works; then it is not written). The first of the
   * three doubles of this rank's running total of exact model FLOPs since it started, every interval included
   * (train/flops_seen: 32-bit limbs, least significant first, each a whole number in [0, 2^32); -1 in all three
   * once the total reached 2^96). A layer that adds device counts must also add their FLOPs to this total: its
   * own running total of sum(count x flopmeter_row_flops_weight) over every interval it counted, added to the
   * three limbs and carried so that each stays in [0, 2^32) (a carry out of the third: -1 in all three), all
   * in integers, as the Python package's _device.py does on the device. A layer that cannot writes -2 into
   * the first limb instead, which leaves train/flops_seen out of the record with a warning. */
  uint32_t flops_seen;
} flopmeter_row_layout;

/* FLOPMETER_OK, FLOPMETER_E_NULL_ARGUMENT, FLOPMETER_E_STRUCT_SIZE or FLOPMETER_E_INVALID_HANDLE. */
FLOPMETER_EXPORT int flopmeter_get_row_layout(const flopmeter_plugin* plugin, flopmeter_row_layout* out);

/* Added in 0.3. The model FLOPs one unit of count `index` (flopmeter_count_field's order, below
 * flopmeter_row_layout.num_counts) adds to train/flops_seen in the plugin's training regime and scope, written
 * into out[0..size) as a signed decimal integer with a NUL (at most FLOPMETER_FLOPS_WEIGHT_CHARS bytes).
 * FLOPs are linear in the counts: those of an interval are the sum of count x weight over its counts. A count
 * of the micro-batches without images (itemless_*) is billed within its total by one coefficient set and here
 * by the difference to the other, so its weight may be negative; every weight is below 2^66 in magnitude.
 * FLOPMETER_OK; FLOPMETER_E_REJECTED past the last count or for size < FLOPMETER_FLOPS_WEIGHT_CHARS;
 * FLOPMETER_E_NULL_ARGUMENT; FLOPMETER_E_INVALID_HANDLE. */
#define FLOPMETER_FLOPS_WEIGHT_CHARS 48
FLOPMETER_EXPORT int flopmeter_row_flops_weight(const flopmeter_plugin* plugin, uint32_t index, char* out, size_t size);

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

/* The FLOP model alone, without a plugin: load it, count a micro-batch, form its FLOPs, and the reports of
 * `flopmeter coefficients --json` and `flopmeter estimate --json`. A flopmeter_model handle is a name looked up
 * on every call like a plugin handle; its model is immutable, so any thread may use it at any time. */
typedef struct flopmeter_model flopmeter_model;

/* The exact counts of a micro-batch (flop_model.h, batch_counts), in the order of flopmeter_count_field. */
typedef struct flopmeter_counts {
  uint32_t struct_size;
  int64_t real_tokens;
  int64_t padding_tokens;
  int64_t documents;
  int64_t causal_pairs;           /* sum over documents of L(L+1)/2 */
  int64_t items;                  /* images + videos */
  int64_t patches;                /* sum of t*h*w */
  int64_t merged_tokens;          /* sum of t*h*w / spatial_merge_size^2 */
  int64_t vision_pairs_per_frame; /* sum of t*(h*w)^2 */
  int64_t vision_pairs_whole;     /* sum of (t*h*w)^2 */
  /* Added in 0.3 after the nine above; read and written only when struct_size covers them. The (query, key)
   * pairs under the model's first and second attention window (METRICS.md): 0 for a model without them. A
   * struct without them counts and bills a model without windows as before; a model with windows refuses it
   * in flopmeter_model_flops and flopmeter_model_estimate_json (FLOPMETER_E_STRUCT_SIZE), since its window
   * attention would be missing. */
  int64_t window_pairs_0;
  int64_t window_pairs_1;
  /* Added in 0.3 after the window pairs, read and written only when struct_size covers them (METRICS.md): the
   * pairs of Qwen2.5-VL's window blocks (per segment, the sum over its windows of (patches in the window)^2),
   * InternViT's CLS tokens (one per segment) and the pairs Gemma 3's bidirectional image blocks add in the
   * decoder (n(n-1)/2 per image of n tokens). A struct without them is refused (FLOPMETER_E_STRUCT_SIZE) for a
   * model whose vision tower has these features. */
  int64_t vision_window_pairs;
  int64_t vision_cls_tokens;
  int64_t image_block_pairs;
} flopmeter_counts;

/* The name of count `index` ("real_tokens", ...), in the order of the library's one count table: the fields of
 * this library's flopmeter_counts first, then the row's other counts (flopmeter_row_layout.num_counts in all);
 * NULL past the last. *in_counts_struct (when not NULL) is set to 1 for a field of flopmeter_counts, else 0.
 * The returned string is static. For bindings that mirror the counts without a hand-kept list. */
FLOPMETER_EXPORT const char* flopmeter_count_field(uint32_t index, int* in_counts_struct);

/* The model's attention window `index` (window_pairs_<index> counts its pairs): FLOPMETER_OK with *kind set to
 * FLOPMETER_WINDOW_SLIDING or FLOPMETER_WINDOW_CHUNKED and *size (>= 1); FLOPMETER_E_REJECTED past the model's
 * last window (a model without windows has none); FLOPMETER_E_NULL_ARGUMENT, FLOPMETER_E_INVALID_HANDLE. For a
 * layer that counts on a device and needs the windows the library counts with. */
#define FLOPMETER_WINDOW_SLIDING 0
#define FLOPMETER_WINDOW_CHUNKED 1
FLOPMETER_EXPORT int flopmeter_model_window(const flopmeter_model* model, uint32_t index, int* kind, int64_t* size);

/* What is counted: the scope of plugin_configs/SCHEMA.md. */
#define FLOPMETER_SCOPE_COMPLETE 0
#define FLOPMETER_SCOPE_SEED 1

/* A micro-batch's training FLOPs by term (doubles, each exact below 2^53) and their exact total as a decimal
 * integer, NUL-terminated (a total of int64 products needs at most 40 digits). */
typedef struct flopmeter_flops {
  uint32_t struct_size;
  double total;
  double text_dense;
  double text_attention;
  double vision_dense;
  double vision_attention;
  double patch_embed;
  double merger;
  double mtp;
  char exact_total[48];
} flopmeter_flops;

/* A model TOML file, a Hugging Face config.json, or a checkpoint directory holding one. NULL on error, with
 * the message (file:line:col) in error[0..error_size) as for flopmeter_create. */
FLOPMETER_EXPORT flopmeter_model* flopmeter_model_load(const char* path, char* error, size_t error_size);
/* A config.json given as text (length bytes), named `source_name` in messages. */
FLOPMETER_EXPORT flopmeter_model* flopmeter_model_parse_json(const char* text, size_t length, const char* source_name,
                                                             char* error, size_t error_size);
/* The model of a live plugin in the plugin's training regime (a copy: it stays valid after the plugin is
 * destroyed). NULL with a message. */
FLOPMETER_EXPORT flopmeter_model* flopmeter_plugin_model(const flopmeter_plugin* plugin, char* error,
                                                         size_t error_size);
/* What trains, for flopmeter_model_with_options: the [training] table of plugin_configs/SCHEMA.md. Zero it,
 * set struct_size = sizeof(flopmeter_model_options), then the fields; a zeroed struct is full training. Fields
 * added in later versions are read only when struct_size covers them. */
typedef struct flopmeter_model_options {
  uint32_t struct_size;
  int vision_frozen; /* nonzero: the ViT blocks, patch and position embeddings do not train */
  int merger_frozen; /* nonzero: the patch merger and the DeepStack mergers do not train */
  int text_frozen;   /* nonzero: the decoder, its norms, the LM head, MTP layers and embeddings do not train */
  int64_t lora_rank; /* LoRA adapters of this rank on lora_targets (the decoder's base weights then frozen); 0: none */
  const char* const* lora_targets; /* num_lora_targets projection names as PEFT names them: "q_proj", ... */
  size_t num_lora_targets;
  /* Activation recomputation (hardware FLOPs; the model FLOPs do not change), as the plugin's [training]
   * recompute keys: a policy name ("none", "full", "full_early_stop", "selective", "op"; NULL: "none"); the
   * first recompute_layers layers of each of recompute_pipeline_stages stages, or every recompute_every-th
   * layer (both 0: all layers); recompute_vision nonzero also checkpoints the ViT blocks. */
  const char* recompute_policy;
  int64_t recompute_layers;
  int64_t recompute_every;
  int64_t recompute_pipeline_stages; /* 0 is read as 1 */
  int recompute_vision;
} flopmeter_model_options;

/* The model of `model` trained as `options` says: a new handle (destroy both). NULL with the message, naming
 * the field, when the regime does not fit the model (nothing trains, an unknown or repeated LoRA target, ...).
 * Its flopmeter_model_flops bills a micro-batch without images or videos (counts.items == 0) with the
 * coefficients of such a batch, which differ when the decoder is frozen and the vision side trains. */
FLOPMETER_EXPORT flopmeter_model* flopmeter_model_with_options(const flopmeter_model* model,
                                                               const flopmeter_model_options* options, char* error,
                                                               size_t error_size);
/* NULL: FLOPMETER_OK. A dead handle: FLOPMETER_E_INVALID_HANDLE. */
FLOPMETER_EXPORT int flopmeter_model_destroy(flopmeter_model* model);

/* The counts of `microbatch` by the rules of flopmeter_on_microbatch (its samples and loss are not read).
 * FLOPMETER_E_REJECTED with the reason in error[0..error_size) for an invalid description. */
FLOPMETER_EXPORT int flopmeter_model_count(const flopmeter_model* model, const flopmeter_microbatch* microbatch,
                                           flopmeter_counts* out, char* error, size_t error_size);
/* The FLOPs of `counts` in `scope` (FLOPMETER_SCOPE_*); FLOPMETER_E_REJECTED for an unknown scope. */
FLOPMETER_EXPORT int flopmeter_model_flops(const flopmeter_model* model, const flopmeter_counts* counts, int scope,
                                           flopmeter_flops* out);
/* Deprecated in 0.3: the same reports as values, flopmeter_model_coefficients and flopmeter_model_estimate
 * (c_api_values.h).
 * The JSON of `flopmeter coefficients --json` for this model, or of `flopmeter estimate --json` for `counts`
 * (seq_len 0: the row length is the batch's device tokens). Both write at most size - 1 bytes and a NUL and
 * return the JSON's full length (call again with a larger buffer when it is >= size), or a negative
 * FLOPMETER_E_* code. */
FLOPMETER_EXPORT int64_t flopmeter_model_coefficients_json(const flopmeter_model* model, char* out, size_t size);
FLOPMETER_EXPORT int64_t flopmeter_model_estimate_json(const flopmeter_model* model, const flopmeter_counts* counts,
                                                       int scope, int64_t seq_len, char* out, size_t size);
/* The term-by-term check of the model's full-training FLOP model against the Megatron per-token constant at row
 * length seq_len: one object of the array `flopmeter check --json` prints (its "pass", and a row per term).
 * Written and returned as flopmeter_model_coefficients_json; FLOPMETER_E_REJECTED with the reason in
 * error[0..error_size) for a seq_len the check cannot take (< 1, or too large for a 64-bit pair count).
 * Added in 0.3. */
FLOPMETER_EXPORT int64_t flopmeter_model_check_json(const flopmeter_model* model, int64_t seq_len, char* out,
                                                    size_t size, char* error, size_t error_size);

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
 * flopmeter_get_row_layout, and the FLOP model alone (flopmeter_model_*: load, parse_json, count, flops, the
 * coefficients and estimate reports; flopmeter_plugin_model).
 * Also in 0.3 (within struct_size): flopmeter_health_counters gained config_mismatch_intervals;
 * flopmeter_log gained peak_reserved_memory_bytes with FLOPMETER_LOG_PEAK_RESERVED_MEMORY. A FLOPMETER_LOG_*
 * bit set with the value 0 is now reported as 0 (before, a 0 on every rank read as not reported).
 * Also in 0.3: flopmeter_counts gained window_pairs_0 and window_pairs_1 (within struct_size),
 * flopmeter_count_field names the counts, flopmeter_model_window gives the windows; the row's counts grew by
 * the window pairs (num_counts says how many).
 * Also in 0.3: flopmeter_set_log_callback (the library's messages to the trainer's logging instead of stderr).
 * Also in 0.3: flopmeter_row_flops_weight (the FLOPs per unit of each count, for a layer that adds the FLOPs
 * of its device counts to the row's flops_seen limbs).
 * Also in 0.3: flopmeter_model_with_options and flopmeter_model_options (the training regime of a model alone);
 * flopmeter_plugin_model's model is in the plugin's regime (before, full training whatever [training] said). */

#ifdef __cplusplus
}
#endif

#include "flopmeter/c_api_values.h"      /* records, coefficients and estimates as values */
#include "flopmeter/c_api_collectives.h" /* the collectives asked of flopmeter_comm, their schedules */

#endif /* FLOPMETER_C_API_H_ */
