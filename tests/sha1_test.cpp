// SHA-1 against the FIPS 180 examples and lengths around the padding boundaries (the script's
// SHA-1 against Redis's own SCRIPT LOAD is checked in redis_diff_test.cpp).
#include "core/wire/sha1.h"

#include <gtest/gtest.h>

#include <string>

namespace {

std::string hex_of(const std::string& s) {
    char out[rl::kSha1HexLen + 1];
    rl::sha1_hex(s.data(), s.size(), out);
    return out;
}

TEST(Sha1, FipsExamples) {
    EXPECT_EQ(hex_of("abc"), "a9993e364706816aba3e25717850c26c9cd0d89d");
    EXPECT_EQ(hex_of(""), "da39a3ee5e6b4b0d3255bfef95601890afd80709");
    EXPECT_EQ(hex_of("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq"),
              "84983e441c3bd26ebaae4aa1f95129e5e54670f1");
    EXPECT_EQ(hex_of(std::string(1000000, 'a')), "34aa973cd4c4daa4f61eeb2bdbad27316534016f");
    EXPECT_EQ(hex_of("The quick brown fox jumps over the lazy dog"), "2fd4e1c67a2d28fced849ee1bb76e7391b93eb12");
}

// 55 bytes leave room for the length in the last block, 56 do not; 64 fill a block exactly.
TEST(Sha1, PaddingBoundaries) {
    const std::pair<size_t, const char*> kCases[] = {
        {55, "c1c8bbdc22796e28c0e15163d20899b65621d65a"},  {56, "c2db330f6083854c99d4b5bfb6e8f29f201be699"},
        {63, "03f09f5b158a7a8cdad920bddc29b81c18a551f5"},  {64, "0098ba824b5c16427bd7a1122a5a442a25ec644d"},
        {65, "11655326c708d70319be2610e8a57d9a5b959d3b"},  {119, "ee971065aaa017e0632a8ca6c77bb3bf8b1dfc56"},
        {120, "f34c1488385346a55709ba056ddd08280dd4c6d6"}, {128, "ad5b3fdbcb526778c2839d2f151ea753995e26a0"},
    };
    for (const auto& c : kCases) EXPECT_EQ(hex_of(std::string(c.first, 'a')), c.second) << c.first << " bytes";
}

TEST(Sha1, RawDigestMatchesHex) {
    uint8_t d[rl::kSha1Bytes];
    rl::sha1("abc", 3, d);
    EXPECT_EQ(d[0], 0xa9);
    EXPECT_EQ(d[19], 0x9d);
}

}  // namespace
