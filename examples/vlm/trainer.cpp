// vlm_trainer — the example trainer: a small Qwen-style VLM (examples/vlm/model.h) trained on synthetic
// varlen-packed rows with AdamW, gradient accumulation and Gloo data parallelism, reporting throughput
// through flopmeter loaded as a plugin (dlopen + the C ABI), and measuring what flopmeter costs.
//
//   vlm_trainer --config examples/trainer.toml                 one process
//   examples/launch.sh 2 build/examples/vlm_trainer --config examples/trainer.toml    two ranks
//
// Per step and rank: `microbatches_per_step` packed rows, each forward + backward (loss = summed
// cross-entropy / the row's label tokens / micro-batches), one all-reduce of the flattened gradients (and
// the step's loss sum and label count, so every rank logs the global loss), clipping, AdamW.
// flopmeter sees every micro-batch (document lengths, padding, image grids, samples, loss) and every log
// step (lr, grad norm, data time, forward-backward time).
//
// --device cpu (default): everything on the CPU, flopmeter dlopen()ed through its C ABI with host document
// lengths and image grids. --device cuda: the model and every batch tensor on cuda:LOCAL_RANK, and flopmeter
// driven through its C++ tensor path (flopmeter/torch.h, vlm/tensor_meter.h) with the batch's cu_seqlens and
// grid_thw GPU tensors, over an NCCL group when this build has one (vlm/nccl_group.cpp): a single-rank group
// for one process, else one over the trainer's store. Without NCCL it falls back to a Gloo group with the
// counters on the CPU (one device-to-host copy per micro-batch). The trainer's own gradient all-reduce stays
// on Gloo (gradients go through the host). CUDA is reached only through LibTorch's runtime dispatch, so the
// trainer builds against a CPU-only LibTorch and says so at run time. --flopmeter-path c_abi|tensor overrides
// the choice of path (the tensor path on the CPU runs over a Gloo group, counters on the CPU).
//
// Outputs in output_dir (the trainer chdir()s there once its paths are resolved, so the plugin TOML's
// relative JSONL path lands there too):
//   trainer_rank<r>.jsonl  one line per log interval: this rank's real/device tokens, micro-batches and the
//                          interval length measured by the trainer (an independent check of flopmeter's
//                          tokens/s: sum over ranks of real_tokens / interval_seconds)
//   summary_rank<r>.json   steps, first/final loss, per-step losses, wall time, time inside flopmeter calls
//                          and its fraction of the wall time, flopmeter's health counters
//   summary.json           rank 0's summary
#include <c10/core/impl/DeviceGuardImplInterface.h>
#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>
#include <torch/torch.h>
#if VLM_HAVE_CUDA_ALLOCATOR_STATS
#include <c10/cuda/CUDACachingAllocator.h>
#endif

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "data.h"
#include "dist.h"
#include "flopmeter/model_config.h"
#include "flopmeter_loader.h"
#include "model.h"
#include "output/json_writer.h"
#include "tensor_meter.h"
#include "trainer_config.h"

#ifndef VLM_DEFAULT_FLOPMETER_LIBRARY
#define VLM_DEFAULT_FLOPMETER_LIBRARY "libflopmeter.so"
#endif

