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

#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
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

int run(int argc, char** argv) {
  bool help = false;
  const std::string default_config = (fs::path(__FILE__).parent_path().parent_path() / "trainer.toml").string();
  const vlm::trainer_config config = vlm::parse_command_line(argc, argv, default_config, VLM_DEFAULT_FLOPMETER_LIBRARY, help);
  if (help) {
    std::cout << vlm::trainer_usage(argv[0]);
    return 0;
  }
  const vlm::dist_env env = vlm::read_dist_env();
  const std::string tag = "[rank " + std::to_string(env.rank) + "] ";
  const bool chatty = env.rank == 0;
  torch::set_num_threads(static_cast<int>(config.threads));

  // The device, checked at run time (LibTorch's own dispatch; no CUDA headers here).
  const bool on_cuda = config.device == "cuda";
  torch::Device device(torch::kCPU);
  if (on_cuda) {
    if (!torch::cuda::is_available()) {
      throw std::runtime_error("--device cuda: this LibTorch sees no CUDA device (a CPU-only LibTorch, or no GPU "
                               "or driver on this machine)");
    }
    const auto gpus = static_cast<int>(torch::cuda::device_count());
    device = torch::Device(torch::kCUDA, static_cast<c10::DeviceIndex>(env.local_rank % gpus));
    // The current device: NCCL, the caching allocator and the current stream follow it.
    c10::impl::getDeviceGuardImpl(c10::DeviceType::CUDA)->setDevice(device);
  }

  fs::create_directories(config.output_dir);
  const flopmeter::model_spec spec = flopmeter::load_model_spec(config.model_config);
  torch::manual_seed(config.data.seed);
  vlm::vlm_model model(spec);
  model->to(device);
  std::vector<torch::Tensor> params = model->parameters();
  std::int64_t parameter_count = 0;
  for (const torch::Tensor& p : params) parameter_count += p.numel();

  std::unique_ptr<vlm::process_group> group;
  if (env.distributed) {
    group = vlm::process_group::create(env, std::chrono::seconds(60));
    // Same seed gives the same initial weights; the broadcast makes it a guarantee.
    torch::NoGradGuard no_grad;
    for (torch::Tensor& p : params) {
      torch::Tensor copy = p.detach().to(torch::kCPU).clone();
      group->broadcast(copy, 0);
      p.copy_(copy.to(device));
    }
  }
  torch::optim::AdamW optimizer(params, torch::optim::AdamWOptions(config.lr)
                                            .betas({config.beta1, config.beta2})
                                            .weight_decay(config.weight_decay));
  if (chatty) {
    std::cout << tag << "model " << spec.name << " (" << config.model_config << "): " << parameter_count
              << " parameters; world size " << env.world_size << "; " << config.steps << " steps x "
              << config.microbatches_per_step << " micro-batches of " << config.data.row_length << " tokens per rank"
              << " on " << device.str() << std::endl;
  }

  // flopmeter on the CPU: loaded like a framework loads a plugin. On CUDA: the linked library's tensor path.
  // The trainer works inside output_dir from here on.
  std::unique_ptr<vlm::plugin_library> meter;
  std::unique_ptr<vlm::tensor_meter> tensor_meter;
  const bool tensor_path = config.flopmeter_path.empty() ? on_cuda : config.flopmeter_path == "tensor";
  if (config.flopmeter_enabled && !tensor_path) meter = vlm::plugin_library::load(config.flopmeter_library);
  fs::current_path(config.output_dir);
  if (meter) {
    meter->create(config.flopmeter_config, env.distributed, config.flopmeter_port_offset);
    if (chatty) {
      std::cout << tag << "flopmeter " << meter->path() << " (C ABI " << meter->abi_version() << "), plugin config "
                << config.flopmeter_config << std::endl;
    }
  }
  if (config.flopmeter_enabled && tensor_path) {
    std::string why_not;
    c10::intrusive_ptr<c10d::ProcessGroup> meter_group;
    if (on_cuda) meter_group = vlm::make_nccl_group(env, group.get(), std::chrono::seconds(60), why_not);
    torch::Device counters = device;
    if (!meter_group) {
      counters = torch::Device(torch::kCPU);
      meter_group = group ? group->c10d_group() : vlm::make_local_gloo_group(std::chrono::seconds(60));
      if (on_cuda) {
        std::cout << tag << "note: no NCCL group (" << why_not << "); flopmeter's counters live on the CPU over "
                  << "Gloo, so each micro-batch's counts are copied from the GPU (a sync per micro-batch)"
                  << std::endl;
      }
    }
    tensor_meter = vlm::tensor_meter::create(config.flopmeter_config, std::move(meter_group), counters);
    if (chatty) {
      std::cout << tag << "flopmeter " << tensor_meter->description() << ", plugin config " << config.flopmeter_config
                << std::endl;
    }
  }

  std::ofstream rank_log("trainer_rank" + std::to_string(env.rank) + ".jsonl", std::ios::trunc);
  const auto wall_start = clock_type::now();
  auto interval_start = wall_start;
  interval_counters interval;
  std::vector<double> losses;
  std::vector<flopmeter_grid> grids;

  for (std::int64_t step = 1; step <= config.steps; ++step) {
    const double lr = learning_rate(config, step);
    for (auto& group_options : optimizer.param_groups()) {
      static_cast<torch::optim::AdamWOptions&>(group_options.options()).lr(lr);
    }
    optimizer.zero_grad();
    double step_loss_sum = 0;
    double step_labels = 0;
    for (std::int64_t micro = 0; micro < config.microbatches_per_step; ++micro) {
      auto t0 = clock_type::now();
      const vlm::packed_row row = vlm::make_row(config.data, spec, env.rank, step, micro);
      const vlm::model_batch batch = vlm::to_device(vlm::to_model_batch(row), device);
      interval.data_seconds += seconds_since(t0);

      t0 = clock_type::now();
      const torch::Tensor loss_sum = model->forward(batch);
      const std::int64_t labels = row.label_tokens();
      (loss_sum / static_cast<double>(std::max<std::int64_t>(1, labels)) /
       static_cast<double>(config.microbatches_per_step))
          .backward();
      interval.forward_backward_seconds += seconds_since(t0);
      const double loss_value = loss_sum.item<double>();
      step_loss_sum += loss_value;
      step_labels += static_cast<double>(labels);

      interval.real_tokens += row.real_tokens();
      interval.device_tokens += row.real_tokens() + row.padding_tokens;
      interval.microbatches += 1;
      interval.samples += static_cast<std::int64_t>(row.document_lengths.size());
      interval.label_tokens += labels;
      interval.loss_sum += loss_value;
      if (meter) {
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
        event.loss_sum = loss_value;
        event.label_tokens = labels;
        meter->on_microbatch(event);
      }
      if (tensor_meter) {
        // The batch's own description tensors, already on the GPU with the batch: no host copy of them.
        flopmeter::tensor_microbatch event;
        event.cu_seqlens = batch.cu_seqlens;
        event.grid_thw = batch.grid_thw;
        event.padding_tokens = row.padding_tokens;
        event.samples = static_cast<std::int64_t>(row.document_lengths.size());
        event.loss_sum = loss_value;
        event.label_tokens = labels;
        tensor_meter->on_microbatch(event);
      }
    }

    // One all-reduce per step: the gradients (averaged over ranks) plus the step's loss sum and label count.
    if (group) {
      torch::Tensor flat = flatten_gradients(params, {step_loss_sum, step_labels});  // on the CPU
      group->allreduce_sum(flat);
      unflatten_gradients(params, flat, 1.0 / env.world_size);
      const auto tail = flat.narrow(0, flat.numel() - 2, 2);
      step_loss_sum = tail[0].item<double>();
      step_labels = tail[1].item<double>();
    }
    const double grad_norm = config.grad_clip > 0
                                 ? torch::nn::utils::clip_grad_norm_(params, config.grad_clip)
                                 : torch::nn::utils::clip_grad_norm_(params, 1e30);
    optimizer.step();
    const double step_loss = step_loss_sum / std::max(1.0, step_labels);
    losses.push_back(step_loss);

    if (step % config.log_interval_steps == 0 || step == config.steps) {
      // The trainer's own interval, read just before on_log (where flopmeter reads its clock).
      const auto now = clock_type::now();
      const double interval_seconds = std::chrono::duration<double>(now - interval_start).count();
      interval_start = now;
      if (meter) {
        flopmeter_log log{};
        log.struct_size = sizeof(log);
        log.set_fields = FLOPMETER_LOG_LEARNING_RATE | FLOPMETER_LOG_GRAD_NORM | FLOPMETER_LOG_DATA_TIME |
                         FLOPMETER_LOG_FORWARD_BACKWARD_TIME;
        log.step = step;
        log.learning_rate = lr;
        log.grad_norm = grad_norm;
        log.data_time_seconds = interval.data_seconds;
        log.forward_backward_time_seconds = interval.forward_backward_seconds;
        meter->on_log(log);
      }
      if (tensor_meter) {
        flopmeter::log_event log;
        log.step = step;
        log.learning_rate = lr;
        log.grad_norm = grad_norm;
        log.data_time = std::chrono::duration<double>(interval.data_seconds);
        log.forward_backward_time = std::chrono::duration<double>(interval.forward_backward_seconds);
        tensor_meter->on_log(log);
      }
      rank_log << "{\"step\":" << step << ",\"rank\":" << env.rank << ",\"world_size\":" << env.world_size
               << ",\"interval_seconds\":" << json_number(interval_seconds)
               << ",\"real_tokens\":" << interval.real_tokens << ",\"device_tokens\":" << interval.device_tokens
               << ",\"microbatches\":" << interval.microbatches << ",\"samples\":" << interval.samples
               << ",\"label_tokens\":" << interval.label_tokens << ",\"loss_sum\":" << json_number(interval.loss_sum)
               << ",\"tokens_per_second\":" << json_number(static_cast<double>(interval.real_tokens) / interval_seconds)
               << ",\"global_step_loss\":" << json_number(step_loss) << ",\"lr\":" << json_number(lr)
               << ",\"grad_norm\":" << json_number(grad_norm) << "}\n"
               << std::flush;
      if (chatty) {
        std::printf("%sstep %lld/%lld  loss %.4f  lr %.2e  grad_norm %.3f  rank-0 tokens/s %.0f\n", tag.c_str(),
                    static_cast<long long>(step), static_cast<long long>(config.steps), step_loss, lr, grad_norm,
                    static_cast<double>(interval.real_tokens) / interval_seconds);
        std::fflush(stdout);
      }
      interval = interval_counters{};
    }
  }

  std::uint64_t health[5] = {0, 0, 0, 0, 0};
  if (meter) {
    meter->flush();
    meter->health(health);
  }
  if (tensor_meter) {
    tensor_meter->flush();
    tensor_meter->health(health);
  }
  const double wall_seconds = seconds_since(wall_start);
  if (meter) meter->destroy();
  const bool metered = meter || tensor_meter;
  const std::string meter_path = meter ? "c_abi" : tensor_meter ? "tensor" : "";
  const std::string meter_name = meter ? meter->path() : tensor_meter ? tensor_meter->description() : "";
  const double inside = meter ? meter->event_seconds() : tensor_meter ? tensor_meter->event_seconds() : 0.0;
  const std::int64_t event_calls = meter ? meter->event_calls() : tensor_meter ? tensor_meter->event_calls() : 0;
  const double setup_seconds = meter ? meter->setup_seconds() : tensor_meter ? tensor_meter->setup_seconds() : 0.0;
  tensor_meter.reset();  // its group goes before the trainer's barrier
  if (group) group->barrier();  // nobody leaves (and takes its store server with it) while others still talk

  const double fraction = inside / wall_seconds;
  std::ostringstream summary;
  summary << "{\"rank\":" << env.rank << ",\"world_size\":" << env.world_size << ",\"steps\":" << config.steps
          << ",\"microbatches_per_step\":" << config.microbatches_per_step
          << ",\"first_loss\":" << json_number(losses.front()) << ",\"final_loss\":" << json_number(losses.back())
          << ",\"losses\":[";
  for (std::size_t i = 0; i < losses.size(); ++i) summary << (i ? "," : "") << json_number(losses[i]);
  summary << "],\"wall_seconds\":" << json_number(wall_seconds)
          << ",\"device\":" << json_string(device.str())
          << ",\"flopmeter_enabled\":" << (metered ? "true" : "false")
          << ",\"flopmeter_path\":" << json_string(meter_path)
          << ",\"flopmeter_library\":" << json_string(meter_name)
          << ",\"flopmeter_event_calls\":" << event_calls
          << ",\"flopmeter_event_seconds\":" << json_number(inside)
          << ",\"flopmeter_setup_seconds\":" << json_number(setup_seconds)
          << ",\"flopmeter_overhead_fraction\":" << json_number(fraction)
          << ",\"flopmeter_overhead_percent\":" << json_number(100.0 * fraction)
          << ",\"flopmeter_health\":{\"bad_microbatches\":" << health[0] << ",\"failed_collectives\":" << health[1]
          << ",\"skipped_intervals\":" << health[2] << ",\"events_after_flush\":" << health[3]
          << ",\"collectives_started\":" << health[4] << "}}\n";
  std::ofstream("summary_rank" + std::to_string(env.rank) + ".json", std::ios::trunc) << summary.str();
  if (env.rank == 0) std::ofstream("summary.json", std::ios::trunc) << summary.str();

  std::printf("%sloss %.4f -> %.4f over %lld steps in %.2f s\n", tag.c_str(), losses.front(), losses.back(),
              static_cast<long long>(config.steps), wall_seconds);
  if (metered) {
    std::printf("%sflopmeter overhead: %.4f%% of wall time (%.3f ms in %lld calls; setup %.1f ms)\n", tag.c_str(),
                100.0 * fraction, 1e3 * inside, static_cast<long long>(event_calls), 1e3 * setup_seconds);
  }
  if (chatty) {
    std::printf("%soutputs in %s: summary.json, trainer_rank*.jsonl", tag.c_str(), config.output_dir.c_str());
    for (const auto& entry : fs::directory_iterator(".")) {
      const std::string name = entry.path().filename().string();
      if (entry.path().extension() == ".jsonl" && name.rfind("trainer_rank", 0) != 0) {
        std::printf(", %s (flopmeter JSONL)", (fs::path(config.output_dir) / name).string().c_str());
      }
    }
    std::printf("\n");
  }
  std::fflush(stdout);
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
