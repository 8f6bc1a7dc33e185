// A client's network: its address cut to a prefix length (ratelimit_client_prefix), so that a
// limit keyed on it is shared by the whole /24 or /64 rather than one address, which a client
// with an IPv6 /64 could rotate through.
#pragma once
#include <cstddef>
#include <cstdint>

namespace rl {

// The bounds and defaults of ratelimit_client_prefix's ipv4= and ipv6=.
constexpr unsigned kPrefixV4Max = 32;
constexpr unsigned kPrefixV6Max = 128;
constexpr unsigned kPrefixV4Default = 32;
constexpr unsigned kPrefixV6Default = 64;
// The longest result: an IPv6 address.
constexpr size_t kClientPrefixMaxLen = 16;

// The first `bits` bits of the `len`-byte address `addr`, the rest zeroed, in `out` (`len`
// bytes; may be `addr`). bits >= len * 8 copies the address; 0 zeroes it.
void cut_prefix(const uint8_t* addr, size_t len, unsigned bits, uint8_t* out);

// Whether the 16-byte IPv6 address is IPv4-mapped (::ffff:a.b.c.d).
bool is_v4_mapped(const uint8_t* addr16);

// A client's prefix in `out` (kClientPrefixMaxLen bytes at least); returns its length:
//  - IPv4 (`addr` 4 bytes): 4 bytes, cut to v4_bits;
//  - IPv6 (`addr` 16 bytes): 16 bytes cut to v6_bits, except an IPv4-mapped address, which
//    is the IPv4 client it stands for: 4 bytes (a.b.c.d) cut to v4_bits, the same key as
//    that client reaching the server over IPv4.
size_t client_prefix_v4(const uint8_t* addr4, unsigned v4_bits, uint8_t* out);
size_t client_prefix_v6(const uint8_t* addr16, unsigned v4_bits, unsigned v6_bits, uint8_t* out);

}  // namespace rl
