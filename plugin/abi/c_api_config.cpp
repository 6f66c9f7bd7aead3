// The C ABI's typed configuration builder (flopmeter/c_api_config.h): a plugin document of typed values
// (accounting/plugin_document.h) that the setters fill and flopmeter_create_from_config hands to the one
// reader of plugin configs. Values set here carry no position, so the reader reports them by key path and
// value alone; values loaded from a file keep their file:line:col. Nothing is thrown across the C ABI.
#include "flopmeter/c_api.h"

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <filesystem>
#include <new>
#include <string>
#include <string_view>
#include <utility>

#include <toml++/toml.h>

#include "flopmeter/error.h"
#include "abi/abi_common.h"
#include "accounting/plugin_document.h"
#include "accounting/throughput_config.h"
#include "config/config_files.h"
#include "config/toml_reader.h"

// What a flopmeter_config* points to (an object the caller owns, not a registered handle).
struct flopmeter_config {
  toml::table root;         // the document: tables of typed values
  std::string source_name;  // the file it was loaded from, "" when built in code only
  std::string base_dir;     // where a relative model.config of the file resolves
};

namespace {

// Runs `body`, which returns an int code, turning every exception into FLOPMETER_E_REJECTED with its message.
template <class Body>
int report(char* error, std::size_t error_size, const Body& body) noexcept {
  try {
    return body();
  } catch (const std::bad_alloc&) {
    flopmeter::detail::write_abi_error(error, error_size, "out of memory");
  } catch (const std::exception& e) {
    flopmeter::detail::write_abi_error(error, error_size, e.what());
  } catch (...) {
    flopmeter::detail::write_abi_error(error, error_size, "unknown error");
  }
  return FLOPMETER_E_REJECTED;
}

// Sets `key` (checked against the schema) to `value`, a toml++ value without a source position.
template <class Value>
int set_value(flopmeter_config* cfg, const char* key, Value&& value, char* error, std::size_t error_size) {
  if (cfg == nullptr || key == nullptr) {
    flopmeter::detail::write_abi_error(error, error_size, cfg == nullptr ? "cfg is NULL" : "key is NULL");
    return FLOPMETER_E_NULL_ARGUMENT;
  }
  return report(error, error_size, [&] {
    const std::string_view path(key);
    flopmeter::detail::check_plugin_key_path(path);
    const std::size_t dot = path.find('.');
    const std::string table_name(path.substr(0, dot));
    toml::node* table = cfg->root.get(table_name);
    if (table == nullptr) table = &cfg->root.insert_or_assign(table_name, toml::table{}).first->second;
    // A loaded file that wrote the table as a value ("model = 'x'"): the reader's message, at its position.
    if (!table->is_table()) flopmeter::detail::toml_reader(cfg->source_name).fail_type(*table, table_name, "a table");
    table->as_table()->insert_or_assign(std::string(path.substr(dot + 1)), std::forward<Value>(value));
    return FLOPMETER_OK;
  });
}

}  // namespace

