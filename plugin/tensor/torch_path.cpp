// The LibTorch tensor path: batch counts computed and accumulated with ATen ops on the batch's device, added
// into the log's collective on that device, read back after the collective (see flopmeter/torch.h).
//
// Every op below is asynchronous on CUDA: comparisons and sums produce device tensors, the validity mask
// multiplies the counts instead of branching on them, and host-known facts (tensor shapes, padding) enter as
// constants. Nothing calls .item(), .cpu() or a synchronising copy.
#include "flopmeter/torch.h"

#include <ATen/ATen.h>
#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>

#include <atomic>
#include <cmath>
#include <mutex>
#include <optional>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "comm/c10d_internal.h"
#include "flopmeter/c10d.h"
#include "flopmeter/error.h"
#include "accounting/derive.h"  // check_loss_pair
#include "accounting/flops_seen.h"
#include "accounting/owned_mutex.h"
#include "accounting/plugin_factory.h"  // check_layout_fits, make_emitting_sinks
#include "accounting/row_layout.h"
#include "accounting/throughput_calls.h"
#include "util/exact_double.h"
#include "count/exact_flops.h"
#include "tensor/torch_path_log.h"  // spdlog stays out of this file: see there

namespace flopmeter {
namespace {

using namespace detail;  // row_layout.h

// Counting on the device, without a sync, so without a way to stop at the first overflow:
//   - each document's or item's count is formed in int64, within bounds that keep it exact: a document of
//     L <= 2^32 - 1 tokens (the host path's limit) has L(L+1)/2 < 2^63 pairs, formed by halving the even
//     one of L and L+1 first; an item of P = t*h*w <= 2^31 patches has P^2 <= 2^62 pairs. Larger entries are
//     invalid;
//   - the sums over documents, items and micro-batches are float64. Every partial sum of non-negative
//     integers is exact while the total is below 2^53, and a larger total never wraps: it stays >= 2^53,
//     which derive() refuses as more than a row carries exactly. (In int64, eight documents of 2^31 tokens
//     summed to 2^64 + 2^33 pairs and wrapped to 2^33: a plausible, wrong count.)
constexpr std::int64_t kMaxDocumentTokens = (std::int64_t{1} << 32) - 1;
constexpr std::int64_t kMaxItemPatches = std::int64_t{1} << 31;
constexpr std::int64_t kCountEntries = static_cast<std::int64_t>(kRowCountFields) + 1;  // + invalid entries

at::Tensor constant(std::int64_t value, const at::TensorOptions& options) { return at::full({}, value, options); }

constexpr std::int64_t kFlopsLimb = std::int64_t{1} << 32;  // the base of the FLOPs limbs (flops_seen.h)

// Brings entries 0 .. n-2 of an int64 vector of 32-bit limbs (least significant first) into [0, 2^32) by
// carrying floor(x / 2^32) into the next, lowest first; the last keeps the rest. Exact while every entry stays
// below 2^63 in magnitude (accounting/flops_seen.h, "Device FLOPs").
void carry_limbs(at::Tensor& limbs) {
  for (std::int64_t m = 0; m + 1 < limbs.size(0); ++m) {
    const at::Tensor carry = at::div(limbs.select(0, m), kFlopsLimb, "floor");
    limbs.select(0, m).sub_(carry * kFlopsLimb);
    limbs.select(0, m + 1).add_(carry);
  }
}

// at::div's rounding_mode is c10::optional<c10::string_view> in 1.13 and std::optional<std::string_view> in
// 2.x; a string literal converts to either.
at::Tensor half_floor(const at::Tensor& x) { return at::div(x, 2, "floor"); }

// L(L+1)/2 per entry of an int64 tensor with 0 <= L <= kMaxDocumentTokens, exact: L(L+1) itself would
// overflow from L = 3,037,000,500, so the even factor is halved before the product.
at::Tensor causal_pairs(const at::Tensor& lengths) {
  const at::Tensor next = lengths + 1;
  return at::where(lengths.remainder(2) == 0, half_floor(lengths) * next, lengths * half_floor(next));
}

// The float64 sum of an int64 tensor's entries (see above: exact below 2^53, never wrapping).
at::Tensor sum_exact(const at::Tensor& x) { return x.to(at::kDouble).sum(); }

// Per document of L tokens (0 <= L <= kMaxDocumentTokens), the pairs under window `w`, in int64 and exact (every
// term is at most L(L+1)/2 < 2^63; the definitions are batch_counts' in flop_model.h):
//   sliding w: m = min(L, w) (the clamp): m(m+1)/2 + (L - m) * m;
//   chunked c: q = L / c, r = L % c: q * c(c+1)/2 + r(r+1)/2, with c clamped to 2^32 - 1 (a c >= L is one chunk
//   either way, and c(c+1)/2 then fits int64).
at::Tensor window_pairs_of_lengths(const at::Tensor& lengths, const attention_window& w) {
  if (w.kind == window_kind::sliding) {
    const at::Tensor m = lengths.clamp_max(w.size);
    return causal_pairs(m) + (lengths - m) * m;
  }
  const std::int64_t c = w.size < kMaxDocumentTokens ? w.size : kMaxDocumentTokens;
  const std::int64_t chunk_pairs = c % 2 == 0 ? (c / 2) * (c + 1) : c * ((c + 1) / 2);
  return at::div(lengths, c, "floor") * chunk_pairs + causal_pairs(lengths.remainder(c));
}

// Per token at position p (clamped to [0, kMaxDocumentTokens - 1] like the causal pairs), the keys it attends:
// min(p + 1, w) (sliding, the clamp) or (p mod c) + 1 (chunked).
at::Tensor window_pairs_of_positions(const at::Tensor& p, const attention_window& w) {
  const at::Tensor q = p.clamp(0, kMaxDocumentTokens - 1);
  return w.kind == window_kind::sliding ? (q + 1).clamp_max(w.size) : q.remainder(w.size) + 1;
}

}  // namespace

at::Tensor tensor_batch_counts(const tensor_microbatch& b, const vision_geometry& g) {
  const bool has_cu = b.cu_seqlens.defined() && b.cu_seqlens.numel() > 0;
  const bool has_positions = b.positions.defined() && b.positions.numel() > 0;
  const bool has_grids = b.grid_thw.defined() && b.grid_thw.numel() > 0;
  // Shape and dtype facts are known on the host: reject those at once. A floating-point tensor would be
  // truncated by the widening to int64 below ([0, 2.5, 5] would count as [0, 2, 5]).
  const auto require_integers = [](const at::Tensor& t, const char* name) {
    if (!c10::isIntegralType(t.scalar_type(), /*includeBool=*/false)) {
      throw error(std::string(name) + " must have an integer dtype (got " +
                  std::string(c10::toString(t.scalar_type())) + ")");
    }
  };
  if (has_cu) require_integers(b.cu_seqlens, "cu_seqlens");
  if (has_positions) require_integers(b.positions, "positions");
  if (has_grids) require_integers(b.grid_thw, "grid_thw");
  if (has_cu && has_positions) throw error("a tensor micro-batch gives both cu_seqlens and positions");
  if (has_cu && b.cu_seqlens.dim() != 1) throw error("cu_seqlens must be 1-D");
  if (has_positions && b.positions.dim() != 1) throw error("positions must be 1-D");
  if (has_grids && (b.grid_thw.dim() != 2 || b.grid_thw.size(1) != 3)) {
    throw error("grid_thw must have shape [items, 3]");
  }
  if (has_grids && !g.has_vision) throw error("the batch has image grids but the model has no vision tower");
  if (b.padding_tokens < 0) throw error("padding_tokens must be >= 0 (got " + std::to_string(b.padding_tokens) + ")");

  const c10::Device device = has_cu ? b.cu_seqlens.device()
                             : has_positions ? b.positions.device()
                             : has_grids ? b.grid_thw.device()
                                         : c10::Device(c10::kCPU);
  const auto options = at::TensorOptions().dtype(at::kDouble).device(device);
  at::Tensor zero = at::zeros({}, options);
  at::Tensor real = zero, documents = zero, pairs = zero, invalid = zero;
  if (g.window_count < 0 || g.window_count > static_cast<std::int64_t>(kMaxAttentionWindows)) {
    throw error("vision_geometry.window_count must be 0 to " + std::to_string(kMaxAttentionWindows));
  }
  for (std::int64_t k = 0; k < g.window_count; ++k) {
    if (g.windows[k].size < 1) throw error("vision_geometry.windows[" + std::to_string(k) + "].size must be >= 1");
  }
  static_assert(kMaxAttentionWindows == 2, "one zero per window below");
  at::Tensor window[kMaxAttentionWindows] = {zero, zero};

  if (has_cu) {
    const at::Tensor cu = b.cu_seqlens.to(at::kLong);
    const std::int64_t n = cu.numel();
    documents = constant(n - 1, options);
    invalid = invalid + (cu.select(0, 0) != 0).to(at::kLong);
    if (n > 1) {
      const at::Tensor lengths = cu.slice(0, 1) - cu.slice(0, 0, n - 1);
      invalid = invalid + (lengths < 0).sum() + (lengths > kMaxDocumentTokens).sum();
      const at::Tensor safe = lengths.clamp(0, kMaxDocumentTokens);
      real = sum_exact(safe);
      pairs = sum_exact(causal_pairs(safe));
      for (std::int64_t k = 0; k < g.window_count; ++k) {
        window[k] = sum_exact(window_pairs_of_lengths(safe, g.windows[k]));
      }
    }
  } else if (has_positions) {
    const at::Tensor p = b.positions.to(at::kLong);
    const std::int64_t n = p.numel();
    real = constant(n, options);
    documents = (p == 0).sum().to(at::kDouble);
    // Position p makes its document at least p + 1 tokens long.
    invalid = invalid + (p.select(0, 0) != 0).to(at::kLong) + (p >= kMaxDocumentTokens).sum();
    if (n > 1) {
      const at::Tensor current = p.slice(0, 1), previous = p.slice(0, 0, n - 1);
      invalid = invalid + ((current != 0) & (current != previous + 1)).sum();
    }
    // The reference's sum(positions + 1): L(L+1)/2 per document once the runs are valid.
    pairs = sum_exact(p.clamp(0, kMaxDocumentTokens - 1) + 1);
    for (std::int64_t k = 0; k < g.window_count; ++k) {
      window[k] = sum_exact(window_pairs_of_positions(p, g.windows[k]));
    }
  }

  at::Tensor items = zero, patches = zero, merged = zero, per_frame = zero, whole = zero, vision_window = zero,
             cls_tokens = zero, block = zero;
  if (has_grids) {
    const at::Tensor grid = b.grid_thw.to(at::kLong);
    const std::int64_t m = g.spatial_merge_size, c = g.cls_tokens;
    const at::Tensor t = grid.select(1, 0), h = grid.select(1, 1), w = grid.select(1, 2);
    // Bounds first, in double (exact enough to compare against 2^31), so no int64 product can overflow.
    const at::Tensor too_large = (t.to(at::kDouble) * h.to(at::kDouble) * w.to(at::kDouble)) > static_cast<double>(kMaxItemPatches);
    at::Tensor row_bad = (grid < 1).any(1) | (h.remainder(m) != 0) | (w.remainder(m) != 0) | too_large;
    // A tiled model's segment is one whole tile (InternVL, Gemma 3).
    if (g.segment_side > 0) row_bad = row_bad | (h != g.segment_side) | (w != g.segment_side);
    invalid = invalid + row_bad.sum();
    const at::Tensor ok = (~row_bad).to(at::kLong);
    // Invalid rows are replaced by (1, m, m) and masked out below, so their products stay small.
    const at::Tensor ts = at::where(row_bad, at::ones_like(t), t), hs = at::where(row_bad, at::full_like(h, m), h),
                     ws = at::where(row_bad, at::full_like(w, m), w);
    const at::Tensor frame = hs * ws, item_patches = ts * frame;
    items = constant(grid.size(0), options);
    patches = sum_exact(item_patches * ok);
    merged = sum_exact(at::div(item_patches, m * m, "floor") * ok);
    per_frame = sum_exact(ts * (frame + c) * (frame + c) * ok);
    whole = sum_exact(item_patches * item_patches * ok);
    // The closed forms of the host path (count/batch_counts.cpp add_vision_extras), per segment times t; each is at
    // most the per-segment pairs, so the int64 products stay below 2^62.
    if (g.vision_window > 0) {
      const std::int64_t v = g.vision_window;
      const at::Tensor hm = at::div(hs, m, "floor"), wm = at::div(ws, m, "floor");
      const at::Tensor rows = at::div(hm, v, "floor") * (v * v) + hm.remainder(v) * hm.remainder(v);
      const at::Tensor cols = at::div(wm, v, "floor") * (v * v) + wm.remainder(v) * wm.remainder(v);
      vision_window = sum_exact(ts * (rows * (m * m)) * (cols * (m * m)) * ok);
    }
    if (c > 0) cls_tokens = sum_exact(ts * c * ok);
    if (g.image_block) {
      const at::Tensor n = at::div(frame, m * m, "floor");
      block = sum_exact(ts * at::div(n * (n - 1), 2, "floor") * ok);
    }
  }
  // Whether the micro-batch has images or videos is a shape fact, known on the host (regime_coefficients).
  const at::Tensor padding = constant(b.padding_tokens, options);
  const at::Tensor itemless_tokens = has_grids ? zero : real + padding, itemless_pairs = has_grids ? zero : pairs;
  // In the row's order (row_layout.h, kCountFields), then the invalid entries.
  std::vector<at::Tensor> entries(static_cast<std::size_t>(kCountEntries), zero);
  entries[row_real_tokens] = real;
  entries[row_padding_tokens] = padding;
  entries[row_documents] = documents;
  entries[row_causal_pairs] = pairs;
  entries[row_items] = items;
  entries[row_patches] = patches;
  entries[row_merged_tokens] = merged;
  entries[row_vision_pairs_per_frame] = per_frame;
  entries[row_vision_pairs_whole] = whole;
  entries[row_vision_window_pairs] = vision_window;
  entries[row_vision_cls_tokens] = cls_tokens;
  entries[row_image_block_pairs] = block;
  entries[row_itemless_device_tokens] = itemless_tokens;
  entries[row_itemless_causal_pairs] = itemless_pairs;
  for (std::size_t k = 0; k < kMaxAttentionWindows; ++k) {
    entries[count_field_index(kWindowPairs[k])] = window[k];
    entries[count_field_index(kItemlessWindowPairs[k])] = has_grids ? zero : window[k];
  }
  entries[kRowCountFields] = invalid.to(at::kDouble);
  return at::stack(entries);
}

batch_counts to_batch_counts(const at::Tensor& counts) {
  const at::Tensor host = counts.to(at::kCPU).to(at::kDouble).contiguous();
  if (host.numel() < static_cast<std::int64_t>(kRowCountFields)) throw error("to_batch_counts: too few entries");
  const double* values = host.data_ptr<double>();
  for (std::size_t f = 0; f < kRowCountFields; ++f) {
    if (!(values[f] >= 0 && values[f] < kExactIntegerLimit)) {
      throw error("to_batch_counts: entry " + std::to_string(f) + " is not an exact count below 2^53");
    }
  }
  return counts_from_row(values);  // the row's layout, as for the host path
}

class tensor_throughput::impl {
 public:
  impl(throughput_options options, c10::intrusive_ptr<c10d::ProcessGroup> group, c10::Device device,
       const c10d_options& checks)
      : geometry_(geometry_of(options.model)),
        megatron_(megatron_billing::of(options.model, options.scope)),
        device_(device) {
    if (!group) throw error("tensor_throughput: the process group is null");
    detail::check_group_covers_job("tensor_throughput", group->getSize(), checks.job_world_size);
    const std::string backend = group->getBackendName();
    if ((backend == "nccl") != device.is_cuda()) {
      throw error("tensor_throughput: the counters live on " + device.str() + " but the '" + backend +
                  "' group all-reduces on " + (backend == "nccl" ? "CUDA" : "the CPU") +
                  "; a mismatch would need a synchronising copy per log");
    }
    accumulated_ = at::zeros({kAccumulated}, at::TensorOptions().dtype(at::kDouble).device(device));
    loss_sum_ = at::zeros({}, at::TensorOptions().dtype(at::kDouble).device(device));
    seen_ = at::zeros({3}, at::TensorOptions().dtype(at::kDouble).device(device));
    logger_ = options.logger;
    if (!logger_) logger_ = make_tensor_path_logger();
    rank_ = group->getRank();
    auto comm = make_c10d_communicator_with(std::move(group), [this](at::Tensor& buffer) { contribute(buffer); });
    // The device counts go into this rank's row of the table, so every log gathers it (throughput.h).
    options.topk_interval_logs = 1;
    plugin_ = throughput_plugin::create(std::move(options), std::move(comm));
    // The FLOPs of the device counts, in the regime and scope the plugin bills (its options, resolved).
    const auto longs = at::TensorOptions().dtype(at::kLong);
    const std::vector<std::int64_t> matrix = weight_digit_matrix(
        model_flop_weights(compute_coefficients(plugin_->model(), plugin_->training()), plugin_->scope()));
    flops_weight_digits_ = at::tensor(matrix, longs)
                               .view({static_cast<std::int64_t>(kRowCountFields) * kCountDigits, kProductDigits})
                               .to(device);
    const std::vector<std::int64_t> digit_scales = {1, std::int64_t{1} << 16, std::int64_t{1} << 32,
                                                    std::int64_t{1} << 48};
    static_assert(kCountDigits == 4, "one scale per count digit above");
    count_digit_scales_ = at::tensor(digit_scales, longs).to(device);
    flops_seen_ = at::zeros({kDeviceFlopsLimbs}, longs.device(device));
  }

