// plugin/output/tensorboard_records.h — the record framing of TensorBoard event files (private).
//
// An event file is a sequence of records (TensorFlow's TFRecord format):
//   uint64 length (little-endian) | uint32 masked_crc32c(the 8 length bytes) | data | uint32 masked_crc32c(data)
// where data is one serialized Event. CRC32C is the Castagnoli CRC (reflected polynomial 0x82F63B78, initial
// value and final XOR 0xFFFFFFFF; "123456789" -> 0xE3069283), and the mask is
//   ((crc >> 15) | (crc << 17)) + 0xA282EAD8   (mod 2^32)
// which TensorFlow applies so that a CRC stored inside CRC'd data does not make the outer CRC degenerate.
// Debian has no C/C++ CRC32C library, so this is a table-driven one (one byte per step; records are small).
//
// Thread-safety: pure functions.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace flopmeter::detail {

std::uint32_t crc32c(std::string_view data);
std::uint32_t masked_crc32c(std::string_view data);
// Appends one framed record holding `data` to `out`.
void append_tfrecord(std::string& out, std::string_view data);

}  // namespace flopmeter::detail
