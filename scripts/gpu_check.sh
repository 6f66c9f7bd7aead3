#!/usr/bin/env bash
# The GPU check: builds flopmeter against the machine's own PyTorch (its LibTorch, CUDA and NCCL), trains the
# example VLM for 20 steps on one GPU with flopmeter fed through its tensor path (vlm_trainer --device cuda:
# cu_seqlens and grid_thw GPU tensors copied to pinned host memory and counted there, one single-rank NCCL
# all-reduce per log), checks flopmeter's JSONL against the trainer's own counts, prints perf/log_wait_ms, and
# runs the FLOP agreement test (tests/test_example_flops.cpp) and the tensor-path counting tests with
# FLOPMETER_TEST_DEVICE=cuda.
# Exits non-zero when anything fails. Not part of CI (CI has no GPU).
#
# Two steps, because a GPU machine here reaches no package registry:
#   1. On a Debian 12 machine with apt (the development machine):
#        scripts/gpu_check.sh --fetch-deps
#      downloads the Debian packages flopmeter builds against that a PyTorch image lacks (spdlog, fmt, toml++,
#      nlohmann-json (the core's config.json loader; scripts/gpu_check_python.sh needs the same set),
#      GoogleTest, Gloo's headers; about 1.3 MB) into .gpu-deps/ (git-ignored).
#   2. On the GPU machine, from the repository root, with .gpu-deps/ beside it (for the device tool: carry
#      [".gpu-deps"]):
#        bash scripts/gpu_check.sh
#      The packages are unpacked into the build directory (never into /) and go on CMAKE_PREFIX_PATH; without
#      .gpu-deps/ the system's own packages must be there. Results are printed, and copied to $OUT when set.
#
# Options (step 2): --build-only (configure and build, run nothing: for checking the script on a machine
# without a GPU), --steps N (default 20). Environment: PYTHON (default python3: the one whose torch is used),
# FLOPMETER_BUILD_DIR (default build-gpu), JOBS (default nproc), TORCH_CUDA_ARCH_LIST (default 9.0: nothing
# here compiles device code, this only spares LibTorch's CMake its GPU probe).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
deps_dir="$root/.gpu-deps"
packages=(libspdlog-dev libspdlog1.10 libfmt-dev libfmt9 libtomlplusplus-dev libtomlplusplus3 nlohmann-json3-dev libgtest-dev
          libgmock-dev libgloo-dev)

