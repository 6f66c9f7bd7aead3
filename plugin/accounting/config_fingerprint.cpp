// The configuration fingerprint of a row (config_fingerprint.h).
#include "accounting/config_fingerprint.h"

#include <spdlog/fmt/fmt.h>

#include <cstring>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "flopmeter/error.h"
#include "accounting/row_layout.h"

namespace flopmeter::detail {
namespace {

constexpr std::size_t kNameBytesPerField = 6;  // 48 bits: exact in a double
constexpr std::size_t kNameFields = 3;
constexpr std::uint64_t kLow48 = (std::uint64_t{1} << 48) - 1;
constexpr const char* kDimensions[] = {"tp", "cp", "dp", "pp"};

// FNV-1a over bytes, folded to 48 bits.
struct fnv1a {
  std::uint64_t h = 14695981039346656037ull;
  void add(const void* data, std::size_t n) {
    const auto* bytes = static_cast<const unsigned char*>(data);
    for (std::size_t i = 0; i < n; ++i) h = (h ^ bytes[i]) * 1099511628211ull;
  }
  void add(double v) { add(&v, sizeof v); }
  double value48() const { return static_cast<double>((h ^ (h >> 48)) & kLow48); }
};

// The model's work per unit of each count: the FLOPs of a batch holding one of that unit alone (complete
// scope). Whatever the coefficients hold (and whichever parts train), two models that bill any unit
// differently differ here.
double model_hash(const std::string& name, const coefficients& c) {
  fnv1a hash;
  hash.add(name.data(), name.size());
  for (int field = 0; field < static_cast<int>(kRowCountFields); ++field) {
    std::vector<double> row(kRowFields, 0.0);
    row[static_cast<std::size_t>(field)] = 1;
    hash.add(compute_flops(c, counts_from_row(row.data()), flop_scope::complete).total());
  }
  hash.add(static_cast<double>(c.patches_per_merged_token));
  return hash.value48();
}

double order_code(const std::string& order) {
  std::uint64_t code = 0;
  int shift = 0;
  std::stringstream parts(order);
  for (std::string part; std::getline(parts, part, '-') && shift < 8; shift += 2) {
    for (std::uint64_t d = 0; d < 4; ++d) {
      if (part == kDimensions[d]) code |= d << shift;
    }
  }
  return static_cast<double>(1 + code);
}

std::string order_text(double code) {
  if (!(code >= 1 && code <= 256)) return "(unknown)";
  const auto bits = static_cast<std::uint64_t>(code) - 1;
  std::string text;
  for (int shift = 0; shift < 8; shift += 2) text += std::string(shift ? "-" : "") + kDimensions[(bits >> shift) & 3];
  return text;
}

std::string name_text(const double* row) {
  std::string name;
  for (std::size_t f = 0; f < kNameFields; ++f) {
    const double v = row[row_config_model_name_0 + f];
    if (!(v >= 0 && v <= static_cast<double>(kLow48))) return "(unknown)";
    const auto bits = static_cast<std::uint64_t>(v);
    for (std::size_t b = 0; b < kNameBytesPerField; ++b) {
      const char c = static_cast<char>((bits >> (8 * b)) & 0xff);
      if (c != '\0') name += c;
    }
  }
  return printable_text(name);
}

std::string number_text(double v) { return fmt::format("{}", v); }

// The regime as row_config_training and row_config_lora_targets encode it (1 + frozen bits + 8 x rank; 1 +
// target bits): "frozen vision,text" or "LoRA rank 16 on q_proj,v_proj" or "all trains".
double training_code(const training_regime& r) {
  return 1.0 + (r.vision_frozen ? 1 : 0) + (r.merger_frozen ? 2 : 0) + (r.text_frozen ? 4 : 0) +
         8.0 * static_cast<double>(r.lora_rank);
}
double lora_targets_code(const training_regime& r) {
  std::uint64_t bits = 0;
  for (const lora_target t : r.lora_targets) bits |= std::uint64_t{1} << static_cast<unsigned>(t);
  return 1.0 + static_cast<double>(bits);
}
std::string training_text(const double* row) {
  const auto code = static_cast<std::uint64_t>(row[row_config_training]) - 1;
  const auto targets = static_cast<std::uint64_t>(row[row_config_lora_targets]) - 1;
  std::string text;
  const char* parts[] = {"vision", "merger", "text"};
  for (unsigned i = 0; i < 3; ++i) {
    if ((code >> i) & 1u) text += std::string(text.empty() ? "frozen " : ",") + parts[i];
  }
  if (code >> 3) {
    text += std::string(text.empty() ? "" : ", ") + "LoRA rank " + std::to_string(code >> 3) + " on ";
    bool first = true;
    for (unsigned t = 0; t <= static_cast<unsigned>(lora_target::out_proj); ++t) {
      if ((targets >> t) & 1u) {
        text += std::string(first ? "" : ",") + to_string(static_cast<lora_target>(t));
        first = false;
      }
    }
  }
  return text.empty() ? "all trains" : text;
}

// The recompute settings as row_config_recompute encodes them: 1 + policy (3 bits) + 8 x vision + 16 x which
// layers (0 all, 1 the first N per stage, 2 every N-th: at most one of layers and every is set) + 64 x N.
// N is below 2^31 (throughput_config's bound), so the code stays below 2^37: exact in a double. Two ranks that
// recompute differently bill the same model FLOPs but different hardware FLOPs, so their rows cannot be
// summed into one HFU.
double recompute_code(const recompute_options& r) {
  const int which = r.layers > 0 ? 1 : r.every > 0 ? 2 : 0;
  const double n = static_cast<double>(which == 1 ? r.layers : which == 2 ? r.every : 0);
  return 1.0 + static_cast<double>(static_cast<unsigned>(r.policy)) + (r.vision ? 8 : 0) + 16.0 * which + 64.0 * n;
}
// "none", "full", "full every 2", "selective on the first 4 layers per stage, vision too".
std::string recompute_text(const double* row) {
  const double value = row[row_config_recompute];
  if (!(value >= 1 && value < 0x1p48)) return "(unknown)";
  const auto code = static_cast<std::uint64_t>(value) - 1;
  const auto policy = static_cast<unsigned>(code & 7u);
  if (policy > static_cast<unsigned>(recompute_policy::op)) return "(unknown)";
  std::string text = to_string(static_cast<recompute_policy>(policy));
  const std::uint64_t which = (code >> 4) & 3u, n = code >> 6;
  if (which == 1) text += " on the first " + std::to_string(n) + " layers per stage";
  if (which == 2) text += " every " + std::to_string(n);
  if ((code >> 3) & 1u) text += ", vision too";
  return text;
}

// One setting as the message shows it: its name and how to show a row's value (which fields it reads).
struct setting {
  const char* name;
  const char* short_name;  // how "the others" are named: "the others tp 1" ("" for the model: "the others NAME")
  std::vector<std::size_t> fields;
  std::string (*shown)(const double* row);
};

const std::vector<setting>& settings() {
  static const std::vector<setting> all = {
      {"model",
       "",
       {row_config_model_name_0, row_config_model_name_1, row_config_model_name_2, row_config_model_hash},
       [](const double* row) {
         return name_text(row);  // a model of the same name with other coefficients: see describe_differences
       }},
      {"[model] scope",
       "scope",
       {row_config_scope},
       [](const double* row) {
         return std::string(row[row_config_scope] == 1   ? "seed"
                            : row[row_config_scope] == 2 ? "complete"
                                                         : "(unknown)");
       }},
      {"[parallel] tp", "tp", {row_config_tp}, [](const double* row) { return number_text(row[row_config_tp]); }},
      {"[parallel] cp", "cp", {row_config_cp}, [](const double* row) { return number_text(row[row_config_cp]); }},
      {"[parallel] pp", "pp", {row_config_pp}, [](const double* row) { return number_text(row[row_config_pp]); }},
      {"[parallel] order",
       "order",
       {row_config_order},
       [](const double* row) { return order_text(row[row_config_order]); }},
      {"[training]",
       "",  // "the others frozen vision"
       {row_config_training, row_config_lora_targets},
       [](const double* row) { return training_text(row); }},
      {"[training] recompute",
       "recompute",
       {row_config_recompute},
       [](const double* row) { return recompute_text(row); }},
      {"[logging] tpi_multiplier",
       "tpi_multiplier",
       {row_config_tpi_multiplier},
       [](const double* row) { return number_text(row[row_config_tpi_multiplier]); }},
  };
  return all;
}

bool same(const double* a, const double* b, const std::vector<std::size_t>& fields) {
  for (const std::size_t f : fields) {
    if (!(a[f] == b[f])) return false;
  }
  return true;
}

std::string rank_list(const std::vector<std::int64_t>& ranks) {
  constexpr std::size_t kShown = 8;
  std::string text = ranks.size() == 1 ? "rank " : "ranks ";
  const std::size_t shown = std::min(ranks.size(), kShown);
  for (std::size_t i = 0; i < shown; ++i) {
    if (i > 0) text += i + 1 == shown && ranks.size() <= kShown ? " and " : ", ";
    text += std::to_string(ranks[i]);
  }
  if (ranks.size() > kShown) text += " and " + std::to_string(ranks.size() - kShown) + " more";
  return text;
}

}  // namespace

void write_fingerprint(const config_settings& s, double* row) {
  for (std::size_t f = 0; f < kNameFields; ++f) {
    std::uint64_t bits = 0;
    for (std::size_t b = 0; b < kNameBytesPerField; ++b) {
      const std::size_t at = f * kNameBytesPerField + b;
      if (at < s.model_name.size()) bits |= std::uint64_t{static_cast<unsigned char>(s.model_name[at])} << (8 * b);
    }
    row[row_config_model_name_0 + f] = static_cast<double>(bits);
  }
  row[row_config_model_hash] = model_hash(s.model_name, s.model);
  row[row_config_scope] = s.scope == flop_scope::seed ? 1 : 2;
  row[row_config_tp] = static_cast<double>(s.parallel.tp);
  row[row_config_cp] = static_cast<double>(s.parallel.cp);
  row[row_config_pp] = static_cast<double>(s.parallel.pp);
  row[row_config_order] = order_code(s.rank_order);
  row[row_config_tpi_multiplier] = s.tpi_multiplier;
  row[row_config_training] = training_code(s.regime);
  row[row_config_lora_targets] = lora_targets_code(s.regime);
  row[row_config_recompute] = recompute_code(s.regime.recompute);
}

bool fingerprints_agree(const double* rows, std::int64_t world, std::int64_t rank) {
  const double* mine = rows + static_cast<std::size_t>(rank) * kRowFields;
  for (std::int64_t r = 0; r < world; ++r) {
    const double* x = rows + static_cast<std::size_t>(r) * kRowFields;
    for (std::size_t f = kRowConfigFirst; f < kRowConfigEnd; ++f) {
      if (!(x[f] == mine[f])) return false;
    }
  }
  return true;
}

std::string describe_fingerprint_differences(const double* rows, std::int64_t world) {
  const auto row = [rows](std::int64_t r) { return rows + static_cast<std::size_t>(r) * kRowFields; };
  std::string text;
  for (const setting& s : settings()) {
    // The distinct values in rank order (each by the lowest rank holding it), with the ranks holding each.
    std::vector<std::int64_t> first;
    std::vector<std::vector<std::int64_t>> holders;
    for (std::int64_t r = 0; r < world; ++r) {
      std::size_t v = 0;
      while (v < first.size() && !same(row(first[v]), row(r), s.fields)) ++v;
      if (v == first.size()) {
        first.push_back(r);
        holders.emplace_back();
      }
      holders[v].push_back(r);
    }
    if (first.size() < 2) continue;
    std::size_t most = 0;
    for (std::size_t v = 1; v < first.size(); ++v) {
      if (holders[v].size() > holders[most].size()) most = v;
    }
    // The same model name with other coefficients (another file of that name, other trained parts).
    const auto shown = [&](std::size_t v) {
      std::string value = s.shown(row(first[v]));
      for (std::size_t w = 0; w < first.size(); ++w) {
        if (s.fields.size() > 1 && w != v && value == s.shown(row(first[w]))) {
          value +=
              fmt::format(" (coefficients {:012x})", static_cast<std::uint64_t>(row(first[v])[row_config_model_hash]));
          break;
        }
      }
      return value;
    };
    std::string part;
    for (std::size_t v = 0; v < first.size(); ++v) {
      if (v == most) continue;
      part += (part.empty() ? "" : ", ") + rank_list(holders[v]) + ": " + s.name + " " + shown(v);
    }
    part += ", the others " + std::string(s.short_name) + (*s.short_name ? " " : "") + shown(most);
    text += (text.empty() ? "" : "; ") + part;
  }
  return text;
}

}  // namespace flopmeter::detail