  void on_microbatch(const tensor_microbatch& batch) noexcept {
    if (refused_reentrant(microbatch_event{})) return;
    std::lock_guard<detail::owned_mutex> lock(mutex_);
    try {
      // The host-known facts of the rest of the batch, checked as the host path checks them.
      if (batch.samples < 0) throw error("samples must be >= 0 (got " + std::to_string(batch.samples) + ")");
      if (batch.label_tokens && *batch.label_tokens < 0) throw error("label_tokens must be >= 0");
      if (batch.loss_sum && !std::isfinite(*batch.loss_sum)) throw error("loss_sum is not finite");
      check_loss_pair(batch.loss_sum, batch.label_tokens);
      const at::Tensor counts = tensor_batch_counts(batch, geometry_).to(device_, /*non_blocking=*/true);
      // 1 when the device found nothing wrong, else 0: everything the batch contributes is multiplied by it,
      // so a rejected batch adds nothing (as on the host path) and nothing waits for the verdict.
      at::Tensor valid = (counts.select(0, kInvalid) == 0).to(at::kDouble);
      if (batch.loss_sum && batch.label_tokens) {
        // More label tokens than real tokens is refused (check_label_tokens_within on the host path); here the
        // real tokens are on the device, so the comparison is too, folded into the verdict.
        valid = valid * (counts.select(0, row_real_tokens) >= static_cast<double>(*batch.label_tokens)).to(at::kDouble);
      }
      accumulated_.slice(0, 0, kInvalid).add_(counts.slice(0, 0, kInvalid) * valid);
      accumulated_.select(0, kInvalid).add_(1 - valid);
      accumulated_.select(0, kSamples).add_(valid * static_cast<double>(batch.samples));
      // The sums the Megatron constant's attention parts grow with (megatron_billing::interval_flops), on the
      // device: S^2 and S x patches per micro-batch of S device tokens.
      const at::Tensor row_tokens = counts.select(0, row_real_tokens) + counts.select(0, row_padding_tokens);
      accumulated_.select(0, kTokensSquared).add_(valid * (row_tokens * row_tokens));
      accumulated_.select(0, kTokensTimesPatches).add_(valid * (row_tokens * counts.select(0, row_patches)));
      if (batch.loss_sum && batch.label_tokens) {
        accumulated_.select(0, kLabelTokens).add_(valid * static_cast<double>(*batch.label_tokens));
        loss_sum_.add_(valid * *batch.loss_sum);
      }
    } catch (const std::exception& e) {
      try {
        accumulated_.select(0, kInvalid).add_(1);  // counted, on the device, with the others
      } catch (...) {
      }
      warn_uncounted_microbatch(*logger_, *uncounted_warning_, e.what());
    }
    // The micro-batch ran whatever its description: the plugin counts it for the step time, with nothing else
    // (its tokens, samples, loss and label tokens are on the device, masked).
    plugin_->on_microbatch(microbatch_event{});
  }

