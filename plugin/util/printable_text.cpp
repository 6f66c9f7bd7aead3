// printable_text (flopmeter/error.h): the one escaping of text for terminals and logs. detail::quoted
// (printable_text.h), the tool's output and every error's message go through it.
#include "util/printable_text.h"

#include <string>
#include <string_view>

#include "util/utf8.h"
#include "flopmeter/error.h"

namespace flopmeter {

std::string printable_text(std::string_view text, bool keep_newlines) {
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out;
  out.reserve(text.size());
  const auto escape = [&](const char* prefix, unsigned char value) {
    out += prefix;
    out.push_back(kHex[value >> 4]);
    out.push_back(kHex[value & 0xF]);
  };
  for (std::size_t i = 0; i < text.size();) {
    const auto c = static_cast<unsigned char>(text[i]);
    if (c >= 0x80) {
      const std::size_t length = detail::utf8_sequence_length(text, i);
      if (length == 0) {
        escape("\\x", c);  // not UTF-8: the byte's value, never the byte (a raw 0x9B is CSI to an 8-bit terminal)
        i += 1;
      } else if (length == 2 && c == 0xC2 && static_cast<unsigned char>(text[i + 1]) < 0xA0) {
        escape("\\u00", static_cast<unsigned char>(text[i + 1]));  // U+0080-U+009F: C1 controls
        i += 2;
      } else {
        out.append(text.substr(i, length));
        i += length;
      }
      continue;
    }
    if ((c < 0x20 || c == 0x7F) && !(keep_newlines && (c == '\n' || c == '\t'))) {
      escape("\\u00", c);
    } else {
      out.push_back(static_cast<char>(c));
    }
    ++i;
  }
  return out;
}

std::string detail::quoted(std::string_view text) { return "\"" + printable_text(text) + "\""; }

}  // namespace flopmeter
