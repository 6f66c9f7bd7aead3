// Loading examples/trainer.toml with toml++ and applying command-line overrides.
#include "trainer_config.h"

#include <toml++/toml.h>

#include <cstdlib>
#include <filesystem>
#include <map>
#include <set>
#include <sstream>
#include <stdexcept>

namespace vlm {
namespace {

namespace fs = std::filesystem;

class reader {
 public:
  explicit reader(std::string file) : file_(std::move(file)) {}

  [[noreturn]] void fail(const toml::source_region& at, const std::string& what) const {
    std::ostringstream out;
    out << file_ << ":" << at.begin.line << ":" << at.begin.column << ": " << what;
    throw std::runtime_error(out.str());
  }

  // Rejects keys of `table` not in `allowed` (typo protection).
  void only(const toml::table& table, const std::string& path, const std::set<std::string>& allowed) const {
    for (const auto& [key, node] : table) {
      if (allowed.count(std::string(key.str())) == 0) {
        fail(key.source(), "unknown key '" + (path.empty() ? "" : path + ".") + std::string(key.str()) + "'");
      }
    }
  }

  const toml::table* table(const toml::table& root, const std::string& key) const {
    const toml::node* node = root.get(key);
    if (node == nullptr) return nullptr;
    if (!node->is_table()) fail(node->source(), "key '" + key + "' must be a table");
    return node->as_table();
  }

  void get(const toml::table* t, const std::string& path, const std::string& key, std::int64_t& out,
           std::int64_t min) const {
    const toml::node* node = t ? t->get(key) : nullptr;
    if (node == nullptr) return;
    const auto v = node->value_exact<std::int64_t>();
    if (!v) fail(node->source(), "key '" + path + "." + key + "': expected an integer");
    if (*v < min) fail(node->source(), "key '" + path + "." + key + "': must be >= " + std::to_string(min));
    out = *v;
  }
  void get(const toml::table* t, const std::string& path, const std::string& key, double& out) const {
    const toml::node* node = t ? t->get(key) : nullptr;
    if (node == nullptr) return;
    const auto v = node->value<double>();  // integers accepted
    if (!v || !node->is_number()) fail(node->source(), "key '" + path + "." + key + "': expected a number");
    out = *v;
  }
  void get(const toml::table* t, const std::string& path, const std::string& key, bool& out) const {
    const toml::node* node = t ? t->get(key) : nullptr;
    if (node == nullptr) return;
    const auto v = node->value_exact<bool>();
    if (!v) fail(node->source(), "key '" + path + "." + key + "': expected true or false");
    out = *v;
  }
  // A path relative to the TOML file's directory ("" stays "").
  void get_path(const toml::table* t, const std::string& path, const std::string& key, std::string& out,
                const fs::path& base) const {
    const toml::node* node = t ? t->get(key) : nullptr;
    if (node == nullptr) return;
    const auto v = node->value_exact<std::string>();
    if (!v) fail(node->source(), "key '" + path + "." + key + "': expected a string");
    out = v->empty() ? std::string() : (fs::path(*v).is_absolute() ? *v : (base / *v).lexically_normal().string());
  }
  void get_string(const toml::table* t, const std::string& path, const std::string& key, std::string& out) const {
    const toml::node* node = t ? t->get(key) : nullptr;
    if (node == nullptr) return;
    const auto v = node->value_exact<std::string>();
    if (!v || v->empty()) fail(node->source(), "key '" + path + "." + key + "': expected a non-empty string");
    out = *v;
  }

