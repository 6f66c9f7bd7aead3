// The C ABI's FLOP model (c_api.h, "the FLOP model alone") and what both C ABI files share (abi_common.h):
// model handles, the micro-batch struct read by its struct_size, error messages into the caller's buffer.
//
// Model handles are names, as plugin handles are (c_api.cpp): a number that is never reused, looked up among
// the live models on every call, so a destroyed or made-up handle is refused, never dereferenced. A model is
// immutable once registered, so calls on it need no lock beyond the lookup.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <iterator>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <utility>

#include "abi/abi_common.h"
#include "abi/model_registry.h"
#include "accounting/count_event.h"
#include "count/count_fields.h"
#include "flopmeter/c_api.h"
#include "flopmeter/error.h"
#include "flopmeter/flop_model.h"
#include "flopmeter/model_config.h"
#include "output/model_report.h"

namespace flopmeter::detail {

void write_abi_error(char* buffer, std::size_t size, const std::string& raw_message) noexcept {
  if (buffer == nullptr || size == 0) return;
  try {
    const std::string message = printable_text(raw_message, /*keep_newlines=*/true);
    std::size_t n = std::min(size - 1, message.size());
    while (n > 0 && n < message.size() && (static_cast<unsigned char>(message[n]) & 0xC0u) == 0x80u) --n;
    std::memcpy(buffer, message.data(), n);
    buffer[n] = '\0';
  } catch (...) {
    buffer[0] = '\0';  // out of memory while escaping: an empty message rather than a throw
  }
}

void write_abi_error(char* buffer, std::size_t size, const char* raw_message) noexcept {
  if (buffer == nullptr || size == 0) return;
  try {
    write_abi_error(buffer, size, std::string(raw_message != nullptr ? raw_message : ""));
  } catch (...) {
    buffer[0] = '\0';
  }
}

namespace {

// The smallest struct_size accepted: the end of the last field of the struct's first version.
constexpr std::size_t kMicrobatchV1Size = offsetof(flopmeter_microbatch, label_tokens) + sizeof(int64_t);
// The end of positions_int32 / num_positions_int32, added later in version 2.
constexpr std::size_t kMicrobatchPositionsInt32Size =
    offsetof(flopmeter_microbatch, num_positions_int32) + sizeof(size_t);

// An array of the event: NULL is absent only with a count of 0.
template <class T>
bool array_given(const T* data, std::size_t count) {
  return data != nullptr || count == 0;
}

// The scope of a FLOPMETER_SCOPE_* value, or false for any other.
bool scope_from(int value, flop_scope& scope) {
  if (value == FLOPMETER_SCOPE_COMPLETE) {
    scope = flop_scope::complete;
  } else if (value == FLOPMETER_SCOPE_SEED) {
    scope = flop_scope::seed;
  } else {
    return false;
  }
  return true;
}

// The counts, field by field: the C struct's and batch_counts' (one table for both directions).
constexpr std::pair<int64_t flopmeter_counts::*, std::int64_t batch_counts::*> kAbiCountFields[] = {
    {&flopmeter_counts::real_tokens, &batch_counts::real_tokens},
    {&flopmeter_counts::padding_tokens, &batch_counts::padding_tokens},
    {&flopmeter_counts::documents, &batch_counts::documents},
    {&flopmeter_counts::causal_pairs, &batch_counts::causal_pairs},
    {&flopmeter_counts::items, &batch_counts::items},
    {&flopmeter_counts::patches, &batch_counts::patches},
    {&flopmeter_counts::merged_tokens, &batch_counts::merged_tokens},
    {&flopmeter_counts::vision_pairs_per_frame, &batch_counts::vision_pairs_per_frame},
    {&flopmeter_counts::vision_pairs_whole, &batch_counts::vision_pairs_whole},
    {&flopmeter_counts::window_pairs_0, &batch_counts::window_pairs_0},
    {&flopmeter_counts::window_pairs_1, &batch_counts::window_pairs_1},
    {&flopmeter_counts::vision_window_pairs, &batch_counts::vision_window_pairs},
    {&flopmeter_counts::vision_cls_tokens, &batch_counts::vision_cls_tokens},
    {&flopmeter_counts::image_block_pairs, &batch_counts::image_block_pairs},
};
// flopmeter_counts' first version ends after vision_pairs_whole; the window pairs are read and written only when
// struct_size covers them.
constexpr std::size_t kCountsV1Size = offsetof(flopmeter_counts, window_pairs_0);

// flopmeter_counts holds the counts reports show, in the order of the one field table (count/count_fields.h).
constexpr bool in_table_order() {
  if (std::size(kAbiCountFields) != detail::kReportedCountFields) return false;
  for (std::size_t i = 0; i < std::size(kAbiCountFields); ++i) {
    if (kAbiCountFields[i].second != detail::kCountFields[i].member) return false;
  }
  return true;
}
static_assert(in_table_order(), "flopmeter_counts' fields are count/count_fields.h's reported counts, in order");

// Whether a struct of `struct_size` bytes holds `field` (a caller built against an older header has less).
bool covers(std::uint32_t struct_size, int64_t flopmeter_counts::*field) {
  const flopmeter_counts probe{};
  const auto offset =
      static_cast<std::size_t>(reinterpret_cast<const char*>(&(probe.*field)) - reinterpret_cast<const char*>(&probe));
  return offset + sizeof(int64_t) <= struct_size;
}

// The fields the caller's struct holds; the others stay 0.
batch_counts counts_from(const flopmeter_counts& c) {
  batch_counts n;
  for (const auto& [c_field, field] : kAbiCountFields) {
    if (covers(c.struct_size, c_field)) n.*field = c.*c_field;
  }
  return n;
}

void counts_to(const batch_counts& n, flopmeter_counts& c) {
  for (const auto& [c_field, field] : kAbiCountFields) {
    if (covers(c.struct_size, c_field)) c.*c_field = n.*field;
  }
}

// The struct_size check of a counts argument: at least the first version, the window pairs when the model has
// windows and the vision counts of 0.3 when its tower has windows, CLS tokens or image blocks (without them that
// work would be billed as nothing).
bool counts_size_ok(const flopmeter_counts& c, const vision_geometry& g) {
  if (c.struct_size < kCountsV1Size) return false;
  if (g.window_count > 0 && !covers(c.struct_size, &flopmeter_counts::window_pairs_1)) return false;
  const bool vision_counts = g.vision_window > 0 || g.cls_tokens > 0 || g.image_block;
  return !vision_counts || covers(c.struct_size, &flopmeter_counts::image_block_pairs);
}

// Counts must be >= 0: the FLOP model's products are exact only for the counts a batch can have.
bool counts_valid(const flopmeter_counts* c) {
  if (c == nullptr || c->struct_size < kCountsV1Size) return false;
  for (const auto& entry : kAbiCountFields) {
    if (covers(c->struct_size, entry.first) && c->*entry.first < 0) return false;
  }
  return true;
}

// Writes `text` as the JSON functions promise: at most size - 1 bytes and a NUL; returns the full length.
int64_t write_text(const std::string& text, char* out, std::size_t size) {
  if (out != nullptr && size > 0) {
    const std::size_t n = std::min(size - 1, text.size());
    std::memcpy(out, text.data(), n);
    out[n] = '\0';
  }
  return static_cast<int64_t>(text.size());
}

}  // namespace

int event_from_microbatch(const flopmeter_microbatch* m, microbatch_event& e, const char** why) noexcept {
  if (m == nullptr) {
    *why = "the flopmeter_microbatch pointer is NULL";
    return FLOPMETER_E_NULL_ARGUMENT;
  }
  if (m->struct_size < kMicrobatchV1Size) {
    *why = "flopmeter_microbatch.struct_size is below sizeof(flopmeter_microbatch) of ABI version 1";
    return FLOPMETER_E_STRUCT_SIZE;
  }
  // Fields added after version 1 are read only when struct_size covers them: a caller built against an older
  // header has memory of its own (or none) there.
  const bool has_positions_int32 = m->struct_size >= kMicrobatchPositionsInt32Size;
  const int32_t* positions_int32 = has_positions_int32 ? m->positions_int32 : nullptr;
  const size_t num_positions_int32 = has_positions_int32 ? m->num_positions_int32 : 0;
  if (!array_given(m->document_lengths, m->num_document_lengths) || !array_given(m->cu_seqlens, m->num_cu_seqlens) ||
      !array_given(m->positions, m->num_positions) || !array_given(positions_int32, num_positions_int32) ||
      !array_given(m->grids, m->num_grids)) {
    *why = "an array pointer is NULL with a non-zero count";
    return FLOPMETER_E_REJECTED;
  }
  e.document_lengths = {m->document_lengths, m->num_document_lengths};
  e.cu_seqlens = {m->cu_seqlens, m->num_cu_seqlens};
  e.positions = {m->positions, m->num_positions};
  e.positions_int32 = {positions_int32, num_positions_int32};  // two formats given: rejected by the counting
  e.padding_tokens = m->padding_tokens;
  static_assert(sizeof(flopmeter_grid) == sizeof(image_grid), "grid layouts must match");
  e.grid_thw = {reinterpret_cast<const image_grid*>(m->grids), m->num_grids};
  e.samples = m->samples;
  if (m->has_loss) {
    e.loss_sum = m->loss_sum;
    e.label_tokens = m->label_tokens;
  }
  return FLOPMETER_OK;
}

flopmeter_model* register_model(model_spec spec, training_regime regime) {
  auto state = std::make_shared<model_state>();
  state->coeffs = compute_coefficients(spec, regime);  // validates the regime against the model
  state->regime = std::move(regime);
  state->geometry = geometry_of(spec);
  state->spec = std::move(spec);
  state->coefficients_report = coefficients_report(state->spec, state->coeffs, state->regime);
  for (const flop_scope scope : {flop_scope::complete, flop_scope::seed}) {
    state->estimate_reports[scope == flop_scope::seed ? FLOPMETER_SCOPE_SEED : FLOPMETER_SCOPE_COMPLETE] =
        estimate_report(estimate_batch(state->spec, batch_counts{}, scope, 0, state->regime));
  }
  return model_registry::instance().add(std::move(state));
}

}  // namespace flopmeter::detail

