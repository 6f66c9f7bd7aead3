// plugin/core/hf_config.h — internal: the limits of the config.json loader. Not installed.
#pragma once

namespace flopmeter::detail {

// Deepest nesting of objects and arrays a config.json may have (Hugging Face configs use 3); deeper
// documents are refused while parsing, before a value is built.
constexpr int kMaxJsonDepth = 64;

}  // namespace flopmeter::detail
