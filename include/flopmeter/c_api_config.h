/* flopmeter/c_api_config.h — a plugin configuration built in code, by typed setters, for the C ABI. Part of
 * flopmeter/c_api.h, which includes it (include either; the return codes and error-buffer rules of c_api.h
 * apply here).
 *
 * A flopmeter_config holds the keys of plugin_configs/SCHEMA.md ("parallel.tp", "logging.topk", ...) as typed
 * values: an integer, a number, a boolean, a string or a list of strings. It starts empty
 * (flopmeter_config_new) or as a plugin TOML file's keys (flopmeter_config_load_file); each setter then adds
 * or replaces one key. flopmeter_create_from_config checks the whole configuration by the rules that read a
 * plugin file (the same code), and reports a problem by key path and value: a key set in code as
 *   key 'parallel.tp': must be > 0 (got 0)
 * and a key the file set as "FILE:LINE:COL: key 'parallel.tp': ...", never a line of text the caller did not
 * write. A setter refuses at once what is wrong whatever the other keys say: a key path that is not in the
 * schema ("key 'parallel.tpx': unknown key ... (did you mean 'parallel.tp'?)"), a NULL argument, a non-finite
 * number; everything else (bounds, names, the model file, what the keys say together) is checked at create.
 * A relative model.config set in code is resolved against the working directory at the time of the call;
 * one written in a loaded file against the file's directory.
 *
 * Ownership: the caller owns a flopmeter_config and frees it with flopmeter_config_destroy (after create too:
 * create copies what it needs). Strings passed in are copied. Thread-safety: a flopmeter_config is a plain
 * object, not a handle: calls on one configuration must not overlap (const calls may), different
 * configurations are independent.
 *
 * Every function returning int returns FLOPMETER_OK, FLOPMETER_E_NULL_ARGUMENT (cfg or a required pointer
 * NULL) or FLOPMETER_E_REJECTED, with the reason in error[0..error_size) as flopmeter_create writes it.
 * Added in 0.3.
 */
#ifndef FLOPMETER_C_API_CONFIG_H_
#define FLOPMETER_C_API_CONFIG_H_

#include "flopmeter/c_api.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct flopmeter_config flopmeter_config;

/* An empty configuration (no table set); NULL only when out of memory. */
FLOPMETER_EXPORT flopmeter_config* flopmeter_config_new(void);
/* Frees it. NULL: nothing done. */
FLOPMETER_EXPORT void flopmeter_config_destroy(flopmeter_config* cfg);

/* Replaces every key of `cfg` with those of the plugin TOML file at `path` (read and parsed now: a missing
 * file or a TOML syntax error is FLOPMETER_E_REJECTED with file:line:col; its keys are checked at create,
 * where their messages cite the file's lines). Setters called afterwards override single keys. */
FLOPMETER_EXPORT int flopmeter_config_load_file(flopmeter_config* cfg, const char* path, char* error,
                                                size_t error_size);

/* Sets key `key` ("table.key": "parallel.tp", "logging.small_allreduce", ...) to a typed value. */
FLOPMETER_EXPORT int flopmeter_config_set_int(flopmeter_config* cfg, const char* key, int64_t value, char* error,
                                              size_t error_size);
/* `value` must be finite. */
FLOPMETER_EXPORT int flopmeter_config_set_double(flopmeter_config* cfg, const char* key, double value, char* error,
                                                 size_t error_size);
/* Nonzero: true. */
FLOPMETER_EXPORT int flopmeter_config_set_bool(flopmeter_config* cfg, const char* key, int value, char* error,
                                               size_t error_size);
/* `value`: NUL-terminated UTF-8. */
FLOPMETER_EXPORT int flopmeter_config_set_string(flopmeter_config* cfg, const char* key, const char* value, char* error,
                                                 size_t error_size);
/* A list of `count` strings ("training.frozen", "training.lora_targets"); values may be NULL when count is 0. */
FLOPMETER_EXPORT int flopmeter_config_set_string_list(flopmeter_config* cfg, const char* key, const char* const* values,
                                                      size_t count, char* error, size_t error_size);

/* How the per-log collectives travel ([logging] small_allreduce), for a host layer that runs them and must
 * know before create: *out is set to FLOPMETER_SMALL_ALLREDUCE_* (AUTOMATIC when the key is not set).
 * FLOPMETER_E_REJECTED, with the reason, when the value is not one of the names (create reports the same). */
#define FLOPMETER_SMALL_ALLREDUCE_AUTOMATIC 0
#define FLOPMETER_SMALL_ALLREDUCE_BACKEND 1
#define FLOPMETER_SMALL_ALLREDUCE_LOG_DEPTH 2
FLOPMETER_EXPORT int flopmeter_config_small_allreduce(const flopmeter_config* cfg, int* out, char* error,
                                                      size_t error_size);

/* A plugin from `cfg`, as flopmeter_create from a file with the same keys (comm NULL: a single process). NULL
 * on error, with the message in error[0..error_size): the key path and the value it refuses. */
FLOPMETER_EXPORT flopmeter_plugin* flopmeter_create_from_config(const flopmeter_config* cfg, const flopmeter_comm* comm,
                                                                char* error, size_t error_size);

#ifdef __cplusplus
}
#endif

#endif /* FLOPMETER_C_API_CONFIG_H_ */