  void on_microbatch(const microbatch_event& event) noexcept {
    if (refused_reentrant(event)) return;
    std::lock_guard<detail::owned_mutex> lock(mutex_);
    plugin_->on_microbatch(event);
  }

  void on_log(const log_event& event) noexcept {
    if (refused_reentrant(event)) return;
    std::lock_guard<detail::owned_mutex> lock(mutex_);  // contribute() runs inside, under this lock
    contributed_ = false;
    plugin_->on_log(event);
    // A log whose collective did not start (the plugin skipped it: backing off, getting back in step, or the
    // start failed) still ends the interval, as on the host path: its tokens, samples and FLOPs join the running
    // totals and the rest is dropped, so the next row's rates cover the next interval only. Device rejections
    // are kept until a row carries them (health().bad_microbatches counts every one).
    if (!contributed_) end_interval(/*keep_rejections=*/true);
  }

  void flush() noexcept {
    if (refused_reentrant(std::nullopt)) return;
    std::lock_guard<detail::owned_mutex> lock(mutex_);
    plugin_->flush();
  }

  throughput_plugin& plugin() { return *plugin_; }

  // The plugin's counters, with the re-entrant calls refused here before reaching it. Safe from inside a
  // call-out: the plugin's health() does not lock there, and this one never takes mutex_.
  throughput_health health() const {
    throughput_health h = plugin_->health();
    h.reentrant_calls += refused_here_.load(std::memory_order_relaxed);
    return h;
  }

