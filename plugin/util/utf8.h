// plugin/util/utf8.h — internal: where a valid UTF-8 sequence ends, for the two writers that must not pass
// invalid UTF-8 on (the JSON writer, output/json_writer.cpp, and printable_text, util/printable_text.cpp).
// Header-only so that every object library that needs it has its own hidden copy.
// Thread-safety: pure.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>

namespace flopmeter::detail {

// Length of the valid UTF-8 sequence starting at text[i] (1-4), or 0 if the bytes there are not one:
// a continuation byte, an overlong form, a UTF-16 surrogate, a code point above U+10FFFF or a truncated
// sequence (RFC 3629, section 4).
inline std::size_t utf8_sequence_length(std::string_view text, std::size_t i) {
  const auto byte = [&](std::size_t k) { return static_cast<unsigned char>(text[k]); };
  const unsigned char lead = byte(i);
  std::size_t length = 0;
  std::uint32_t code = 0;
  if (lead < 0x80) return 1;
  if (lead >= 0xC2 && lead <= 0xDF) {  // 0xC0, 0xC1 would only start overlong forms of ASCII
    length = 2;
    code = lead & 0x1Fu;
  } else if (lead >= 0xE0 && lead <= 0xEF) {
    length = 3;
    code = lead & 0x0Fu;
  } else if (lead >= 0xF0 && lead <= 0xF4) {
    length = 4;
    code = lead & 0x07u;
  } else {
    return 0;  // a continuation byte, or a lead byte of a code point above U+10FFFF
  }
  if (i + length > text.size()) return 0;  // truncated
  for (std::size_t k = 1; k < length; ++k) {
    if ((byte(i + k) & 0xC0u) != 0x80u) return 0;
    code = (code << 6) | (byte(i + k) & 0x3Fu);
  }
  if ((length == 3 && code < 0x800) || (length == 4 && code < 0x10000)) return 0;  // overlong
  if (code >= 0xD800 && code <= 0xDFFF) return 0;                                  // UTF-16 surrogate
  if (code > 0x10FFFF) return 0;
  return length;
}

}  // namespace flopmeter::detail