if [ "${1:-}" = "--fetch-deps" ]; then
  mkdir -p "$deps_dir"
  rm -f "$deps_dir"/*.deb
  (cd "$deps_dir" && apt-get download "${packages[@]}")
  ls -l "$deps_dir"
  echo "gpu_check: Debian packages for the GPU machine in $deps_dir (carry it there: carry [\".gpu-deps\"])"
  exit 0
fi

build_only=0
steps=20
while [ $# -gt 0 ]; do
  case "$1" in
    --build-only) build_only=1 ;;
    --steps) steps="$2"; shift ;;
    -h|--help) sed -n '2,23p' "${BASH_SOURCE[0]}"; exit 0 ;;
    *) echo "gpu_check: unknown argument '$1'" >&2; exit 2 ;;
  esac
  shift
done

py="${PYTHON:-python3}"
build="${FLOPMETER_BUILD_DIR:-$root/build-gpu}"
jobs="${JOBS:-$(nproc)}"
out="${OUT:-}"
work="$(mktemp -d /tmp/flopmeter-gpu-check.XXXXXX)"
results=()
failed=0
pass() { results+=("PASS  $1"); echo "gpu_check: PASS  $1"; }
fail() { results+=("FAIL  $1"); echo "gpu_check: FAIL  $1" >&2; failed=1; }
finish() {
  echo
  echo "==== gpu_check summary ===="
  for r in "${results[@]}"; do echo "  $r"; done
  if [ -n "$out" ] && [ -d "$out" ]; then cp -f "$work"/*.log "$work"/*.jsonl "$work"/*.json "$out"/ 2>/dev/null || true; fi
  if [ "$failed" = 0 ]; then echo "gpu_check: all passed"; else echo "gpu_check: FAILED" >&2; fi
  exit "$failed"
}

# ---- PyTorch, CUDA, dependencies ----------------------------------------------------------------------------
if ! info="$("$py" -c 'import torch, torch.distributed as d
print(torch.__version__, torch.utils.cmake_prefix_path, int(torch._C._GLIBCXX_USE_CXX11_ABI),
      int(torch.cuda.is_available()), int(d.is_available() and d.is_nccl_available()), torch.version.cuda)' 2>&1)"; then
  echo "$info" >&2
  fail "PyTorch: '$py -c import torch' failed (set PYTHON to the python whose torch to build against)"
  finish
fi
read -r torch_version torch_prefix torch_abi has_cuda has_nccl cuda_version <<<"$(echo "$info" | tail -1)"
echo "gpu_check: torch $torch_version (CUDA $cuda_version, C++ ABI $torch_abi, cuda available $has_cuda, NCCL $has_nccl)"
echo "gpu_check: LibTorch CMake prefix $torch_prefix"
if [ "$build_only" = 0 ] && [ "$has_cuda" != 1 ]; then
  fail "CUDA: torch.cuda.is_available() is False on this machine"
  finish
fi
command -v nvidia-smi >/dev/null && nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader || true

if [ -z "${CUDAToolkit_ROOT:-}" ] && [ -x /usr/local/cuda/bin/nvcc ]; then export CUDAToolkit_ROOT=/usr/local/cuda; fi
if [ -n "${CUDAToolkit_ROOT:-}" ]; then export PATH="$CUDAToolkit_ROOT/bin:$PATH"; fi
export TORCH_CUDA_ARCH_LIST="${TORCH_CUDA_ARCH_LIST:-9.0}"

prefix_path="$torch_prefix"
if compgen -G "$deps_dir/*.deb" >/dev/null; then
  sysroot="$build/deps-sysroot"  # stable: the build's CMake cache records paths into it
  rm -rf "$sysroot"
  mkdir -p "$sysroot"
  for deb in "$deps_dir"/*.deb; do
    if command -v dpkg-deb >/dev/null; then
      dpkg-deb -x "$deb" "$sysroot"
    else
      (cd "$work" && ar x "$deb" && tar -xf data.tar.* -C "$sysroot" && rm -f data.tar.* control.tar.* debian-binary)
    fi
  done
  prefix_path="$torch_prefix;$sysroot/usr"
  echo "gpu_check: Debian packages from .gpu-deps unpacked in $sysroot"
fi

# ---- build ---------------------------------------------------------------------------------------------------
generator=()
if command -v ninja >/dev/null; then generator=(-G Ninja); fi
if ! cmake -S "$root" -B "$build" "${generator[@]}" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_PREFIX_PATH="$prefix_path" \
       -DFLOPMETER_BUILD_EXAMPLES=ON -DFLOPMETER_BUILD_TESTS=ON -DFLOPMETER_BUILD_BENCH=OFF \
       >"$work/configure.log" 2>&1; then
  tail -40 "$work/configure.log" >&2
  fail "configure against torch $torch_version (log: configure.log)"
  finish
fi
grep "flopmeter:" "$work/configure.log" || true
if ! cmake --build "$build" -j "$jobs" --target flopmeter vlm_trainer test_example_flops test_tensor_path \
       >"$work/build.log" 2>&1; then
  grep -E "error|FAILED" "$work/build.log" | head -30 >&2
  fail "build against torch $torch_version (log: build.log)"
  finish
fi
pass "build against torch $torch_version (flopmeter, vlm_trainer, test_example_flops, test_tensor_path)"
if [ "$build_only" = 1 ]; then finish; fi

# ---- the trainer on one GPU ----------------------------------------------------------------------------------
# The example plugin config with the GPU's peak (the example's own names a nominal CPU peak).
gpu_name="$("$py" -c 'import torch; print(torch.cuda.get_device_name(0))')"
plugin="$work/flopmeter_plugin.toml"
sed -e "s|^config = \"../model_configs/tiny_vlm.toml\"|config = \"$root/model_configs/tiny_vlm.toml\"|" \
    -e "s|^tflops_per_gpu = .*|gpu = \"$gpu_name\"|" "$root/examples/flopmeter_plugin.toml" >"$plugin"
run_dir="$work/trainer"
trainer_rc=0
(unset RANK WORLD_SIZE MASTER_ADDR MASTER_PORT LOCAL_RANK
 "$build/examples/vlm_trainer" --config "$root/examples/trainer.toml" --device cuda --steps "$steps" \
   --flopmeter-config "$plugin" --output-dir "$run_dir") >"$work/trainer.log" 2>&1 || trainer_rc=$?
cat "$work/trainer.log"
if [ "$trainer_rc" != 0 ]; then
  fail "vlm_trainer --device cuda --steps $steps exited $trainer_rc"
else
  cp -f "$run_dir/flopmeter_0.jsonl" "$run_dir/trainer_rank0.jsonl" "$run_dir/summary.json" "$work/" 2>/dev/null || true
  if "$py" - "$run_dir" "$has_nccl" <<'PY'
import json, sys
run, has_nccl = sys.argv[1], sys.argv[2] == "1"
fm = [json.loads(l) for l in open(run + "/flopmeter_0.jsonl")]
tr = [json.loads(l) for l in open(run + "/trainer_rank0.jsonl")]
summary = json.load(open(run + "/summary.json"))
bad = []
print("flopmeter JSONL (%d lines), tensor path: %s" % (len(fm), summary.get("flopmeter_library")))
print("  %6s %14s %16s %14s %10s %12s" % ("step", "log_wait_ms", "tokens/s", "trainer tok/s", "mfu %", "tokens_seen"))
seen = 0
by_step = {t["step"]: t for t in tr}
for r in fm:
    t = by_step.get(r["step"])
    trainer_tps = t["real_tokens"] / t["interval_seconds"] if t else float("nan")
    print("  %6d %14.4f %16.1f %14.1f %10s %12d" % (r["step"], r.get("perf/log_wait_ms", float("nan")),
          r["perf/tokens_per_second"], trainer_tps, "%.4f" % r["perf/mfu"] if "perf/mfu" in r else "n/a",
          r["train/tokens_seen"]))
    if "perf/log_wait_ms" not in r:
        bad.append("step %d: no perf/log_wait_ms" % r["step"])
    if t is None:
        bad.append("step %d: the trainer logged no such interval" % r["step"])
        continue
    seen += t["real_tokens"]
    if r["train/tokens_seen"] != seen:
        bad.append("step %d: train/tokens_seen %d, trainer's real tokens so far %d" % (r["step"], r["train/tokens_seen"], seen))
    eff = t["real_tokens"] / t["device_tokens"]
    if abs(r["train/batch_efficiency"] - eff) > 1e-12:
        bad.append("step %d: batch_efficiency %r vs trainer %r" % (r["step"], r["train/batch_efficiency"], eff))
    if abs(r["perf/tokens_per_second"] / trainer_tps - 1) > 0.05:
        bad.append("step %d: tokens/s %.1f vs the trainer's %.1f (> 5%% apart)" % (r["step"], r["perf/tokens_per_second"], trainer_tps))
if len(fm) != len(tr):
    bad.append("%d flopmeter lines for %d trainer intervals" % (len(fm), len(tr)))
health = summary["flopmeter_health"]
print("  health:", health, " overhead %.4f%% of wall time" % summary["flopmeter_overhead_percent"])
for k in ("bad_microbatches", "failed_collectives", "skipped_intervals", "events_after_flush"):
    if health[k] != 0:
        bad.append("health %s = %d" % (k, health[k]))
if summary.get("flopmeter_path") != "tensor" or "cuda" not in summary.get("flopmeter_library", ""):
    bad.append("flopmeter was not fed through the tensor path with GPU batch tensors: %s" % summary.get("flopmeter_library"))
if has_nccl and "c10d:nccl" not in summary.get("flopmeter_library", ""):
    bad.append("this torch has NCCL but the trainer's flopmeter group is not NCCL")
for b in bad:
    print("  MISMATCH:", b)
sys.exit(1 if bad else 0)
PY
  then
    pass "vlm_trainer --device cuda, $steps steps: flopmeter's JSONL agrees with the trainer's counts"
  else
    fail "vlm_trainer --device cuda: flopmeter's JSONL (see above)"
  fi
fi

# ---- FLOPs on CUDA -------------------------------------------------------------------------------------------
if FLOPMETER_TEST_DEVICE=cuda "$build/tests/test_example_flops" >"$work/test_example_flops.log" 2>&1; then
  pass "test_example_flops on CUDA (executed matmul FLOPs vs flopmeter's model)"
else
  fail "test_example_flops on CUDA"
fi
cat "$work/test_example_flops.log"
if FLOPMETER_TEST_DEVICE=cuda "$build/tests/test_tensor_path" \
     --gtest_filter='tensor_path.device_counts_equal_host_counts:tensor_path.malformed_tensors_are_refused_and_counted:tensor_path.vision_counts_of_the_new_families_equal_host_counts:tensor_path.window_counts_equal_host_counts' \
     >"$work/test_tensor_path.log" 2>&1; then
  pass "test_tensor_path counting on CUDA tensors"
else
  fail "test_tensor_path counting on CUDA tensors"
fi
cat "$work/test_tensor_path.log"
finish