 private:
  // The device accumulator: the counts, then the invalid micro-batches, samples, label tokens and the sums of
  // S^2 and S x patches (the Megatron figures), all
  // float64 like the row they are added to (exact below 2^53, never wrapping); the loss sum is a double of its own.
  static constexpr std::int64_t kInvalid = kCountEntries - 1;
  static constexpr std::int64_t kSamples = kCountEntries;
  static constexpr std::int64_t kLabelTokens = kCountEntries + 1;
  static constexpr std::int64_t kTokensSquared = kCountEntries + 2;
  static constexpr std::int64_t kTokensTimesPatches = kCountEntries + 3;
  static constexpr std::int64_t kAccumulated = kCountEntries + 4;

  // A hook called on the thread that holds mutex_, i.e. from inside one of our call-outs (the plugin's sinks,
  // logger, clock or collective, all of which run under it, or the logger of the warning above): locking
  // again would deadlock. Refused: when the plugin is the one calling out (the usual case: a sink calling
  // back), the hook goes to it, which refuses, counts and logs it (throughput.h, "Re-entry"); otherwise (our
  // own logger calling back) it is counted here, not logged (from inside a logger).
  template <class Event>
  bool refused_reentrant(const Event& event) noexcept {
    if (!mutex_.held_by_this_thread()) return false;
    if (detail::throughput_calls::in_callout(*plugin_)) {
      if constexpr (std::is_same_v<Event, microbatch_event>) {
        plugin_->on_microbatch(event);
      } else if constexpr (std::is_same_v<Event, log_event>) {
        plugin_->on_log(event);
      } else {
        plugin_->flush();
      }
    } else {
      refused_here_.fetch_add(1, std::memory_order_relaxed);
    }
    return true;
  }

