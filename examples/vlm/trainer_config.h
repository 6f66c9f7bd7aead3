// examples/vlm/trainer_config.h — the example trainer's own settings: examples/trainer.toml plus command-line
// overrides. (flopmeter's settings live in the plugin TOML the trainer hands to flopmeter unchanged.)
//
// Paths inside the TOML file are relative to that file's directory; paths given on the command line are
// relative to the working directory; `output_dir` is relative to the working directory either way. Errors
// throw std::runtime_error naming file:line:col and the key. Thread-safety: plain values and pure functions.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "data.h"

namespace vlm {

struct trainer_config {
  std::string source_path;            // the TOML file read ("" when none)
  // [run]
  std::int64_t steps = 30;                  // optimizer steps
  std::int64_t microbatches_per_step = 2;   // gradient accumulation: packed rows per optimizer step and rank
  std::int64_t log_interval_steps = 5;      // flopmeter on_log (and the trainer's log line) every N steps
  std::int64_t threads = 1;                 // LibTorch intra-op threads per rank
  std::string output_dir = "out/vlm_trainer";  // per-rank logs, the summary and (via the plugin TOML) JSONL
  // "cpu" or "cuda". cpu: flopmeter is dlopen()ed through its C ABI and sees host document lengths. cuda: the
  // model and every batch tensor live on the GPU (cuda:LOCAL_RANK), and flopmeter is fed through its C++
  // tensor path (flopmeter/torch.h) with the batch's cu_seqlens and grid_thw GPU tensors.
  std::string device = "cpu";
  // [data] (seed included)
  data_options data;
  // [model]
  std::string model_config;                 // flopmeter model TOML the model is built from (absolute)
  // Parts whose weights do not train: any of "vision", "merger", "text" (--frozen vision,merger). Give
  // flopmeter the same list in the plugin file's [training] frozen, so that it bills the same regime.
  std::vector<std::string> frozen;
  // LoRA (--lora-rank R --lora-targets q_proj,v_proj,...): adapters of rank R on the named decoder projections,
  // the decoder's base weights frozen. 0: none. The plugin file's [training] lora_rank / lora_targets must match.
  std::int64_t lora_rank = 0;
  std::vector<std::string> lora_targets;
  // Activation checkpointing (--recompute none|full|full_early_stop|selective|op [--recompute-every K]
  // [--recompute-vision]): the
  // model's blocks checkpointed for real (checkpoint.h). The plugin file's [training] recompute,
  // recompute_every and recompute_vision must match, so that flopmeter bills the same hardware FLOPs.
  std::string recompute = "none";
  std::int64_t recompute_every = 0;
  bool recompute_vision = false;
  // [optim] AdamW with linear warm-up then cosine decay to min_lr_ratio * lr.
  double lr = 3e-3;
  double min_lr_ratio = 0.1;
  std::int64_t warmup_steps = 3;
  double weight_decay = 0.01;
  double beta1 = 0.9;
  double beta2 = 0.95;
  double grad_clip = 1.0;                   // max global grad norm; <= 0 disables clipping
  // [flopmeter]
  bool flopmeter_enabled = true;
  std::string flopmeter_library;            // libflopmeter.so to dlopen; "" = the build's own
  std::string flopmeter_config;             // plugin TOML (plugin_configs/SCHEMA.md), absolute
  int flopmeter_port_offset = 1;            // flopmeter's own store: MASTER_PORT + this (multi-process only)
  // How flopmeter is fed: "c_abi" (dlopen, host lengths) or "tensor" (the linked library's tensor path with the
  // batch's cu_seqlens / grid_thw tensors). "" (default): c_abi on the CPU, tensor on CUDA. --flopmeter-path.
  std::string flopmeter_path;
};

// Reads a trainer TOML. Throws std::runtime_error ("file:line:col: key 'run.steps': ...").
trainer_config load_trainer_config(const std::string& path);

// The usage text for --help.
std::string trainer_usage(const char* program);

// Parses the command line: --config PATH first (else `default_config`), then the overrides
// (--steps N, --microbatches N, --log-interval N, --row-length N, --seed N, --threads N, --lr X,
// --output-dir DIR, --device cpu|cuda, --model-config PATH, --frozen PARTS, --lora-rank R, --lora-targets NAMES,
// --recompute POLICY, --recompute-every K, --recompute-vision, --flopmeter-library PATH, --flopmeter-config PATH,
// --flopmeter-path c_abi|tensor, --no-flopmeter).
// The library path precedence is --flopmeter-library > $FLOPMETER_LIBRARY > [flopmeter].library > the
// build's libflopmeter.so (`default_library`). Sets `help` and returns early on --help. Throws
// std::runtime_error on a malformed command line.
trainer_config parse_command_line(int argc, char** argv, const std::string& default_config,
                                  const std::string& default_library, bool& help);

}  // namespace vlm