 private:
  std::string file_;
};

std::int64_t parse_int(const std::string& flag, const std::string& text) {
  std::size_t used = 0;
  long long v = 0;
  try {
    v = std::stoll(text, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  if (used != text.size() || text.empty()) throw std::runtime_error(flag + ": expected an integer, got '" + text + "'");
  return v;
}

double parse_double(const std::string& flag, const std::string& text) {
  std::size_t used = 0;
  double v = 0;
  try {
    v = std::stod(text, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  if (used != text.size() || text.empty()) throw std::runtime_error(flag + ": expected a number, got '" + text + "'");
  return v;
}

std::string absolute(const std::string& path) { return fs::absolute(path).lexically_normal().string(); }

}  // namespace

trainer_config load_trainer_config(const std::string& path) {
  toml::table root;
  try {
    root = toml::parse_file(path);
  } catch (const toml::parse_error& e) {
    std::ostringstream out;
    out << path << ":" << e.source().begin.line << ":" << e.source().begin.column << ": TOML syntax error: "
        << e.description();
    throw std::runtime_error(out.str());
  }
  const reader r(path);
  const fs::path base = fs::absolute(path).parent_path();
  r.only(root, "", {"run", "data", "model", "optim", "flopmeter"});

  trainer_config c;
  c.source_path = absolute(path);
  const toml::table* run = r.table(root, "run");
  if (run) {
    r.only(*run, "run", {"steps", "microbatches_per_step", "log_interval_steps", "threads", "output_dir", "device"});
  }
  r.get(run, "run", "steps", c.steps, 1);
  r.get(run, "run", "microbatches_per_step", c.microbatches_per_step, 1);
  r.get(run, "run", "log_interval_steps", c.log_interval_steps, 1);
  r.get(run, "run", "threads", c.threads, 1);
  r.get_string(run, "run", "output_dir", c.output_dir);
  r.get_string(run, "run", "device", c.device);
  if (c.device != "cpu" && c.device != "cuda") {
    r.fail(run->get("device")->source(), "key 'run.device': expected \"cpu\" or \"cuda\", got \"" + c.device + "\"");
  }

  const toml::table* data = r.table(root, "data");
  if (data) {
    r.only(*data, "data", {"seed", "row_length", "min_document_length", "max_document_length", "min_padding_tokens",
                           "max_padding_tokens", "image_probability", "pattern_vocab"});
  }
  std::int64_t seed = static_cast<std::int64_t>(c.data.seed);
  r.get(data, "data", "seed", seed, 0);
  c.data.seed = static_cast<std::uint64_t>(seed);
  r.get(data, "data", "row_length", c.data.row_length, 2);
  r.get(data, "data", "min_document_length", c.data.min_document_length, 2);
  r.get(data, "data", "max_document_length", c.data.max_document_length, 2);
  r.get(data, "data", "min_padding_tokens", c.data.min_padding_tokens, 0);
  r.get(data, "data", "max_padding_tokens", c.data.max_padding_tokens, 0);
  r.get(data, "data", "image_probability", c.data.image_probability);
  r.get(data, "data", "pattern_vocab", c.data.pattern_vocab, 1);

  const toml::table* model = r.table(root, "model");
  if (model) r.only(*model, "model", {"config"});
  r.get_path(model, "model", "config", c.model_config, base);
  if (c.model_config.empty()) {
    throw std::runtime_error(path + ": required key 'model.config' (the flopmeter model TOML) is missing");
  }

  const toml::table* optim = r.table(root, "optim");
  if (optim) {
    r.only(*optim, "optim", {"lr", "min_lr_ratio", "warmup_steps", "weight_decay", "beta1", "beta2", "grad_clip"});
  }
  r.get(optim, "optim", "lr", c.lr);
  r.get(optim, "optim", "min_lr_ratio", c.min_lr_ratio);
  r.get(optim, "optim", "warmup_steps", c.warmup_steps, 0);
  r.get(optim, "optim", "weight_decay", c.weight_decay);
  r.get(optim, "optim", "beta1", c.beta1);
  r.get(optim, "optim", "beta2", c.beta2);
  r.get(optim, "optim", "grad_clip", c.grad_clip);

  const toml::table* fm = r.table(root, "flopmeter");
  if (fm) r.only(*fm, "flopmeter", {"enabled", "library", "config", "port_offset"});
  r.get(fm, "flopmeter", "enabled", c.flopmeter_enabled);
  r.get_path(fm, "flopmeter", "library", c.flopmeter_library, base);
  r.get_path(fm, "flopmeter", "config", c.flopmeter_config, base);
  std::int64_t offset = c.flopmeter_port_offset;
  r.get(fm, "flopmeter", "port_offset", offset, 1);
  c.flopmeter_port_offset = static_cast<int>(offset);
  if (c.flopmeter_enabled && c.flopmeter_config.empty()) {
    throw std::runtime_error(path + ": key 'flopmeter.config' (the plugin TOML) is required when flopmeter is enabled");
  }
  return c;
}

std::string trainer_usage(const char* program) {
  return std::string("usage: ") + program +
         " [--config trainer.toml] [--steps N] [--microbatches N] [--log-interval N] [--row-length N]\n"
         "       [--seed N] [--threads N] [--lr X] [--output-dir DIR] [--device cpu|cuda] [--model-config PATH]\n"
         "       [--frozen vision,merger,text] [--lora-rank R --lora-targets q_proj,v_proj,...]\n"
         "       [--recompute none|full|full_early_stop|selective|op [--recompute-every K] [--recompute-vision]]\n"
         "       [--flopmeter-library PATH] [--flopmeter-config PATH] [--flopmeter-path c_abi|tensor]\n"
         "       [--no-flopmeter]\n"
         "Multi-process: set RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT (examples/launch.sh does).\n"
         "--frozen: those parts do not train (set the same list in the plugin file's [training] frozen).\n"
         "--recompute: checkpoint the decoder layers (every K-th), and the ViT blocks with --recompute-vision; set\n"
         "the same in the plugin file's [training] recompute, recompute_every, recompute_vision.\n"
         "--device cuda: model and batches on cuda:LOCAL_RANK; flopmeter through its tensor path (flopmeter/torch.h).\n"
         "flopmeter library: --flopmeter-library > $FLOPMETER_LIBRARY > [flopmeter].library > the build's.\n";
}

trainer_config parse_command_line(int argc, char** argv, const std::string& default_config,
                                  const std::string& default_library, bool& help) {
  help = false;
  std::vector<std::string> args(argv + 1, argv + argc);
  std::string config_path = default_config;
  for (std::size_t i = 0; i < args.size(); ++i) {
    if (args[i] == "--help" || args[i] == "-h") {
      help = true;
      return {};
    }
    if (args[i] == "--config") {
      if (i + 1 >= args.size()) throw std::runtime_error("--config needs a value");
      config_path = args[i + 1];
    }
  }
  trainer_config c = load_trainer_config(config_path);
  std::string cli_library;
  for (std::size_t i = 0; i < args.size(); ++i) {
    const std::string& flag = args[i];
    if (flag == "--no-flopmeter") {
      c.flopmeter_enabled = false;
      continue;
    }
    if (flag == "--recompute-vision") {
      c.recompute_vision = true;
      continue;
    }
    if (i + 1 >= args.size()) throw std::runtime_error("unknown flag or missing value: " + flag);
    const std::string value = args[++i];
    if (flag == "--config") {
    } else if (flag == "--steps") {
      c.steps = parse_int(flag, value);
    } else if (flag == "--microbatches") {
      c.microbatches_per_step = parse_int(flag, value);
    } else if (flag == "--log-interval") {
      c.log_interval_steps = parse_int(flag, value);
    } else if (flag == "--row-length") {
      c.data.row_length = parse_int(flag, value);
    } else if (flag == "--seed") {
      c.data.seed = static_cast<std::uint64_t>(parse_int(flag, value));
    } else if (flag == "--threads") {
      c.threads = parse_int(flag, value);
    } else if (flag == "--lr") {
      c.lr = parse_double(flag, value);
    } else if (flag == "--output-dir") {
      c.output_dir = value;
    } else if (flag == "--device") {
      if (value != "cpu" && value != "cuda") throw std::runtime_error("--device: expected cpu or cuda, got '" + value + "'");
      c.device = value;
    } else if (flag == "--model-config") {
      c.model_config = absolute(value);
    } else if (flag == "--lora-rank") {
      c.lora_rank = parse_int(flag, value);
    } else if (flag == "--lora-targets") {
      c.lora_targets.clear();
      std::string::size_type start = 0;
      while (start <= value.size()) {
        const std::string::size_type end = std::min(value.find(',', start), value.size());
        c.lora_targets.push_back(value.substr(start, end - start));
        start = end + 1;
      }
    } else if (flag == "--recompute") {
      if (value != "none" && value != "full" && value != "full_early_stop" && value != "selective" && value != "op") {
        throw std::runtime_error("--recompute: expected none, full, full_early_stop, selective or op, got '" + value +
                                 "'");
      }
      c.recompute = value;
    } else if (flag == "--recompute-every") {
      c.recompute_every = parse_int(flag, value);
    } else if (flag == "--frozen") {
      c.frozen.clear();
      std::string::size_type start = 0;
      while (start <= value.size()) {
        const std::string::size_type end = std::min(value.find(',', start), value.size());
        const std::string part = value.substr(start, end - start);
        if (part != "vision" && part != "merger" && part != "text") {
          throw std::runtime_error("--frozen: unknown part '" + part + "' (expected vision, merger or text)");
        }
        c.frozen.push_back(part);
        start = end + 1;
      }
    } else if (flag == "--flopmeter-library") {
      cli_library = absolute(value);
    } else if (flag == "--flopmeter-config") {
      c.flopmeter_config = absolute(value);
    } else if (flag == "--flopmeter-path") {
      if (value != "c_abi" && value != "tensor") {
        throw std::runtime_error("--flopmeter-path: expected c_abi or tensor, got '" + value + "'");
      }
      c.flopmeter_path = value;
    } else {
      throw std::runtime_error("unknown flag: " + flag);
    }
  }
  if (c.lora_rank < 0 || (c.lora_rank > 0) != !c.lora_targets.empty()) {
    throw std::runtime_error("--lora-rank R (> 0) and --lora-targets NAMES go together");
  }
  if (c.recompute == "none" && (c.recompute_every != 0 || c.recompute_vision)) {
    throw std::runtime_error("--recompute-every and --recompute-vision need --recompute POLICY");
  }
  if (c.recompute_every < 0) throw std::runtime_error("--recompute-every must be >= 1");
  if (c.steps < 1 || c.microbatches_per_step < 1 || c.log_interval_steps < 1 || c.threads < 1) {
    throw std::runtime_error("--steps, --microbatches, --log-interval and --threads must be >= 1");
  }
  const char* env_library = std::getenv("FLOPMETER_LIBRARY");
  if (!cli_library.empty()) {
    c.flopmeter_library = cli_library;
  } else if (env_library != nullptr && *env_library != '\0') {
    c.flopmeter_library = absolute(env_library);
  } else if (c.flopmeter_library.empty()) {
    c.flopmeter_library = default_library;
  }
  c.output_dir = absolute(c.output_dir);
  return c;
}

}  // namespace vlm
