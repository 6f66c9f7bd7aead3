// CRC32C and TFRecord framing (see tensorboard_records.h).
#include "output/tensorboard_records.h"

#include <array>

namespace flopmeter::detail {
namespace {

// The byte-at-a-time table of the reflected Castagnoli polynomial: entry b is the CRC register after
// shifting byte b through eight steps of "shift right, XOR the polynomial if the bit shifted out was 1".
constexpr std::uint32_t kCastagnoliReflected = 0x82F63B78u;

constexpr std::array<std::uint32_t, 256> make_table() {
  std::array<std::uint32_t, 256> table{};
  for (std::uint32_t b = 0; b < 256; ++b) {
    std::uint32_t crc = b;
    for (int bit = 0; bit < 8; ++bit) crc = (crc & 1u) ? (crc >> 1) ^ kCastagnoliReflected : crc >> 1;
    table[b] = crc;
  }
  return table;
}

constexpr std::array<std::uint32_t, 256> kTable = make_table();

void append_le(std::string& out, std::uint64_t value, int bytes) {
  for (int i = 0; i < bytes; ++i) out.push_back(static_cast<char>((value >> (8 * i)) & 0xFFu));
}

}  // namespace

std::uint32_t crc32c(std::string_view data) {
  std::uint32_t crc = 0xFFFFFFFFu;
  for (const char c : data) crc = (crc >> 8) ^ kTable[(crc ^ static_cast<unsigned char>(c)) & 0xFFu];
  return crc ^ 0xFFFFFFFFu;
}

std::uint32_t masked_crc32c(std::string_view data) {
  const std::uint32_t crc = crc32c(data);
  return ((crc >> 15) | (crc << 17)) + 0xA282EAD8u;  // unsigned: wraps mod 2^32 by definition
}

void append_tfrecord(std::string& out, std::string_view data) {
  std::string length;
  append_le(length, data.size(), 8);
  out += length;
  append_le(out, masked_crc32c(length), 4);
  out.append(data);
  append_le(out, masked_crc32c(data), 4);
}

}  // namespace flopmeter::detail
