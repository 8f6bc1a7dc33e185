// rl::client_prefix_v4/v6 (ratelimit_client_prefix): the address cut to its prefix, the bits
// beyond it zeroed; an IPv4-mapped IPv6 address is its IPv4 client.
#include "core/keys/client_prefix.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>

#include <string>

namespace {

// The prefix of a textual address, as text (inet_ntop of its 4 or 16 bytes).
std::string prefix(const char* text, unsigned v4_bits, unsigned v6_bits) {
    uint8_t addr[16];
    uint8_t out[rl::kClientPrefixMaxLen + 1];
    out[rl::kClientPrefixMaxLen] = 0xa5;  // a guard: nothing is written past the longest result
    size_t len;
    if (inet_pton(AF_INET, text, addr) == 1) {
        len = rl::client_prefix_v4(addr, v4_bits, out);
    } else if (inet_pton(AF_INET6, text, addr) == 1) {
        len = rl::client_prefix_v6(addr, v4_bits, v6_bits, out);
    } else {
        ADD_FAILURE() << "not an address: " << text;
        return {};
    }
    EXPECT_EQ(out[rl::kClientPrefixMaxLen], 0xa5);
    char buf[INET6_ADDRSTRLEN];
    if (len == 4) return inet_ntop(AF_INET, out, buf, sizeof(buf));
    EXPECT_EQ(len, 16u);
    return inet_ntop(AF_INET6, out, buf, sizeof(buf));
}

// A textual IPv6 address as inet_ntop writes it.
std::string canonical(const char* text) {
    uint8_t addr[16];
    char buf[INET6_ADDRSTRLEN];
    EXPECT_EQ(inet_pton(AF_INET6, text, addr), 1) << text;
    return inet_ntop(AF_INET6, addr, buf, sizeof(buf));
}

std::string v4(const char* text, unsigned bits) { return prefix(text, bits, rl::kPrefixV6Default); }
std::string v6(const char* text, unsigned bits) { return prefix(text, rl::kPrefixV4Default, bits); }

TEST(ClientPrefix, Defaults) {
    EXPECT_EQ(rl::kPrefixV4Default, 32u);
    EXPECT_EQ(rl::kPrefixV6Default, 64u);
    EXPECT_EQ(prefix("10.1.2.3", rl::kPrefixV4Default, rl::kPrefixV6Default), "10.1.2.3");
    EXPECT_EQ(prefix("2001:db8:1:2:aaaa:bbbb:cccc:dddd", rl::kPrefixV4Default, rl::kPrefixV6Default), "2001:db8:1:2::");
}

TEST(ClientPrefix, Ipv4) {
    EXPECT_EQ(v4("10.1.2.3", 32), "10.1.2.3");  // the widest: the address itself
    EXPECT_EQ(v4("255.255.255.255", 32), "255.255.255.255");
    EXPECT_EQ(v4("10.1.2.3", 31), "10.1.2.2");
    EXPECT_EQ(v4("10.1.2.3", 24), "10.1.2.0");
    EXPECT_EQ(v4("10.1.2.200", 24), "10.1.2.0");
    EXPECT_EQ(v4("10.1.3.1", 24), "10.1.3.0");
    EXPECT_EQ(v4("10.1.255.255", 20), "10.1.240.0");  // within a byte
    EXPECT_EQ(v4("10.1.2.3", 16), "10.1.0.0");
    EXPECT_EQ(v4("10.255.2.3", 9), "10.128.0.0");
    EXPECT_EQ(v4("255.255.255.255", 8), "255.0.0.0");
    EXPECT_EQ(v4("255.255.255.255", 1), "128.0.0.0");  // the narrowest the directive takes
    EXPECT_EQ(v4("127.255.255.255", 1), "0.0.0.0");
}

TEST(ClientPrefix, Ipv6) {
    EXPECT_EQ(v6("2001:db8:1:2::1", 64), "2001:db8:1:2::");
    EXPECT_EQ(v6("2001:db8:1:2::ffff", 64), "2001:db8:1:2::");
    EXPECT_EQ(v6("2001:db8:1:2:ffff:ffff:ffff:ffff", 64), "2001:db8:1:2::");
    EXPECT_EQ(v6("2001:db8:1:3::1", 64), "2001:db8:1:3::");
    EXPECT_EQ(v6("2001:db8:1:3::1", 48), "2001:db8:1::");
    EXPECT_EQ(v6("2001:db8:1:2::1", 128), "2001:db8:1:2::1");  // the widest: the address itself
    EXPECT_EQ(v6("2001:db8::ffff:ffff", 128), "2001:db8::ffff:ffff");
    EXPECT_EQ(v6("2001:db8::ffff:ffff", 127), "2001:db8::ffff:fffe");
    EXPECT_EQ(v6("2001:db8::3", 127), "2001:db8::2");
    EXPECT_EQ(v6("2001:db8:ffff::", 36), "2001:db8:f000::");  // within a byte
    EXPECT_EQ(v6("2001:db8:1:2::1", 61), "2001:db8:1::");    // 2 = 0b0010: its last 3 bits cut
    EXPECT_EQ(v6("2001:db8:1:f::1", 61), "2001:db8:1:8::");
    EXPECT_EQ(v6("ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff", 1), "8000::");  // the narrowest
    EXPECT_EQ(v6("7fff::1", 1), "::");
    EXPECT_EQ(v6("::1", 128), "::1");
    EXPECT_EQ(v6("::1", 127), "::");
}

// ::ffff:a.b.c.d is the IPv4 client a.b.c.d (a dual-stack socket's view of it): 4 bytes, cut
// to the IPv4 prefix, the same key as that client over IPv4.
TEST(ClientPrefix, MappedIpv4IsIpv4) {
    EXPECT_EQ(prefix("::ffff:10.1.2.3", 32, 64), "10.1.2.3");
    EXPECT_EQ(prefix("::ffff:10.1.2.3", 24, 64), "10.1.2.0");
    EXPECT_EQ(prefix("::ffff:10.1.2.200", 24, 128), "10.1.2.0");
    EXPECT_EQ(prefix("::ffff:10.1.2.3", 24, 64), prefix("10.1.2.3", 24, 64));
    EXPECT_EQ(prefix("::ffff:255.255.255.255", 1, 128), "128.0.0.0");
    // Not mapped: IPv4-compatible (::a.b.c.d), NAT64 and one bit off the mapped form.
    // Each is an IPv6 client: 16 bytes, whole at /128 (not 10.1.2.0).
    for (const char* a : {"::10.1.2.3", "64:ff9b::10.1.2.3", "::fffe:10.1.2.3", "::1:ffff:10.1.2.3"}) {
        EXPECT_EQ(prefix(a, 24, 128), canonical(a)) << a;
    }
    EXPECT_EQ(prefix("::1:ffff:10.1.2.3", 24, 64), "::");
}

TEST(ClientPrefix, MappedDetection) {
    uint8_t a[16] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 10, 1, 2, 3};
    EXPECT_TRUE(rl::is_v4_mapped(a));
    for (int i = 0; i < 12; i++) {
        uint8_t b[16];
        for (int j = 0; j < 16; j++) b[j] = a[j];
        b[i] ^= 1;
        EXPECT_FALSE(rl::is_v4_mapped(b)) << "byte " << i;
    }
}

// Every length of every byte: the high `bits` bits kept, the rest zero; and in place.
TEST(ClientPrefix, CutEveryLength) {
    for (unsigned bits = 0; bits <= 128; bits++) {
        uint8_t ones[16];
        for (auto& b : ones) b = 0xff;
        uint8_t out[16];
        rl::cut_prefix(ones, 16, bits, out);
        for (unsigned i = 0; i < 128; i++) {
            bool set = (out[i / 8] >> (7 - i % 8)) & 1;
            ASSERT_EQ(set, i < bits) << "/" << bits << " bit " << i;
        }
        rl::cut_prefix(ones, 16, bits, ones);
        for (int i = 0; i < 16; i++) ASSERT_EQ(ones[i], out[i]) << "/" << bits << " in place";
    }
    // Beyond the width: the address itself.
    uint8_t a[4] = {1, 2, 3, 4};
    uint8_t out[4];
    rl::cut_prefix(a, 4, 200, out);
    EXPECT_EQ(out[0] + out[1] + out[2] + out[3], 10);
    EXPECT_EQ(out[3], 4);
}

}  // namespace
