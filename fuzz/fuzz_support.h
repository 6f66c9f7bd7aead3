// fuzz/fuzz_support.h — what the fuzz targets share: an invariant check that aborts with a message (a
// libFuzzer crash with a reproducer), independent of NDEBUG.
#pragma once

#include <cstdio>
#include <cstdlib>
#include <string>

namespace flopmeter::fuzz {

[[noreturn]] inline void invariant_failed(const char* file, int line, const char* condition, const std::string& note) {
  std::fprintf(stderr, "%s:%d: invariant failed: %s\n  %s\n", file, line, condition, note.c_str());
  std::abort();
}

}  // namespace flopmeter::fuzz

// FUZZ_CHECK(condition, note): aborts naming the condition and `note` (a std::string expression, evaluated
// only on failure) when `condition` is false.
#define FUZZ_CHECK(condition, note)                                                   \
  do {                                                                                \
    if (!(condition)) ::flopmeter::fuzz::invariant_failed(__FILE__, __LINE__, #condition, (note)); \
  } while (false)
