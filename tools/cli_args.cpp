// Hand-written argument parsing for the flopmeter tool: options as "--name value" or "--name=value",
// strict integer parsing (std::from_chars, whole text consumed, range checked) and the list formats of
// `estimate` (--docs 3,5 and --images 1x2x2,2x4x4).
#include <charconv>
#include <cstdint>
#include <optional>
#include <string>
#include <system_error>
#include <vector>

#include "cli.h"
#include "flopmeter/error.h"
#include "flopmeter/flop_model.h"

namespace flopmeter::cli {
namespace {

// Splits on `separator`, keeping empty pieces ("3,,5" -> {"3", "", "5"}; "" -> {""}).
std::vector<std::string> split(const std::string& text, char separator) {
  std::vector<std::string> pieces;
  std::string::size_type start = 0;
  while (true) {
    const std::string::size_type end = text.find(separator, start);
    if (end == std::string::npos) {
      pieces.push_back(text.substr(start));
      return pieces;
    }
    pieces.push_back(text.substr(start, end - start));
    start = end + 1;
  }
}

std::string quoted(const std::string& text) { return "'" + text + "'"; }

// Parses a decimal int64: an optional '-' then digits, nothing else (no '+', spaces, exponent, hex).
// Returns nullopt and sets `why` on failure.
std::optional<std::int64_t> parse_int64(const std::string& text, std::string& why) {
  if (text.empty()) {
    why = "an empty value is not an integer";
    return std::nullopt;
  }
  const char* first = text.data();
  const char* last = text.data() + text.size();
  const char* digits = (*first == '-') ? first + 1 : first;
  if (digits == last || *digits < '0' || *digits > '9') {
    why = quoted(text) + " is not an integer";
    return std::nullopt;
  }
  std::int64_t value = 0;
  const std::from_chars_result result = std::from_chars(first, last, value);
  if (result.ec == std::errc::result_out_of_range) {
    why = quoted(text) + " is out of range (the limit is 9223372036854775807)";
    return std::nullopt;
  }
  if (result.ec != std::errc() || result.ptr != last) {
    why = quoted(text) + " is not an integer";
    return std::nullopt;
  }
  return value;
}

bool is_known_option(const std::vector<option_spec>& specs, const std::string& name) {
  for (const option_spec& spec : specs) {
    if (name == spec.name) return true;
  }
  return false;
}

}  // namespace

bool parsed_args::has(const std::string& name) const {
  for (const auto& option : options) {
    if (option.first == name) return true;
  }
  return false;
}

std::vector<std::string> parsed_args::all(const std::string& name) const {
  std::vector<std::string> values;
  for (const auto& option : options) {
    if (option.first == name) values.push_back(option.second);
  }
  return values;
}

std::optional<std::string> parsed_args::single(const std::string& name) const {
  std::optional<std::string> value;
  for (const auto& option : options) {
    if (option.first != name) continue;
    if (value) throw usage_error(command, "option " + name + " given more than once");
    value = option.second;
  }
  return value;
}

parsed_args parse_args(const std::string& command, const std::vector<std::string>& args,
                       const std::vector<option_spec>& specs) {
  parsed_args parsed;
  parsed.command = command;
  // --help anywhere (before "--") wins over everything else, so "estimate --docs x --help" shows help.
  for (const std::string& arg : args) {
    if (arg == "--") break;
    if (arg == "--help" || arg == "-h") {
      parsed.help = true;
      return parsed;
    }
  }
  bool options_done = false;
  for (std::size_t i = 0; i < args.size(); ++i) {
    const std::string& arg = args[i];
    if (options_done || arg.empty() || arg[0] != '-' || arg == "-") {
      parsed.positionals.push_back(arg);
      continue;
    }
    if (arg == "--") {
      options_done = true;
      continue;
    }
    const std::string::size_type eq = arg.find('=');
    const std::string name = arg.substr(0, eq);
    const option_spec* spec = nullptr;
    for (const option_spec& candidate : specs) {
      if (name == candidate.name) spec = &candidate;
    }
    if (spec == nullptr) {
      throw usage_error(command, "unknown option " + quoted(name));
    }
    if (!spec->takes_value) {
      if (eq != std::string::npos) throw usage_error(command, "option " + name + " takes no value");
      parsed.options.emplace_back(name, "");
      continue;
    }
    if (eq != std::string::npos) {
      parsed.options.emplace_back(name, arg.substr(eq + 1));
      continue;
    }
    // The next word is the value, even when it starts with '-' ("--padding -1" is then rejected as a
    // negative number, naming --padding) — unless it is another known option.
    if (i + 1 >= args.size()) throw usage_error(command, "option " + name + " needs a value");
    const std::string& next = args[i + 1];
    const std::string next_name = next.substr(0, next.find('='));
    if (next == "--" || (next.size() > 2 && next[0] == '-' && next[1] == '-' && is_known_option(specs, next_name))) {
      throw usage_error(command, "option " + name + " needs a value");
    }
    parsed.options.emplace_back(name, next);
    ++i;
  }
  return parsed;
}

std::int64_t parse_positive_int(const std::string& command, const std::string& what, const std::string& text) {
  std::string why;
  const std::optional<std::int64_t> value = parse_int64(text, why);
  if (!value) throw usage_error(command, what + ": expected a positive integer; " + why);
  if (*value < 1) throw usage_error(command, what + ": expected a positive integer, got " + quoted(text));
  return *value;
}

std::int64_t parse_non_negative_int(const std::string& command, const std::string& what, const std::string& text) {
  std::string why;
  const std::optional<std::int64_t> value = parse_int64(text, why);
  if (!value) throw usage_error(command, what + ": expected a non-negative integer; " + why);
  if (*value < 0) throw usage_error(command, what + ": expected a non-negative integer, got " + quoted(text));
  return *value;
}

std::vector<std::int64_t> parse_length_list(const std::string& command, const std::string& what,
                                            const std::string& text) {
  if (text.empty()) {
    throw usage_error(command, what + ": expected comma-separated non-negative integers, got an empty list");
  }
  std::vector<std::int64_t> values;
  const std::vector<std::string> pieces = split(text, ',');
  for (std::size_t i = 0; i < pieces.size(); ++i) {
    const std::string entry = what + " entry " + std::to_string(i + 1) + " of " + quoted(text);
    if (pieces[i].empty()) throw usage_error(command, entry + " is empty");
    values.push_back(parse_non_negative_int(command, entry, pieces[i]));
  }
  return values;
}

std::vector<image_grid> parse_grid_list(const std::string& command, const std::string& what, const std::string& text) {
  if (text.empty()) throw usage_error(command, what + ": expected comma-separated TxHxW grids, got an empty list");
  std::vector<image_grid> grids;
  const std::vector<std::string> pieces = split(text, ',');
  for (std::size_t i = 0; i < pieces.size(); ++i) {
    const std::string entry = what + " entry " + std::to_string(i + 1) + " " + quoted(pieces[i]);
    if (pieces[i].empty()) {
      throw usage_error(command, what + " entry " + std::to_string(i + 1) + " of " + quoted(text) + " is empty");
    }
    const std::vector<std::string> parts = split(pieces[i], 'x');
    if (parts.size() != 3) {
      throw usage_error(command,
                        entry + ": expected TxHxW (temporal patches x height x width in patches, e.g. 1x32x32)");
    }
    image_grid grid;
    grid.t = parse_positive_int(command, entry + " T", parts[0]);
    grid.h = parse_positive_int(command, entry + " H", parts[1]);
    grid.w = parse_positive_int(command, entry + " W", parts[2]);
    grids.push_back(grid);
  }
  return grids;
}

flop_scope parse_scope_option(const std::string& command, const std::string& text) {
  try {
    return parse_flop_scope(text, error_location{"--scope", 0, 0, {}});
  } catch (const error& e) {
    throw usage_error(command, e.what());
  }
}

std::vector<option_spec> with_regime_options(std::vector<option_spec> specs) {
  for (const option_spec& spec : {option_spec{"--frozen", true}, option_spec{"--lora-rank", true},
                                  option_spec{"--lora-targets", true}, option_spec{"--recompute", true},
                                  option_spec{"--recompute-layers", true}, option_spec{"--recompute-every", true},
                                  option_spec{"--recompute-vision", false}, option_spec{"--indexer-trains", false}}) {
    specs.push_back(spec);
  }
  return specs;
}

training_regime parse_regime_options(const parsed_args& parsed) {
  const std::string& command = parsed.command;
  training_regime regime;
  if (const std::optional<std::string> frozen = parsed.single("--frozen")) {
    for (const std::string& part : split(*frozen, ',')) {
      try {
        add_frozen_part(regime, part, "--frozen");
      } catch (const error& e) {
        throw usage_error(command, e.what());
      }
    }
  }
  if (const std::optional<std::string> rank = parsed.single("--lora-rank")) {
    regime.lora_rank = parse_positive_int(command, "--lora-rank", *rank);
  }
  if (const std::optional<std::string> targets = parsed.single("--lora-targets")) {
    for (const std::string& name : split(*targets, ',')) {
      try {
        regime.lora_targets.push_back(parse_lora_target(name, "--lora-targets"));
      } catch (const error& e) {
        throw usage_error(command, e.what());
      }
    }
  }
  if (regime.lora_rank > 0 && regime.lora_targets.empty()) {
    throw usage_error(command, "--lora-rank needs --lora-targets (the adapted projections, e.g. q_proj,v_proj)");
  }
  if (regime.lora_rank == 0 && !regime.lora_targets.empty()) {
    throw usage_error(command, "--lora-targets needs --lora-rank R (the adapters' rank)");
  }
  recompute_options& recompute = regime.recompute;
  if (const std::optional<std::string> policy = parsed.single("--recompute")) {
    try {
      recompute.policy = parse_recompute_policy(*policy, "--recompute");
    } catch (const error& e) {
      throw usage_error(command, e.what());
    }
  }
  if (const std::optional<std::string> layers = parsed.single("--recompute-layers")) {
    recompute.layers = parse_positive_int(command, "--recompute-layers", *layers);
  }
  if (const std::optional<std::string> every = parsed.single("--recompute-every")) {
    recompute.every = parse_positive_int(command, "--recompute-every", *every);
  }
  recompute.vision = parsed.has("--recompute-vision");
  regime.indexer_trains = parsed.has("--indexer-trains");
  const bool selects = recompute.layers > 0 || recompute.every > 0 || recompute.vision;
  if (recompute.policy == recompute_policy::none && selects) {
    throw usage_error(command,
                      "--recompute-layers, --recompute-every and --recompute-vision need --recompute POLICY (full, "
                      "full_early_stop, selective or op)");
  }
  if (recompute.layers > 0 && recompute.every > 0) {
    throw usage_error(command, "--recompute-layers and --recompute-every exclude each other: give one");
  }
  return regime;
}

}  // namespace flopmeter::cli