namespace {

namespace fs = std::filesystem;
using clock_type = std::chrono::steady_clock;

double seconds_since(clock_type::time_point start) {
  return std::chrono::duration<double>(clock_type::now() - start).count();
}

// Linear warm-up to lr, then cosine decay to min_lr_ratio * lr at the last step.
double learning_rate(const vlm::trainer_config& c, std::int64_t step) {
  if (c.warmup_steps > 0 && step <= c.warmup_steps) {
    return c.lr * static_cast<double>(step) / static_cast<double>(c.warmup_steps);
  }
  const double span = static_cast<double>(std::max<std::int64_t>(1, c.steps - c.warmup_steps));
  const double progress = static_cast<double>(step - c.warmup_steps) / span;
  const double cosine = 0.5 * (1.0 + std::cos(M_PI * std::min(1.0, progress)));
  return c.lr * (c.min_lr_ratio + (1.0 - c.min_lr_ratio) * cosine);
}

// The trainer's JSON files are written with flopmeter's own JSON writer (shortest round-trip numbers, escaped
// strings), so they read exactly like the plugin's JSONL.
using flopmeter::detail::json_number;
using flopmeter::detail::json_string;

// flopmeter's health counters, named as in flopmeter_health_counters (counts far below 2^63).
std::string health_json(const flopmeter_health_counters& h) {
  const auto count = [](std::uint64_t value) { return static_cast<std::int64_t>(value); };
  flopmeter::detail::json_object object(/*spaced=*/false);
  object.integer("bad_microbatches", count(h.bad_microbatches))
      .integer("failed_collectives", count(h.failed_collectives))
      .integer("skipped_intervals", count(h.skipped_intervals))
      .integer("events_after_flush", count(h.events_after_flush))
      .integer("collectives_started", count(h.collectives_started))
      .integer("rejected_logs", count(h.rejected_logs))
      .integer("out_of_step_intervals", count(h.out_of_step_intervals))
      .integer("dropped_records", count(h.dropped_records))
      .integer("reentrant_calls", count(h.reentrant_calls));
  return object.str();
}

// Flattens every parameter's gradient (zeros where a parameter got none, e.g. the vision tower in a step
// without images) plus `extra` values into one tensor.
// The result is on the CPU (the trainer's Gloo group reduces host tensors).
torch::Tensor flatten_gradients(const std::vector<torch::Tensor>& params, const std::vector<double>& extra) {
  std::vector<torch::Tensor> pieces;
  pieces.reserve(params.size() + 1);
  for (const torch::Tensor& p : params) {
    pieces.push_back(p.grad().defined() ? p.grad().reshape({-1}) : torch::zeros({p.numel()}, p.options()));
  }
  pieces.push_back(torch::tensor(std::vector<float>(extra.begin(), extra.end())).to(params.front().device()));
  return torch::cat(pieces).to(torch::kCPU);
}

void unflatten_gradients(const std::vector<torch::Tensor>& params, const torch::Tensor& flat, double scale) {
  torch::NoGradGuard no_grad;
  std::int64_t offset = 0;
  for (const torch::Tensor& p : params) {
    const torch::Tensor slice = (flat.narrow(0, offset, p.numel()).view(p.sizes()) * scale).to(p.device());
    if (p.grad().defined()) {
      p.mutable_grad().copy_(slice);
    } else {
      p.mutable_grad() = slice.clone();
    }
    offset += p.numel();
  }
}

struct interval_counters {
  std::int64_t real_tokens = 0;
  std::int64_t device_tokens = 0;
  std::int64_t microbatches = 0;
  std::int64_t samples = 0;
  std::int64_t label_tokens = 0;
  double loss_sum = 0;
  double data_seconds = 0;
  double forward_backward_seconds = 0;
};

// Everything one rank's run holds: built by the setup steps below, used by the training loop and the summary.
struct trainer_run {
  vlm::trainer_config config;
  vlm::dist_env env;
  std::string tag;      // "[rank r] " before every line this rank prints
  bool chatty = false;  // rank 0 prints the progress lines
  bool on_cuda = false;
  torch::Device device{torch::kCPU};
  flopmeter::model_spec spec;
  vlm::vlm_model model{nullptr};
  std::vector<torch::Tensor> params;
  std::int64_t parameter_count = 0;
  std::unique_ptr<vlm::process_group> group;  // null for one process
  std::unique_ptr<torch::optim::AdamW> optimizer;
  // flopmeter: the dlopen()ed C ABI plugin, or the linked tensor path (at most one of them).
  std::unique_ptr<vlm::plugin_library> meter;
  std::unique_ptr<vlm::tensor_meter> tensor_meter;
};

// One micro-batch's results the step needs.
struct microbatch_result {
  double loss_sum = 0;
  std::int64_t label_tokens = 0;
};

// The device, checked at run time (LibTorch's own dispatch; no CUDA headers here).
torch::Device select_device(trainer_run& r) {
  r.on_cuda = r.config.device == "cuda";
  if (!r.on_cuda) return torch::Device(torch::kCPU);
  if (!torch::cuda::is_available()) {
    throw std::runtime_error("--device cuda: this LibTorch sees no CUDA device (a CPU-only LibTorch, or no GPU "
                             "or driver on this machine)");
  }
  const auto gpus = static_cast<int>(torch::cuda::device_count());
  const torch::Device device(torch::kCUDA, static_cast<c10::DeviceIndex>(r.env.local_rank % gpus));
  // The current device: NCCL, the caching allocator and the current stream follow it.
  c10::impl::getDeviceGuardImpl(c10::DeviceType::CUDA)->setDevice(device);
  return device;
}

// The model from its flopmeter TOML, the same initial weights on every rank, and the optimizer.
void build_model_and_optimizer(trainer_run& r) {
  r.spec = flopmeter::load_model_spec(r.config.model_config);
  torch::manual_seed(r.config.data.seed);
  r.model = vlm::vlm_model(r.spec);
  r.model->to(r.device);
  const auto frozen = [&r](const char* part) {
    return std::find(r.config.frozen.begin(), r.config.frozen.end(), part) != r.config.frozen.end();
  };
  r.model->freeze(frozen("vision"), frozen("merger"), frozen("text") || r.config.lora_rank > 0);
  if (r.config.lora_rank > 0 && r.model->add_lora(r.config.lora_rank, r.config.lora_targets) == 0) {
    throw std::runtime_error("--lora-targets: the model has none of these projections");
  }
  flopmeter::recompute_options recompute;
  recompute.policy = flopmeter::parse_recompute_policy(r.config.recompute, "--recompute");
  recompute.every = r.config.recompute_every;
  recompute.vision = r.config.recompute_vision;
  r.model->set_recompute(recompute);
  r.params = r.model->parameters();
  for (const torch::Tensor& p : r.params) r.parameter_count += p.numel();

  if (r.env.distributed) {
    r.group = vlm::process_group::create(r.env, std::chrono::seconds(60));
    // Same seed gives the same initial weights; the broadcast makes it a guarantee.
    torch::NoGradGuard no_grad;
    for (torch::Tensor& p : r.params) {
      torch::Tensor copy = p.detach().to(torch::kCPU).clone();
      r.group->broadcast(copy, 0);
      p.copy_(copy.to(r.device));
    }
  }
  // Only the weights that train get gradients, the gradient all-reduce and the optimizer (a frozen weight
  // must not move, not even by weight decay).
  std::vector<torch::Tensor> trainable;
  for (const torch::Tensor& p : r.params) {
    if (p.requires_grad()) trainable.push_back(p);
  }
  r.params = std::move(trainable);
  r.optimizer = std::make_unique<torch::optim::AdamW>(
      r.params, torch::optim::AdamWOptions(r.config.lr)
                    .betas({r.config.beta1, r.config.beta2})
                    .weight_decay(r.config.weight_decay));
  if (r.chatty) {
    std::cout << r.tag << "model " << r.spec.name << " (" << r.config.model_config << "): " << r.parameter_count
              << " parameters; world size " << r.env.world_size << "; " << r.config.steps << " steps x "
              << r.config.microbatches_per_step << " micro-batches of " << r.config.data.row_length
              << " tokens per rank on " << r.device.str() << std::endl;
  }
}

// flopmeter on the CPU: loaded like a framework loads a plugin. On CUDA: the linked library's tensor path.
// The trainer works inside output_dir from here on.
void attach_flopmeter(trainer_run& r) {
  const vlm::trainer_config& config = r.config;
  const bool tensor_path = config.flopmeter_path.empty() ? r.on_cuda : config.flopmeter_path == "tensor";
  if (config.flopmeter_enabled && !tensor_path) r.meter = vlm::plugin_library::load(config.flopmeter_library);
  fs::current_path(config.output_dir);
  if (r.meter) {
    r.meter->create(config.flopmeter_config, r.env.distributed, config.flopmeter_port_offset);
    if (r.chatty) {
      std::cout << r.tag << "flopmeter " << r.meter->path() << " (C ABI " << r.meter->abi_version()
                << "), plugin config " << config.flopmeter_config << std::endl;
    }
  }
  if (!config.flopmeter_enabled || !tensor_path) return;
  std::string why_not;
  c10::intrusive_ptr<c10d::ProcessGroup> meter_group;
  if (r.on_cuda) meter_group = vlm::make_nccl_group(r.env, r.group.get(), std::chrono::seconds(60), why_not);
  torch::Device counters = r.device;
  if (!meter_group) {
    counters = torch::Device(torch::kCPU);
    meter_group = r.group ? r.group->c10d_group() : vlm::make_local_gloo_group(std::chrono::seconds(60));
    if (r.on_cuda) {
      std::cout << r.tag << "note: no NCCL group (" << why_not << "); flopmeter's counters live on the CPU over "
                << "Gloo, so each micro-batch's counts are copied from the GPU (a sync per micro-batch)"
                << std::endl;
    }
  }
  r.tensor_meter = vlm::tensor_meter::create(config.flopmeter_config, std::move(meter_group), counters);
  if (r.chatty) {
    std::cout << r.tag << "flopmeter " << r.tensor_meter->description() << ", plugin config "
              << config.flopmeter_config << std::endl;
  }
}

// Hands one micro-batch to flopmeter: host lengths and grids through the C ABI, or the batch's own
// description tensors (on the device with the batch: the tensor path copies them to the host asynchronously).
void report_microbatch(trainer_run& r, const vlm::packed_row& row, const vlm::model_batch& batch,
                       const microbatch_result& result, std::vector<flopmeter_grid>& grids) {
  if (r.meter) {
    grids.clear();
    for (const vlm::image_item& image : row.images) grids.push_back({image.t, image.h, image.w});
    flopmeter_microbatch event{};
    event.struct_size = sizeof(event);
    event.document_lengths = row.document_lengths.data();
    event.num_document_lengths = row.document_lengths.size();
    event.padding_tokens = row.padding_tokens;
    event.grids = grids.empty() ? nullptr : grids.data();
    event.num_grids = grids.size();
    event.samples = static_cast<std::int64_t>(row.document_lengths.size());
    event.has_loss = 1;
    event.loss_sum = result.loss_sum;
    event.label_tokens = result.label_tokens;
    r.meter->on_microbatch(event);
  }
  if (r.tensor_meter) {
    flopmeter::tensor_microbatch event;
    event.cu_seqlens = batch.cu_seqlens;
    event.grid_thw = batch.grid_thw;
    event.padding_tokens = row.padding_tokens;
    event.samples = static_cast<std::int64_t>(row.document_lengths.size());
    event.loss_sum = result.loss_sum;
    event.label_tokens = result.label_tokens;
    r.tensor_meter->on_microbatch(event);
  }
}

// One micro-batch: make the row, forward + backward (gradients accumulate), count it, report it.
microbatch_result run_microbatch(trainer_run& r, std::int64_t step, std::int64_t micro, interval_counters& interval,
                                 std::vector<flopmeter_grid>& grids) {
  auto t0 = clock_type::now();
  const vlm::packed_row row = vlm::make_row(r.config.data, r.spec, r.env.rank, step, micro);
  const vlm::model_batch batch = vlm::to_device(vlm::to_model_batch(row), r.device);
  interval.data_seconds += seconds_since(t0);

  t0 = clock_type::now();
  const torch::Tensor loss_sum = r.model->forward(batch);
  microbatch_result result;
  result.label_tokens = row.label_tokens();
  // With a frozen decoder, a row without images has nothing trainable upstream of its loss: no backward.
  if (loss_sum.requires_grad()) {
    (loss_sum / static_cast<double>(std::max<std::int64_t>(1, result.label_tokens)) /
     static_cast<double>(r.config.microbatches_per_step))
        .backward();
  }
  interval.forward_backward_seconds += seconds_since(t0);
  result.loss_sum = loss_sum.item<double>();

  interval.real_tokens += row.real_tokens();
  interval.device_tokens += row.real_tokens() + row.padding_tokens;
  interval.microbatches += 1;
  interval.samples += static_cast<std::int64_t>(row.document_lengths.size());
  interval.label_tokens += result.label_tokens;
  interval.loss_sum += result.loss_sum;
  report_microbatch(r, row, batch, result, grids);
  return result;
}

// The end of a step: one all-reduce of the gradients (averaged over ranks) plus the step's loss sum and label
// count, clipping, AdamW. Returns the gradient norm; `loss_sum` and `labels` become the global ones.
double finish_step(trainer_run& r, double& loss_sum, double& labels) {
  if (r.group) {
    torch::Tensor flat = flatten_gradients(r.params, {loss_sum, labels});  // on the CPU
    r.group->allreduce_sum(flat);
    unflatten_gradients(r.params, flat, 1.0 / r.env.world_size);
    const auto tail = flat.narrow(0, flat.numel() - 2, 2);
    loss_sum = tail[0].item<double>();
    labels = tail[1].item<double>();
  }
  const double grad_norm = r.config.grad_clip > 0 ? torch::nn::utils::clip_grad_norm_(r.params, r.config.grad_clip)
                                                  : torch::nn::utils::clip_grad_norm_(r.params, 1e30);
  r.optimizer->step();
  return grad_norm;
}

// This rank's allocated and reserved device-memory peaks since the previous call (LibTorch's caching
// allocator, then reset), or nothing on the CPU or with a LibTorch without CUDA.
struct memory_peaks {
  std::int64_t allocated = 0, reserved = 0;
};
std::optional<memory_peaks> take_memory_peaks(const trainer_run& r) {
#if VLM_HAVE_CUDA_ALLOCATOR_STATS
  if (r.on_cuda) {
    namespace allocator = c10::cuda::CUDACachingAllocator;
    const auto device = static_cast<int>(r.device.index());
    const allocator::DeviceStats stats = allocator::getDeviceStats(device);
    constexpr auto kAll = static_cast<std::size_t>(allocator::StatType::AGGREGATE);
    const memory_peaks peaks{stats.allocated_bytes[kAll].peak, stats.reserved_bytes[kAll].peak};
    allocator::resetPeakStats(device);
    return peaks;
  }
#endif
  (void)r;
  return std::nullopt;
}

// A log step: flopmeter's on_log, this rank's JSONL line and rank 0's progress line.
void log_interval(trainer_run& r, std::int64_t step, double lr, double grad_norm, double step_loss,
                  const interval_counters& interval, double interval_seconds, std::ofstream& rank_log) {
  const std::optional<memory_peaks> peaks = take_memory_peaks(r);
  if (r.meter) {
    flopmeter_log log{};
    log.struct_size = sizeof(log);
    log.set_fields = FLOPMETER_LOG_LEARNING_RATE | FLOPMETER_LOG_GRAD_NORM | FLOPMETER_LOG_DATA_TIME |
                     FLOPMETER_LOG_FORWARD_BACKWARD_TIME;
    log.step = step;
    log.learning_rate = lr;
    log.grad_norm = grad_norm;
    log.data_time_seconds = interval.data_seconds;
    log.forward_backward_time_seconds = interval.forward_backward_seconds;
    if (peaks) {
      log.set_fields |= FLOPMETER_LOG_PEAK_MEMORY | FLOPMETER_LOG_PEAK_RESERVED_MEMORY;
      log.peak_memory_bytes = peaks->allocated;
      log.peak_reserved_memory_bytes = peaks->reserved;
    }
    r.meter->on_log(log);
  }
  if (r.tensor_meter) {
    flopmeter::log_event log;
    log.step = step;
    log.learning_rate = lr;
    log.grad_norm = grad_norm;
    log.data_time = std::chrono::duration<double>(interval.data_seconds);
    log.forward_backward_time = std::chrono::duration<double>(interval.forward_backward_seconds);
    if (peaks) {
      log.peak_memory_bytes = peaks->allocated;
      log.peak_reserved_memory_bytes = peaks->reserved;
    }
    r.tensor_meter->on_log(log);
  }
  rank_log << "{\"step\":" << step << ",\"rank\":" << r.env.rank << ",\"world_size\":" << r.env.world_size
           << ",\"interval_seconds\":" << json_number(interval_seconds)
           << ",\"real_tokens\":" << interval.real_tokens << ",\"device_tokens\":" << interval.device_tokens
           << ",\"microbatches\":" << interval.microbatches << ",\"samples\":" << interval.samples
           << ",\"label_tokens\":" << interval.label_tokens << ",\"loss_sum\":" << json_number(interval.loss_sum)
           << ",\"tokens_per_second\":" << json_number(static_cast<double>(interval.real_tokens) / interval_seconds)
           << ",\"global_step_loss\":" << json_number(step_loss) << ",\"lr\":" << json_number(lr)
           << ",\"grad_norm\":" << json_number(grad_norm) << "}\n"
           << std::flush;
  if (r.chatty) {
    std::printf("%sstep %lld/%lld  loss %.4f  lr %.2e  grad_norm %.3f  rank-0 tokens/s %.0f\n", r.tag.c_str(),
                static_cast<long long>(step), static_cast<long long>(r.config.steps), step_loss, lr, grad_norm,
                static_cast<double>(interval.real_tokens) / interval_seconds);
    std::fflush(stdout);
  }
}

// The training loop: steps of micro-batches with gradient accumulation, a log every log_interval_steps.
// Returns the global loss of every step.
std::vector<double> train(trainer_run& r) {
  std::ofstream rank_log("trainer_rank" + std::to_string(r.env.rank) + ".jsonl", std::ios::trunc);
  auto interval_start = clock_type::now();
  interval_counters interval;
  std::vector<double> losses;
  std::vector<flopmeter_grid> grids;
  for (std::int64_t step = 1; step <= r.config.steps; ++step) {
    const double lr = learning_rate(r.config, step);
    for (auto& group_options : r.optimizer->param_groups()) {
      static_cast<torch::optim::AdamWOptions&>(group_options.options()).lr(lr);
    }
    r.optimizer->zero_grad();
    double step_loss_sum = 0;
    double step_labels = 0;
    for (std::int64_t micro = 0; micro < r.config.microbatches_per_step; ++micro) {
      const microbatch_result result = run_microbatch(r, step, micro, interval, grids);
      step_loss_sum += result.loss_sum;
      step_labels += static_cast<double>(result.label_tokens);
    }
    const double grad_norm = finish_step(r, step_loss_sum, step_labels);
    const double step_loss = step_loss_sum / std::max(1.0, step_labels);
    losses.push_back(step_loss);

    if (step % r.config.log_interval_steps == 0 || step == r.config.steps) {
      // The trainer's own interval, read just before on_log (where flopmeter reads its clock).
      const auto now = clock_type::now();
      const double interval_seconds = std::chrono::duration<double>(now - interval_start).count();
      interval_start = now;
      log_interval(r, step, lr, grad_norm, step_loss, interval, interval_seconds, rank_log);
      interval = interval_counters{};
    }
  }
  return losses;
}

// After the last step: flush and detach flopmeter, wait for every rank, write the summaries and print the
// closing lines.
void finish_and_summarize(trainer_run& r, const std::vector<double>& losses, clock_type::time_point wall_start) {
  flopmeter_health_counters health{};
  if (r.meter) {
    r.meter->flush();
    r.meter->health(health);
  }
  if (r.tensor_meter) {
    r.tensor_meter->flush();
    health = r.tensor_meter->health();
  }
  const double wall_seconds = seconds_since(wall_start);
  if (r.meter) r.meter->destroy();
  const bool metered = r.meter || r.tensor_meter;
  const std::string meter_path = r.meter ? "c_abi" : r.tensor_meter ? "tensor" : "";
  const std::string meter_name = r.meter ? r.meter->path() : r.tensor_meter ? r.tensor_meter->description() : "";
  const double inside = r.meter ? r.meter->event_seconds() : r.tensor_meter ? r.tensor_meter->event_seconds() : 0.0;
  const std::int64_t event_calls =
      r.meter ? r.meter->event_calls() : r.tensor_meter ? r.tensor_meter->event_calls() : 0;
  const double setup_seconds =
      r.meter ? r.meter->setup_seconds() : r.tensor_meter ? r.tensor_meter->setup_seconds() : 0.0;
  r.tensor_meter.reset();  // its group goes before the trainer's barrier
  if (r.group) r.group->barrier();  // nobody leaves (and takes its store server with it) while others still talk

  const double fraction = inside / wall_seconds;
  std::ostringstream summary;
  summary << "{\"rank\":" << r.env.rank << ",\"world_size\":" << r.env.world_size << ",\"steps\":" << r.config.steps
          << ",\"microbatches_per_step\":" << r.config.microbatches_per_step
          << ",\"first_loss\":" << json_number(losses.front()) << ",\"final_loss\":" << json_number(losses.back())
          << ",\"losses\":[";
  for (std::size_t i = 0; i < losses.size(); ++i) summary << (i ? "," : "") << json_number(losses[i]);
  summary << "],\"wall_seconds\":" << json_number(wall_seconds) << ",\"device\":" << json_string(r.device.str())
          << ",\"flopmeter_enabled\":" << (metered ? "true" : "false")
          << ",\"flopmeter_path\":" << json_string(meter_path) << ",\"flopmeter_library\":" << json_string(meter_name)
          << ",\"flopmeter_event_calls\":" << event_calls << ",\"flopmeter_event_seconds\":" << json_number(inside)
          << ",\"flopmeter_setup_seconds\":" << json_number(setup_seconds)
          << ",\"flopmeter_overhead_fraction\":" << json_number(fraction)
          << ",\"flopmeter_overhead_percent\":" << json_number(100.0 * fraction)
          << ",\"flopmeter_health\":" << health_json(health) << "}\n";
  std::ofstream("summary_rank" + std::to_string(r.env.rank) + ".json", std::ios::trunc) << summary.str();
  if (r.env.rank == 0) std::ofstream("summary.json", std::ios::trunc) << summary.str();

  std::printf("%sloss %.4f -> %.4f over %lld steps in %.2f s\n", r.tag.c_str(), losses.front(), losses.back(),
              static_cast<long long>(r.config.steps), wall_seconds);
  if (metered) {
    std::printf("%sflopmeter overhead: %.4f%% of wall time (%.3f ms in %lld calls; setup %.1f ms)\n", r.tag.c_str(),
                100.0 * fraction, 1e3 * inside, static_cast<long long>(event_calls), 1e3 * setup_seconds);
  }
  if (r.chatty) {
    std::printf("%soutputs in %s: summary.json, trainer_rank*.jsonl", r.tag.c_str(), r.config.output_dir.c_str());
    for (const auto& entry : fs::directory_iterator(".")) {
      const std::string name = entry.path().filename().string();
      if (entry.path().extension() == ".jsonl" && name.rfind("trainer_rank", 0) != 0) {
        std::printf(", %s (flopmeter JSONL)", (fs::path(r.config.output_dir) / name).string().c_str());
      }
    }
    std::printf("\n");
  }
  std::fflush(stdout);
}

int run(int argc, char** argv) {
  bool help = false;
  const std::string default_config = (fs::path(__FILE__).parent_path().parent_path() / "trainer.toml").string();
  trainer_run r;
  r.config = vlm::parse_command_line(argc, argv, default_config, VLM_DEFAULT_FLOPMETER_LIBRARY, help);
  if (help) {
    std::cout << vlm::trainer_usage(argv[0]);
    return 0;
  }
  r.env = vlm::read_dist_env();
  r.tag = "[rank " + std::to_string(r.env.rank) + "] ";
  r.chatty = r.env.rank == 0;
  torch::set_num_threads(static_cast<int>(r.config.threads));
  r.device = select_device(r);
  fs::create_directories(r.config.output_dir);
  build_model_and_optimizer(r);
  attach_flopmeter(r);
  const auto wall_start = clock_type::now();
  const std::vector<double> losses = train(r);
  finish_and_summarize(r, losses, wall_start);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return run(argc, argv);
  } catch (const c10::Error& e) {
    std::cerr << "vlm_trainer: " << e.what_without_backtrace() << std::endl;
  } catch (const std::exception& e) {
    std::cerr << "vlm_trainer: " << e.what() << std::endl;
  }
  return 1;
}
