#pragma once
/// CRC-32C (Castagnoli, reflected polynomial 0x82F63B78) and TFRecord's masked form. Pure
/// functions, thread-safe.
#include <cstddef>
#include <cstdint>

namespace volt::detail {

/// CRC-32C of `n` bytes, continuing from `crc` (0 to start). crc32c("123456789") == 0xE3069283.
uint32_t crc32c(const void* data, size_t n, uint32_t crc = 0);
/// TFRecord's mask: rotate right by 15 and add 0xa282ead8, so a CRC stored next to the data it
/// covers does not checksum to a fixed value.
inline uint32_t mask_crc32c(uint32_t crc) { return ((crc >> 15) | (crc << 17)) + 0xa282ead8u; }
inline uint32_t unmask_crc32c(uint32_t masked) {
  const uint32_t rot = masked - 0xa282ead8u;
  return (rot >> 17) | (rot << 15);
}

}  // namespace volt::detail
