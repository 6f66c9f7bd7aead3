/* flopmeter/c_api_model.h — the FLOP model alone in the C ABI: a model loaded without a plugin, the counts of
 * a micro-batch, their FLOPs, and the reports of the command-line tool. Part of flopmeter/c_api.h, which
 * includes it (include either; the versioning, struct_size and return-code rules of c_api.h apply here).
 * Ownership: a flopmeter_model is released with flopmeter_model_destroy; pointers passed in are read during the
 * call only. Thread-safety: a model is immutable, so any thread may use any model at any time.
 */
#ifndef FLOPMETER_C_API_MODEL_H_
#define FLOPMETER_C_API_MODEL_H_

#include "flopmeter/c_api.h"

#ifdef __cplusplus
extern "C" {
#endif

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
 * this library's flopmeter_counts first, then the counts of the micro-batches without images (itemless_*);
 * NULL past the last. *in_counts_struct (when not NULL) is set to 1 for a field of flopmeter_counts, else 0.
 * The returned string is static. For bindings that mirror the counts without a hand-kept list. */
FLOPMETER_EXPORT const char* flopmeter_count_field(uint32_t index, int* in_counts_struct);

/* The model's attention window `index` (window_pairs_<index> counts its pairs): FLOPMETER_OK with *kind set to
 * FLOPMETER_WINDOW_SLIDING or FLOPMETER_WINDOW_CHUNKED and *size (>= 1); FLOPMETER_E_REJECTED past the model's
 * last window (a model without windows has none); FLOPMETER_E_NULL_ARGUMENT, FLOPMETER_E_INVALID_HANDLE. */
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
 * FLOPMETER_E_REJECTED for an invalid description; for every code but FLOPMETER_OK the reason is in
 * error[0..error_size), written as flopmeter_on_microbatch_ex writes `why` (NULL or size 0: nothing). */
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

#ifdef __cplusplus
}
#endif

#endif /* FLOPMETER_C_API_MODEL_H_ */