  // Adds the interval's device counts into this rank's row of the collective buffer, on the device, and
  // starts the next interval's accumulation. Called by the communicator inside on_log (lock held); the host
  // side of the row has zeros there (the plugin saw only empty micro-batches from this path).
  void contribute(at::Tensor& buffer) {
    if (buffer.device() != accumulated_.device()) {
      throw error("tensor_throughput: the collective runs on " + buffer.device().str() + ", the counters on " +
                  accumulated_.device().str());
    }
    const std::int64_t row = rank_ * static_cast<std::int64_t>(kRowFields);
    const auto at_field = [&](row_field field) { return buffer.select(0, row + static_cast<std::int64_t>(field)); };
    buffer.narrow(0, row, static_cast<std::int64_t>(kRowCountFields)).add_(accumulated_.slice(0, 0, kInvalid));
    at_field(row_device_rejected).add_(accumulated_.select(0, kInvalid));
    at_field(row_label_tokens).add_(accumulated_.select(0, kLabelTokens));
    at_field(row_loss_sum).add_(loss_sum_);
    // In the host path's order of operations (megatron_billing::interval_flops), so both give the same double.
    const at::Tensor tokens = accumulated_.select(0, row_real_tokens) + accumulated_.select(0, row_padding_tokens);
    at_field(row_megatron_flops)
        .add_(tokens * megatron_.text_linear + accumulated_.select(0, kTokensSquared) * megatron_.text_attention_slope +
              accumulated_.select(0, row_patches) * megatron_.vision_linear +
              accumulated_.select(0, kTokensTimesPatches) * megatron_.vision_attention_slope);
    end_interval(/*keep_rejections=*/false);
    contributed_ = true;  // the interval has ended: on_log must not end it again, whatever follows here
    at_field(row_tokens_seen).add_(seen_.select(0, 0));  // the running totals, this interval included
    at_field(row_samples_seen).add_(seen_.select(0, 1));
    at_field(row_label_tokens_seen).add_(seen_.select(0, 2));
    add_flops_seen(buffer.narrow(0, row + static_cast<std::int64_t>(row_flops_seen_0), 3));
  }

