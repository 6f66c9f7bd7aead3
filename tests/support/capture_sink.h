// A sink that keeps every record it is given, and notes each flush, for tests.
#pragma once

#include <cstddef>
#include <limits>
#include <string>
#include <vector>

#include "flopmeter/sinks.h"

namespace flopmeter::testing {

class capture_sink : public sink {
 public:
  std::vector<metrics_record> records;
  // For each flush_() call, how many records had been written by then.
  std::vector<std::size_t> flushed_after;

  double value(std::size_t record, const std::string& name) const {
    const double* v = records.at(record).find(name);
    return v == nullptr ? std::numeric_limits<double>::quiet_NaN() : *v;
  }
  bool has(std::size_t record, const std::string& name) const { return records.at(record).find(name) != nullptr; }

 protected:
  void write_(const metrics_record& record) override { records.push_back(record); }
  void flush_() override { flushed_after.push_back(records.size()); }
};

}  // namespace flopmeter::testing