using flopmeter::detail::model_registry;

namespace {

using flopmeter::detail::report_kind;
static_assert(static_cast<int>(report_kind::integer) == FLOPMETER_VALUE_INTEGER &&
                  static_cast<int>(report_kind::number) == FLOPMETER_VALUE_NUMBER &&
                  static_cast<int>(report_kind::boolean) == FLOPMETER_VALUE_BOOLEAN &&
                  static_cast<int>(report_kind::text) == FLOPMETER_VALUE_TEXT &&
                  static_cast<int>(report_kind::empty_list) == FLOPMETER_VALUE_EMPTY_LIST,
              "report_kind is FLOPMETER_VALUE_*'s order");

// Writes the values of `entries` into out[0..size) (the texts from `texts`, the registered report with the same
// keys, so that they live as long as the handle); returns the number of entries.
int64_t write_values(const flopmeter::detail::report_entries& entries, const flopmeter::detail::report_entries& texts,
                     flopmeter_report_value* out, size_t size) {
  if (entries.size() != texts.size()) return FLOPMETER_E_REJECTED;  // cannot happen: the keys are the model's
  for (std::size_t i = 0; i < entries.size() && out != nullptr && i < size; ++i) {
    const flopmeter::detail::report_entry& e = entries[i];
    out[i].integer = e.integer;
    out[i].number = e.number;
    out[i].text = e.kind == flopmeter::detail::report_kind::text ? texts[i].text.c_str() : nullptr;
  }
  return static_cast<int64_t>(entries.size());
}

}  // namespace