  // The row's FLOPs limbs (the host's total: micro-batches described on the host) plus this rank's device total,
  // this interval included, carried into 32-bit limbs; kFlopsSeenBeyondRow in all three when the sum reaches
  // 2^96 or the host's limbs say so (accounting/flops_seen.h, "Device FLOPs").
  void add_flops_seen(at::Tensor row_limbs) {
    const at::Tensor host = row_limbs.to(at::kLong);  // whole numbers below 2^32, or kFlopsSeenBeyondRow
    at::Tensor sum = at::cat({host + flops_seen_.slice(0, 0, 3), at::zeros({1}, host.options())});
    carry_limbs(sum);
    const at::Tensor beyond =
        (sum.select(0, 3) + flops_seen_.select(0, 3) + flops_seen_.select(0, 4) != 0) | (host < 0).any();
    row_limbs.copy_(
        at::where(beyond, at::full({}, kFlopsSeenBeyondRow, row_limbs.options()), sum.slice(0, 0, 3).to(at::kDouble)));
  }

  // Adds the exact model FLOPs of the interval's device counts to this rank's running total, on the device
  // (accounting/flops_seen.h, "Device FLOPs"): the counts' 16-bit digits times the weights' digits, folded into
  // 32-bit limbs and carried.
  void add_interval_flops() {
    const at::Tensor counts = accumulated_.slice(0, 0, static_cast<std::int64_t>(kRowCountFields));
    // A count of 2^53 or more may be rounded already: 2^128 FLOPs, which marks the total beyond a row for good.
    flops_seen_.select(0, kDeviceFlopsLimbs - 1).add_((counts >= kExactIntegerLimit).any().to(at::kLong));
    const at::Tensor whole = counts.clamp_max(kExactIntegerLimit).to(at::kLong);
    const at::Tensor digits = at::div(whole.unsqueeze(1), count_digit_scales_, "floor").remainder(65536);
    const at::Tensor positions = (digits.reshape({-1, 1}) * flops_weight_digits_).sum(0);  // S_0 .. S_7
    flops_seen_.slice(0, 0, kProductDigits / 2)
        .add_(positions.slice(0, 0, kProductDigits, 2) + positions.slice(0, 1, kProductDigits, 2) * 65536);
    carry_limbs(flops_seen_);
  }

