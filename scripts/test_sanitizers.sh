#!/usr/bin/env bash
# The non-torch test suite under sanitizers (called by scripts/test.sh; runnable on its own).
#   scripts/test_sanitizers.sh            both passes below
#   scripts/test_sanitizers.sh asan       only (a): AddressSanitizer + UndefinedBehaviorSanitizer, whole suite
#   scripts/test_sanitizers.sh tsan       only (b): ThreadSanitizer, the hook, sink and aggregation tests
# Build dirs: build/asan and build/tsan (or under $FLOPMETER_SANITIZER_BUILD_ROOT). Exits non-zero on any
# sanitizer report: cmake/FlopmeterHelpers.cmake compiles our targets with -fno-sanitize-recover=all, so a
# UBSan finding aborts the test like an ASan or TSan one does.
#
# What is left out, and why:
#   - LibTorch (FLOPMETER_WITH_TORCH=OFF), raw NCCL, examples and bench: LibTorch and NCCL are not built
#     with the sanitizers (uninstrumented code that owns threads and memory gives TSan false positives and
#     hides ASan errors), and bench/bench_on_microbatch.cpp replaces the global operator new to count
#     allocations, which would fight ASan's allocator. Their own suites run in the ordinary build.
#   - Only our own targets are instrumented (FLOPMETER_SANITIZE is applied by flopmeter_target_defaults);
#     GoogleTest, spdlog and fmt come uninstrumented from Debian. That is enough for ASan/UBSan (they check
#     the code that is instrumented) and TSan still sees every lock and atomic in our code and the pthread
#     calls of the libraries.
# Suppressions: none. No ASAN_OPTIONS/TSAN_OPTIONS/UBSAN_OPTIONS relax any check; the ones set below only make
# reports fail loudly with a stack (halt_on_error, print_stacktrace) and keep LeakSanitizer on.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build_root="${FLOPMETER_SANITIZER_BUILD_ROOT:-$root/build}"
jobs="$(nproc)"
which="${1:-all}"

# Debug (-O0) with line tables only (-g1): these builds exist to run the suite once, and -O0 compiles markedly
# faster on 2 cores than -O2 while the sanitizers check the same things; a report still names file:line.
configure() {  # configure <build dir> <sanitizers>
  cmake -S "$root" -B "$1" -DCMAKE_BUILD_TYPE=Debug -DFLOPMETER_SANITIZE="$2" \
    "-DCMAKE_CXX_FLAGS_DEBUG=-O0 -g1" \
    -DFLOPMETER_WITH_TORCH=OFF -DFLOPMETER_WITH_NCCL=OFF \
    -DFLOPMETER_BUILD_TESTS=ON -DFLOPMETER_BUILD_EXAMPLES=OFF -DFLOPMETER_BUILD_BENCH=OFF \
    -DFLOPMETER_BUILD_FUZZ=OFF >/dev/null
}

export ASAN_OPTIONS="halt_on_error=1:detect_leaks=1:strict_string_checks=1:detect_stack_use_after_return=1"
export UBSAN_OPTIONS="halt_on_error=1:print_stacktrace=1"
export TSAN_OPTIONS="halt_on_error=1:second_deadlock_stack=1"

asan() {
  local dir="$build_root/asan"
  echo "flopmeter: ASan+UBSan build in $dir"
  # GCC's -fsanitize=undefined leaves out float-cast-overflow (clang's includes it); it is what catches a
  # double converted to an integer it does not fit, e.g. a count read back from the collective's row.
  configure "$dir" "address,undefined,float-cast-overflow"
  cmake --build "$dir" -j "$jobs"
  (cd "$dir" && ctest --output-on-failure -j "$jobs" --timeout 300)
}

# The tests that exercise concurrency: hooks fired from several threads, sinks shared between threads, the
# plugin's mutex and the fake process group's condition variable (throughput, faults), the C ABI.
tsan_tests=(test_hooks test_throughput test_sinks test_c_api test_communicator_local test_faults)

tsan() {
  local dir="$build_root/tsan"
  echo "flopmeter: TSan build in $dir"
  configure "$dir" "thread"
  local targets=()
  for t in "${tsan_tests[@]}"; do
    if [ -f "$root/tests/$t.cpp" ]; then targets+=("$t"); fi
  done
  cmake --build "$dir" -j "$jobs" --target "${targets[@]}"
  # Only those executables exist in this tree; ctest lists each unbuilt one as <target>_NOT_BUILT, so
  # excluding those runs exactly the tests of the executables above (their gtest suites, all cases).
  (cd "$dir" && ctest --output-on-failure -j "$jobs" --timeout 300 -E '_NOT_BUILT$')
}

case "$which" in
  asan) asan ;;
  tsan) tsan ;;
  all) asan; tsan ;;
  *) echo "usage: $0 [asan|tsan|all]" >&2; exit 2 ;;
esac