extern "C" {

flopmeter_config* flopmeter_config_new(void) { return new (std::nothrow) flopmeter_config(); }

void flopmeter_config_destroy(flopmeter_config* cfg) { delete cfg; }

int flopmeter_config_load_file(flopmeter_config* cfg, const char* path, char* error, size_t error_size) {
  if (cfg == nullptr || path == nullptr) {
    flopmeter::detail::write_abi_error(error, error_size, cfg == nullptr ? "cfg is NULL" : "path is NULL");
    return FLOPMETER_E_NULL_ARGUMENT;
  }
  return report(error, error_size, [&] {
    const std::string file(path);
    toml::table root =
        flopmeter::detail::parse_plugin_document(flopmeter::detail::read_file(file, "plugin config"), file);
    cfg->root = std::move(root);
    cfg->source_name = file;
    cfg->base_dir = std::filesystem::path(file).parent_path().string();
    return FLOPMETER_OK;
  });
}

int flopmeter_config_set_int(flopmeter_config* cfg, const char* key, int64_t value, char* error, size_t error_size) {
  return set_value(cfg, key, value, error, error_size);
}

int flopmeter_config_set_double(flopmeter_config* cfg, const char* key, double value, char* error, size_t error_size) {
  if (!std::isfinite(value) && cfg != nullptr && key != nullptr) {
    return report(error, error_size, [&]() -> int {
      const char* shown = std::isnan(value) ? "nan" : value > 0 ? "inf" : "-inf";
      throw flopmeter::error(flopmeter::error_location{"", 0, 0, key},
                             std::string("must be finite (got ") + shown + ")");
    });
  }
  return set_value(cfg, key, value, error, error_size);
}

int flopmeter_config_set_bool(flopmeter_config* cfg, const char* key, int value, char* error, size_t error_size) {
  return set_value(cfg, key, value != 0, error, error_size);
}

int flopmeter_config_set_string(flopmeter_config* cfg, const char* key, const char* value, char* error,
                                size_t error_size) {
  if (value == nullptr) {
    flopmeter::detail::write_abi_error(error, error_size, "value is NULL");
    return FLOPMETER_E_NULL_ARGUMENT;
  }
  return report(error, error_size, [&] {
    std::string text(value);
    // A relative model path set in code names a file from where the caller is now (c_api_config.h).
    if (key != nullptr && std::string_view(key) == "model.config" && !text.empty() &&
        std::filesystem::path(text).is_relative()) {
      std::error_code ec;
      const std::filesystem::path absolute = std::filesystem::absolute(text, ec);
      if (!ec) text = absolute.string();
    }
    return set_value(cfg, key, std::move(text), error, error_size);
  });
}

int flopmeter_config_set_string_list(flopmeter_config* cfg, const char* key, const char* const* values, size_t count,
                                     char* error, size_t error_size) {
  if (values == nullptr && count > 0) {
    flopmeter::detail::write_abi_error(error, error_size, "values is NULL with a non-zero count");
    return FLOPMETER_E_NULL_ARGUMENT;
  }
  return report(error, error_size, [&] {
    toml::array list;
    for (size_t i = 0; i < count; ++i) {
      if (values[i] == nullptr) {
        flopmeter::detail::write_abi_error(error, error_size, "values[" + std::to_string(i) + "] is NULL");
        return FLOPMETER_E_NULL_ARGUMENT;
      }
      list.push_back(std::string(values[i]));
    }
    return set_value(cfg, key, std::move(list), error, error_size);
  });
}

int flopmeter_config_small_allreduce(const flopmeter_config* cfg, int* out, char* error, size_t error_size) {
  if (cfg == nullptr || out == nullptr) {
    flopmeter::detail::write_abi_error(error, error_size, cfg == nullptr ? "cfg is NULL" : "out is NULL");
    return FLOPMETER_E_NULL_ARGUMENT;
  }
  return report(error, error_size, [&] {
    switch (flopmeter::detail::read_small_allreduce(cfg->root, cfg->source_name)) {
      case flopmeter::small_allreduce::automatic: *out = FLOPMETER_SMALL_ALLREDUCE_AUTOMATIC; break;
      case flopmeter::small_allreduce::backend: *out = FLOPMETER_SMALL_ALLREDUCE_BACKEND; break;
      case flopmeter::small_allreduce::log_depth: *out = FLOPMETER_SMALL_ALLREDUCE_LOG_DEPTH; break;
    }
    return FLOPMETER_OK;
  });
}

flopmeter_plugin* flopmeter_create_from_config(const flopmeter_config* cfg, const flopmeter_comm* comm, char* error,
                                               size_t error_size) {
  return flopmeter::detail::create_or_report(error, error_size, [&]() -> flopmeter_plugin* {
    if (cfg == nullptr) throw flopmeter::error("cfg is NULL");
    return flopmeter::detail::create_registered_plugin(
        cfg->source_name, flopmeter::detail::read_plugin_document(cfg->root, cfg->source_name, cfg->base_dir), comm);
  });
}

}  // extern "C"
