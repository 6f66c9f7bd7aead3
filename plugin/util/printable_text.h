// plugin/util/printable_text.h — internal: quoting a value for a message, beside printable_text
// (flopmeter/error.h), the one escaping of text for terminals and logs. Not installed.
// Thread-safety: reentrant functions, no shared state.
#pragma once

#include <string>
#include <string_view>

namespace flopmeter::detail {

// `text` in double quotes for a message, through printable_text (flopmeter/error.h): control characters
// (C0, DEL, C1) written as \u00XX and invalid UTF-8 as \xHH, so that a value from a hostile file cannot drive
// the user's terminal when the message is printed.
std::string quoted(std::string_view text);

}  // namespace flopmeter::detail
