#include "core/keys/client_prefix.h"

namespace rl {

void cut_prefix(const uint8_t* addr, size_t len, unsigned bits, uint8_t* out) {
    for (size_t i = 0; i < len; i++) {
        if (bits >= 8) {
            out[i] = addr[i];
            bits -= 8;
        } else {
            // bits in 0..7: keep the high `bits` bits of this byte, then nothing.
            out[i] = static_cast<uint8_t>(addr[i] & static_cast<uint8_t>(0xff00u >> bits));
            bits = 0;
        }
    }
}

bool is_v4_mapped(const uint8_t* addr16) {
    for (int i = 0; i < 10; i++) {
        if (addr16[i] != 0) return false;
    }
    return addr16[10] == 0xff && addr16[11] == 0xff;
}

size_t client_prefix_v4(const uint8_t* addr4, unsigned v4_bits, uint8_t* out) {
    cut_prefix(addr4, 4, v4_bits, out);
    return 4;
}

size_t client_prefix_v6(const uint8_t* addr16, unsigned v4_bits, unsigned v6_bits, uint8_t* out) {
    if (is_v4_mapped(addr16)) return client_prefix_v4(addr16 + 12, v4_bits, out);
    cut_prefix(addr16, 16, v6_bits, out);
    return 16;
}

}  // namespace rl