extern "C" {

flopmeter_model* flopmeter_model_load(const char* path, char* error, size_t error_size) {
  return flopmeter::detail::create_or_report(error, error_size, [&] {
    if (path == nullptr) throw flopmeter::error("the model path is NULL");
    return flopmeter::detail::register_model(flopmeter::load_model_spec(path));
  });
}

flopmeter_model* flopmeter_model_parse_json(const char* text, size_t length, const char* source_name, char* error,
                                            size_t error_size) {
  return flopmeter::detail::create_or_report(error, error_size, [&] {
    if (text == nullptr && length > 0) throw flopmeter::error("the config.json text is NULL with a non-zero length");
    const std::string name = source_name != nullptr && *source_name != '\0' ? source_name : "<config.json>";
    flopmeter::model_spec spec = flopmeter::parse_hf_config(std::string(text != nullptr ? text : "", length), name);
    spec.source_path.clear();  // text, not a file: reports carry no "file"
    return flopmeter::detail::register_model(std::move(spec));
  });
}

const char* flopmeter_count_field(uint32_t index, int* in_counts_struct) {
  if (index >= flopmeter::detail::kCountFieldCount) return nullptr;
  if (in_counts_struct != nullptr) *in_counts_struct = index < flopmeter::detail::kReportedCountFields ? 1 : 0;
  return flopmeter::detail::kCountFields[index].name.data();  // a string literal: NUL-terminated, static
}

int flopmeter_model_window(const flopmeter_model* model, uint32_t index, int* kind, int64_t* size) {
  if (model == nullptr || kind == nullptr || size == nullptr) return FLOPMETER_E_NULL_ARGUMENT;
  const auto state = model_registry::instance().find(model);
  if (!state) return FLOPMETER_E_INVALID_HANDLE;
  if (static_cast<std::int64_t>(index) >= state->geometry.window_count) return FLOPMETER_E_REJECTED;
  const flopmeter::attention_window& w = state->geometry.windows[index];
  *kind = w.kind == flopmeter::window_kind::sliding ? FLOPMETER_WINDOW_SLIDING : FLOPMETER_WINDOW_CHUNKED;
  *size = w.size;
  return FLOPMETER_OK;
}

flopmeter_model* flopmeter_model_with_options(const flopmeter_model* model, const flopmeter_model_options* options,
                                              char* error, size_t error_size) {
  return flopmeter::detail::create_or_report(error, error_size, [&] {
    if (model == nullptr || options == nullptr) throw flopmeter::error("the model or options pointer is NULL");
    const auto state = model_registry::instance().find(model);
    if (!state) throw flopmeter::error("not a live model (destroyed already, or never created)");
    if (options->struct_size < sizeof(flopmeter_model_options)) {
      throw flopmeter::error(
          "flopmeter_model_options.struct_size is below sizeof(flopmeter_model_options) of its "
          "first version");
    }
    if (options->lora_targets == nullptr && options->num_lora_targets > 0) {
      throw flopmeter::error("flopmeter_model_options.lora_targets is NULL with num_lora_targets > 0");
    }
    flopmeter::training_regime regime;
    regime.vision_frozen = options->vision_frozen != 0;
    regime.merger_frozen = options->merger_frozen != 0;
    regime.text_frozen = options->text_frozen != 0;
    regime.lora_rank = options->lora_rank;
    for (size_t i = 0; i < options->num_lora_targets; ++i) {
      const std::string where = "flopmeter_model_options.lora_targets[" + std::to_string(i) + "]";
      if (options->lora_targets[i] == nullptr) throw flopmeter::error(where + " is NULL");
      regime.lora_targets.push_back(flopmeter::parse_lora_target(options->lora_targets[i], where));
    }
    if (options->recompute_policy != nullptr) {
      regime.recompute.policy =
          flopmeter::parse_recompute_policy(options->recompute_policy, "flopmeter_model_options.recompute_policy");
    }
    regime.recompute.layers = options->recompute_layers;
    regime.recompute.every = options->recompute_every;
    regime.recompute.pipeline_stages = options->recompute_pipeline_stages == 0 ? 1 : options->recompute_pipeline_stages;
    regime.recompute.vision = options->recompute_vision != 0;
    return flopmeter::detail::register_model(state->spec, std::move(regime));
  });
}

int flopmeter_model_destroy(flopmeter_model* model) {
  if (model == nullptr) return FLOPMETER_OK;
  return model_registry::instance().remove(model) ? FLOPMETER_OK : FLOPMETER_E_INVALID_HANDLE;
}

int flopmeter_model_count(const flopmeter_model* model, const flopmeter_microbatch* microbatch, flopmeter_counts* out,
                          char* error, size_t error_size) {
  const auto refused = [&](int code, const char* reason) {
    flopmeter::detail::write_abi_error(error, error_size, reason);
    return code;
  };
  if (model == nullptr || out == nullptr) {
    return refused(FLOPMETER_E_NULL_ARGUMENT, model == nullptr ? "the model handle is NULL" : "out is NULL");
  }
  const auto state = model_registry::instance().find(model);
  if (!state) return refused(FLOPMETER_E_INVALID_HANDLE, "not a live model (destroyed already, or never loaded)");
  if (out->struct_size < flopmeter::detail::kCountsV1Size) {
    return refused(FLOPMETER_E_STRUCT_SIZE, "flopmeter_counts.struct_size is below its first version");
  }
  flopmeter::microbatch_event event;
  const char* why = nullptr;
  const int code = flopmeter::detail::event_from_microbatch(microbatch, event, &why);
  if (code != FLOPMETER_OK) {
    flopmeter::detail::write_abi_error(error, error_size, why);
    return code;
  }
  try {
    flopmeter::detail::counts_to(flopmeter::detail::count_event(event, state->geometry), *out);
    return FLOPMETER_OK;
  } catch (const std::exception& e) {
    flopmeter::detail::write_abi_error(error, error_size, e.what());
  } catch (...) {
    flopmeter::detail::write_abi_error(error, error_size, "unknown error");
  }
  return FLOPMETER_E_REJECTED;
}

int flopmeter_model_flops(const flopmeter_model* model, const flopmeter_counts* counts, int scope_value,
                          flopmeter_flops* out) {
  if (model == nullptr || counts == nullptr || out == nullptr) return FLOPMETER_E_NULL_ARGUMENT;
  const auto state = model_registry::instance().find(model);
  if (!state) return FLOPMETER_E_INVALID_HANDLE;
  if (out->struct_size < sizeof(flopmeter_flops) || !flopmeter::detail::counts_size_ok(*counts, state->geometry)) {
    return FLOPMETER_E_STRUCT_SIZE;
  }
  flopmeter::flop_scope scope{};
  if (!flopmeter::detail::scope_from(scope_value, scope) || !flopmeter::detail::counts_valid(counts)) {
    return FLOPMETER_E_REJECTED;
  }
  try {
    const flopmeter::batch_counts n = flopmeter::detail::counts_from(*counts);
    const flopmeter::flop_breakdown f = flopmeter::compute_flops(state->of(n), n, scope);
    out->total = f.total();
    out->text_dense = f.text_dense;
    out->text_attention = f.text_attention;
    out->vision_dense = f.vision_dense;
    out->vision_attention = f.vision_attention;
    out->patch_embed = f.patch_embed;
    out->merger = f.merger;
    out->mtp = f.mtp;
    const std::string exact = flopmeter::exact_total_flops(state->of(n), n, scope);
    if (exact.size() >= sizeof(out->exact_total)) return FLOPMETER_E_REJECTED;  // cannot happen: <= 40 digits
    std::memcpy(out->exact_total, exact.c_str(), exact.size() + 1);
    return FLOPMETER_OK;
  } catch (...) {
    return FLOPMETER_E_REJECTED;
  }
}

int64_t flopmeter_model_coefficients_json(const flopmeter_model* model, char* out, size_t size) {
  if (model == nullptr) return FLOPMETER_E_NULL_ARGUMENT;
  const auto state = model_registry::instance().find(model);
  if (!state) return FLOPMETER_E_INVALID_HANDLE;
  try {
    return flopmeter::detail::write_text(
        flopmeter::detail::coefficients_json(state->spec, state->coeffs, state->regime), out, size);
  } catch (...) {
    return FLOPMETER_E_REJECTED;
  }
}

int64_t flopmeter_model_check_json(const flopmeter_model* model, int64_t seq_len, char* out, size_t size, char* error,
                                   size_t error_size) {
  if (model == nullptr) return FLOPMETER_E_NULL_ARGUMENT;
  const auto state = model_registry::instance().find(model);
  if (!state) return FLOPMETER_E_INVALID_HANDLE;
  try {
    return flopmeter::detail::write_text(
        flopmeter::detail::check_report_json(flopmeter::run_sanity_check(state->spec, seq_len)), out, size);
  } catch (const std::exception& e) {
    flopmeter::detail::write_abi_error(error, error_size, e.what());
  } catch (...) {
    flopmeter::detail::write_abi_error(error, error_size, "unknown error");
  }
  return FLOPMETER_E_REJECTED;
}

int64_t flopmeter_model_estimate_json(const flopmeter_model* model, const flopmeter_counts* counts, int scope_value,
                                      int64_t seq_len, char* out, size_t size) {
  if (model == nullptr || counts == nullptr) return FLOPMETER_E_NULL_ARGUMENT;
  const auto state = model_registry::instance().find(model);
  if (!state) return FLOPMETER_E_INVALID_HANDLE;
  if (!flopmeter::detail::counts_size_ok(*counts, state->geometry)) return FLOPMETER_E_STRUCT_SIZE;
  flopmeter::flop_scope scope{};
  if (!flopmeter::detail::scope_from(scope_value, scope) || !flopmeter::detail::counts_valid(counts) || seq_len < 0) {
    return FLOPMETER_E_REJECTED;
  }
  try {
    const flopmeter::detail::estimate_result r = flopmeter::detail::estimate_batch(
        state->spec, flopmeter::detail::counts_from(*counts), scope, seq_len, state->regime);
    return flopmeter::detail::write_text(flopmeter::detail::estimate_json(r), out, size);
  } catch (...) {
    return FLOPMETER_E_REJECTED;
  }
}

const char* flopmeter_model_report_key(const flopmeter_model* model, int report, uint32_t index, int* kind) {
  if (model == nullptr) return nullptr;
  const auto state = model_registry::instance().find(model);
  if (!state) return nullptr;
  const flopmeter::detail::report_entries* entries =
      report == FLOPMETER_REPORT_COEFFICIENTS ? &state->coefficients_report
      : report == FLOPMETER_REPORT_ESTIMATE   ? &state->estimate_reports[FLOPMETER_SCOPE_COMPLETE]
                                              : nullptr;
  if (entries == nullptr || index >= entries->size()) return nullptr;
  if (kind != nullptr) *kind = static_cast<int>((*entries)[index].kind);
  return (*entries)[index].key.c_str();  // lives as long as the state, which the registry holds until destroy
}

int64_t flopmeter_model_coefficients(const flopmeter_model* model, flopmeter_report_value* out, size_t size) {
  if (model == nullptr) return FLOPMETER_E_NULL_ARGUMENT;
  const auto state = model_registry::instance().find(model);
  if (!state) return FLOPMETER_E_INVALID_HANDLE;
  return write_values(state->coefficients_report, state->coefficients_report, out, size);
}

int64_t flopmeter_model_estimate(const flopmeter_model* model, const flopmeter_counts* counts, int scope_value,
                                 int64_t seq_len, flopmeter_report_value* out, size_t size) {
  if (model == nullptr || counts == nullptr) return FLOPMETER_E_NULL_ARGUMENT;
  const auto state = model_registry::instance().find(model);
  if (!state) return FLOPMETER_E_INVALID_HANDLE;
  if (!flopmeter::detail::counts_size_ok(*counts, state->geometry)) return FLOPMETER_E_STRUCT_SIZE;
  flopmeter::flop_scope scope{};
  if (!flopmeter::detail::scope_from(scope_value, scope) || !flopmeter::detail::counts_valid(counts) || seq_len < 0) {
    return FLOPMETER_E_REJECTED;
  }
  try {
    const flopmeter::detail::estimate_result r = flopmeter::detail::estimate_batch(
        state->spec, flopmeter::detail::counts_from(*counts), scope, seq_len, state->regime);
    return write_values(flopmeter::detail::estimate_report(r), state->estimate_reports[scope_value], out, size);
  } catch (...) {
    return FLOPMETER_E_REJECTED;
  }
}

}  // extern "C"
