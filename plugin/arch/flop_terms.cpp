// plugin/arch/flop_terms.cpp — the multiply-adds of each GEMM family and the saturating arithmetic they are
// formed in (see flop_terms.h). Conventions used by every formula below and by the coefficients built from them:
//   - A matmul [n x k] @ [k x m] costs 2*n*k*m FLOPs (one multiply-add = 2 FLOPs).
//   - Training costs 3x the forward matmul work: forward, backward w.r.t. activations (dgrad), backward w.r.t.
//     weights (wgrad), each the same size. Hence 3 * 2 = 6 FLOPs per multiply-add (gemm_walk.cpp bills each pass by what trains).
//   - Only matmul work is counted. Norms, activations, softmax, RoPE, residual adds, the loss and the
//     optimizer are O(tokens * hidden) element-wise work and are left out, as in Megatron and the reference.

#include "arch/flop_terms.h"

#include <algorithm>
#include <cstdint>
#include <initializer_list>
#include <string>
#include <utility>
#include <vector>

#include "flopmeter/error.h"
#include "flopmeter/flop_model.h"

namespace flopmeter {
namespace {

// The fields in order, each once (a size that enters a product twice is named once).
std::vector<std::string> distinct(std::vector<std::string> fields) {
  std::vector<std::string> out;
  for (std::string& field : fields) {
    if (std::find(out.begin(), out.end(), field) == out.end()) out.push_back(std::move(field));
  }
  return out;
}

std::string overflow_message(const std::string& coefficient, const std::vector<std::string>& fields) {
  std::string message = "coefficient " + coefficient + " exceeds 2^63 FLOPs";
  if (!fields.empty()) {
    message += ": the product of ";
    for (std::size_t i = 0; i < fields.size(); ++i) message += (i == 0 ? "" : ", ") + fields[i];
    message += " is too large";
  }
  return message;
}

}  // namespace

// The exception every coefficient that does not fit throws (to_coefficient, check_sum_fits below).
coefficient_overflow::coefficient_overflow(const std::string& coefficient, std::vector<std::string> fields)
    : error(overflow_message(coefficient, distinct(fields))),
      coefficient_(coefficient),
      fields_(distinct(std::move(fields))) {}

}  // namespace flopmeter

namespace flopmeter::detail {
namespace {

int128 saturating_multiply(int128 a, int128 b) {
  if (a == 0 || b == 0) return 0;
  if (a >= kSaturated || b >= kSaturated || a > kSaturated / b) return kSaturated;
  return a * b;
}

std::vector<std::string> field_names(const term& t) { return {t.fields.begin(), t.fields.end()}; }

}  // namespace

term product(std::initializer_list<factor> factors) {
  term t;
  t.value = 1;
  for (const factor& f : factors) {
    t.value = saturating_multiply(t.value, f.value);
    if (f.field != nullptr && f.value > 1) t.fields.push_back(f.field);  // a factor of 1 cannot be to blame
  }
  return t;
}

term operator*(term t, const factor& f) {
  t.value = saturating_multiply(t.value, f.value);
  if (f.field != nullptr && f.value > 1) t.fields.push_back(f.field);
  return t;
}

term operator*(term a, const term& b) {
  a.value = saturating_multiply(a.value, b.value);
  if (b.value > 1) a.fields.insert(a.fields.end(), b.fields.begin(), b.fields.end());
  return a;
}

term operator+(const term& a, const term& b) {
  term sum;
  sum.value = std::min(a.value + b.value, kSaturated);  // both <= 2^120: no wrap
  sum.fields = a.value >= b.value ? a.fields : b.fields;
  return sum;
}

std::int64_t to_coefficient(const term& macs, int128 passes, const char* name) {
  const term flops = macs * factor{passes, nullptr};
  if (flops.value > static_cast<int128>(INT64_MAX)) throw coefficient_overflow(name, field_names(flops));
  return static_cast<std::int64_t>(flops.value);
}

void check_sum_fits(std::int64_t a, const term& a_macs, std::int64_t b, const term& b_macs, const char* name) {
  std::int64_t sum = 0;
  if (__builtin_add_overflow(a, b, &sum)) throw coefficient_overflow(name, field_names(a_macs + b_macs));
}

}  // namespace flopmeter::detail
