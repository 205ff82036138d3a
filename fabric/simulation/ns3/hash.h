// The select hash of fabric/routing/hashing.py: CRC-32 of the 5-tuple and the
// switch's basis, then MurmurHash3's finaliser.
#pragma once

#include <cstddef>
#include <cstdint>

namespace fabric {

inline uint32_t Crc32(const uint8_t* data, size_t len) {
  static uint32_t table[256];
  static bool ready = false;
  if (!ready) {
    for (uint32_t i = 0; i < 256; ++i) {
      uint32_t c = i;
      for (int k = 0; k < 8; ++k) c = (c & 1) ? 0xEDB88320u ^ (c >> 1) : c >> 1;
      table[i] = c;
    }
    ready = true;
  }
  uint32_t c = 0xFFFFFFFFu;
  for (size_t i = 0; i < len; ++i) c = table[(c ^ data[i]) & 0xFF] ^ (c >> 8);
  return c ^ 0xFFFFFFFFu;
}

inline uint32_t Fmix32(uint32_t h) {
  h ^= h >> 16;
  h *= 0x85EBCA6Bu;
  h ^= h >> 13;
  h *= 0xC2B2AE35u;
  return h ^ (h >> 16);
}

// fabric/routing/hashing.py: struct.pack("!IIBHHI", src, dst, proto, sport, dport, basis)
inline uint32_t SelectHash(uint32_t src, uint32_t dst, uint8_t proto, uint16_t sport,
                           uint16_t dport, uint32_t basis) {
  uint8_t key[17];
  auto put32 = [&](int at, uint32_t v) {
    key[at] = v >> 24; key[at + 1] = v >> 16; key[at + 2] = v >> 8; key[at + 3] = v;
  };
  put32(0, src);
  put32(4, dst);
  key[8] = proto;
  key[9] = sport >> 8; key[10] = sport & 0xFF;
  key[11] = dport >> 8; key[12] = dport & 0xFF;
  put32(13, basis);
  return Fmix32(Crc32(key, sizeof key));
}

}  // namespace fabric
