/* flopmeter/c_api_values.h — records, coefficients and estimates as values (part of the C ABI; included by
 * flopmeter/c_api.h, whose rules apply: struct_size, return codes, handles, thread-safety, re-entry).
 *
 * Instead of JSON text to be parsed back, a record crosses as numbers with indices into a names table, and a
 * model's reports as typed values in the order of a key table fetched once per model. The JSONL sink still
 * writes JSON, and `flopmeter coefficients --json` / `estimate --json` print the same keys and values.
 * Added in 0.3.
 */
#ifndef FLOPMETER_C_API_VALUES_H_
#define FLOPMETER_C_API_VALUES_H_

#include <stddef.h>
#include <stdint.h>

#include "flopmeter/c_api.h" /* flopmeter_plugin, flopmeter_model, flopmeter_counts (c_api.h includes this file) */

#ifdef __cplusplus
extern "C" {
#endif

/* One emitted record, handed to the record callback (valid during the call only). Its values are in the
 * record's order (that of the JSONL line); the name of values[i] is name_table[names[i]]. The names table is
 * the plugin's: a name keeps its index for the plugin's life and new names are appended, so a caller decodes
 * each name once, when its index is first seen (name_table[num_names_seen_before .. num_names)). The strings
 * live as long as the plugin; the name_table array itself is valid during the call only. Values are doubles
 * as derived (METRICS.md): integral counts are exact below 2^53; a non-finite value is one the JSONL sink
 * writes as null. The library sets struct_size (sizeof(flopmeter_record) of its header): read a field only
 * when struct_size covers it. */
typedef struct flopmeter_record {
  uint32_t struct_size;
  int64_t step; /* the optimizer step the interval ended at */
  size_t num_values;
  const uint32_t* names; /* num_values indices into name_table */
  const double* values;  /* num_values */
  const char* const* name_table;
  size_t num_names;
} flopmeter_record;

/* Called with each emitted record, on the thread that called on_log, flush or destroy, under the same rules as
 * the metrics callback (c_api.h, "Re-entry"). Replaces flopmeter_metrics_callback's JSON text; both may be
 * set, each gets every record. */
typedef void (*flopmeter_record_callback)(void* user, const flopmeter_record* record);

/* NULL callback: none. FLOPMETER_OK, FLOPMETER_E_NULL_ARGUMENT (plugin NULL), FLOPMETER_E_INVALID_HANDLE. */
FLOPMETER_EXPORT int flopmeter_set_record_callback(flopmeter_plugin* plugin, flopmeter_record_callback callback,
                                                   void* user);

/* A model's reports: the keys and values of `flopmeter coefficients --json` (FLOPMETER_REPORT_COEFFICIENTS)
 * and of `flopmeter estimate --json` (FLOPMETER_REPORT_ESTIMATE), one entry per leaf of the JSON object, in
 * its order. A key is the leaf's path, components joined by '/', an array element's component being its index
 * ("windows/0/kind", "frozen/1"); an empty array is one FLOPMETER_VALUE_EMPTY_LIST entry at the array's path. */
#define FLOPMETER_REPORT_COEFFICIENTS 0
#define FLOPMETER_REPORT_ESTIMATE 1

#define FLOPMETER_VALUE_INTEGER 0    /* flopmeter_report_value.integer */
#define FLOPMETER_VALUE_NUMBER 1     /* .number; NaN where the JSON has null */
#define FLOPMETER_VALUE_BOOLEAN 2    /* .integer, 0 or 1 */
#define FLOPMETER_VALUE_TEXT 3       /* .text, UTF-8, NUL-terminated */
#define FLOPMETER_VALUE_EMPTY_LIST 4 /* no value: the key is an empty array */

typedef struct flopmeter_report_value {
  int64_t integer;
  double number;
  const char* text; /* lives as long as the model handle; NULL unless FLOPMETER_VALUE_TEXT */
} flopmeter_report_value;

/* The key of entry `index` of report `report` of `model`, with *kind (when not NULL) set to its
 * FLOPMETER_VALUE_*; NULL past the last entry, for an unknown report or a dead handle. A model's keys are the
 * same at every call (an estimate's do not depend on the counts, the scope or seq_len); the string lives as
 * long as the model handle. Fetch them once. */
FLOPMETER_EXPORT const char* flopmeter_model_report_key(const flopmeter_model* model, int report, uint32_t index,
                                                        int* kind);

/* The values of the coefficients report, in key order, into out[0..size): returns the number of entries
 * (call with size 0 to learn it; out may then be NULL), or a negative FLOPMETER_E_* code. */
FLOPMETER_EXPORT int64_t flopmeter_model_coefficients(const flopmeter_model* model, flopmeter_report_value* out,
                                                      size_t size);
/* The values of the estimate report of `counts` in `scope` (FLOPMETER_SCOPE_*) at row length seq_len (0: the
 * batch's device tokens), as flopmeter_model_coefficients; the rules and codes of flopmeter_model_flops. */
FLOPMETER_EXPORT int64_t flopmeter_model_estimate(const flopmeter_model* model, const flopmeter_counts* counts,
                                                  int scope, int64_t seq_len, flopmeter_report_value* out, size_t size);

#ifdef __cplusplus
}
#endif

#endif /* FLOPMETER_C_API_VALUES_H_ */