  // Adds the interval's real tokens, samples and FLOPs to the running totals and starts the next interval's
  // accumulation, on the device (no sync).
  void end_interval(bool keep_rejections) {
    add_interval_flops();
    seen_.select(0, 0).add_(accumulated_.select(0, row_real_tokens));
    seen_.select(0, 1).add_(accumulated_.select(0, kSamples));
    seen_.select(0, 2).add_(accumulated_.select(0, kLabelTokens));
    if (keep_rejections) {
      accumulated_.slice(0, 0, kInvalid).zero_();
      accumulated_.slice(0, kInvalid + 1).zero_();
    } else {
      accumulated_.zero_();
    }
    loss_sum_.zero_();
  }

  vision_geometry geometry_;
  megatron_billing megatron_;
  c10::Device device_;
  std::shared_ptr<spdlog::logger> logger_;
  std::shared_ptr<throughput_plugin> plugin_;
  at::Tensor accumulated_;
  at::Tensor loss_sum_;
  at::Tensor seen_;           // this rank's running totals: real tokens, samples, label tokens (row_*_seen)
  at::Tensor flops_seen_;     // this rank's running device FLOPs: kDeviceFlopsLimbs int64 limbs (flops_seen.h)
  at::Tensor flops_weight_digits_;  // weight_digit_matrix of the plugin's regime and scope, int64
  at::Tensor count_digit_scales_;   // 2^16i, i < kCountDigits, int64
  bool contributed_ = false;  // whether the current on_log's collective took this rank's device counts
  std::int64_t rank_ = 0;
  std::shared_ptr<rate_limited_log> uncounted_warning_ = make_warning_limiter();
  detail::owned_mutex mutex_;  // held_by_this_thread(): inside one of our call-outs (see refused_reentrant)
  std::atomic<std::uint64_t> refused_here_{0};
};

std::shared_ptr<tensor_throughput> tensor_throughput::create(throughput_options options,
                                                             c10::intrusive_ptr<c10d::ProcessGroup> group,
                                                             c10::Device device, const c10d_options& checks) {
  return std::shared_ptr<tensor_throughput>(
      new tensor_throughput(std::make_unique<impl>(std::move(options), std::move(group), device, checks)));
}

std::shared_ptr<tensor_throughput> create_tensor_throughput(const std::string& config_path,
                                                            c10::intrusive_ptr<c10d::ProcessGroup> group,
                                                            c10::Device device, std::shared_ptr<spdlog::logger> logger,
                                                            std::vector<std::shared_ptr<sink>> extra_sinks,
                                                            const c10d_options& checks) {
  if (!group) throw error("create_tensor_throughput: the process group is null");
  detail::plugin_file file = detail::load_plugin_file(config_path);
  try {
    detail::check_layout_fits(file, group->getSize());
    std::vector<std::shared_ptr<sink>> sinks =
        detail::make_emitting_sinks(file, group->getRank(), group->getSize(), logger);
    throughput_options options = std::move(file.config.options);
    options.logger = logger;
    options.sinks = std::move(sinks);
    for (auto& s : extra_sinks) options.sinks.push_back(std::move(s));
    return tensor_throughput::create(std::move(options), std::move(group), device, checks);
  } catch (const error& e) {
    throw e.in_file(config_path);
  }
}

tensor_throughput::tensor_throughput(std::unique_ptr<impl> state) : impl_(std::move(state)) {}
tensor_throughput::~tensor_throughput() = default;

void tensor_throughput::on_microbatch(const tensor_microbatch& batch) noexcept { impl_->on_microbatch(batch); }
void tensor_throughput::on_microbatch(const microbatch_event& event) noexcept { impl_->on_microbatch(event); }
void tensor_throughput::on_log(const log_event& event) noexcept { impl_->on_log(event); }
void tensor_throughput::flush() noexcept { impl_->flush(); }
throughput_plugin& tensor_throughput::plugin() { return impl_->plugin(); }
throughput_health tensor_throughput::health() const { return impl_->health(); }

}  // namespace flopmeter
