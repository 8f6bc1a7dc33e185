// SipHash-2-4-128 of limit keys: the published test vectors and the properties the table needs.
#include "core/keys/key_hash.h"

#include <gtest/gtest.h>

#include <cstring>
#include <set>
#include <string>
#include <utility>
#include <vector>

namespace {

// The reference key 00 01 .. 0f read as two little-endian words.
constexpr uint64_t kK0 = 0x0706050403020100ULL;
constexpr uint64_t kK1 = 0x0f0e0d0c0b0a0908ULL;

// vectors_sip128 of the reference implementation (github.com/veorq/SipHash, vectors.h):
// output bytes for messages 00 01 .. (n-1), n = 0..63, under the key above.
const char* const kVectors128[64] = {
    "a3817f04ba25a8e66df67214c7550293", "da87c1d86b99af44347659119b22fc45",
    "8177228da4a45dc7fca38bdef60affe4", "9c70b60c5267a94e5f33b6b02985ed51",
    "f88164c12d9c8faf7d0f6e7c7bcd5579", "1368875980776f8854527a07690e9627",
    "14eeca338b208613485ea0308fd7a15e", "a1f1ebbed8dbc153c0b84aa61ff08239",
    "3b62a9ba6258f5610f83e264f31497b4", "264499060ad9baabc47f8b02bb6d71ed",
    "00110dc378146956c95447d3f3d0fbba", "0151c568386b6677a2b4dc6f81e5dc18",
    "d626b266905ef35882634df68532c125", "9869e247e9c08b10d029934fc4b952f7",
    "31fcefac66d7de9c7ec7485fe4494902", "5493e99933b0a8117e08ec0f97cfc3d9",
    "6ee2a4ca67b054bbfd3315bf85230577", "473d06e8738db89854c066c47ae47740",
    "a426e5e423bf4885294da481feaef723", "78017731cf65fab074d5208952512eb1",
    "9e25fc833f2290733e9344a5e83839eb", "568e495abe525a218a2214cd3e071d12",
    "4a29b54552d16b9a469c10528eff0aae", "c9d184ddd5a9f5e0cf8ce29a9abf691c",
    "2db479ae78bd50d8882a8a178a6132ad", "8ece5f042d5e447b5051b9eacb8d8f6f",
    "9c0b53b4b3c307e87eaee08678141f66", "abf248af69a6eae4bfd3eb2f129eeb94",
    "0664da1668574b88b935f3027358aef4", "aa4b9dc4bf337de90cd4fd3c467c6ab7",
    "ea5c7f471faf6bde2b1ad7d4686d2287", "2939b0183223fafc1723de4f52c43d35",
    "7c3956ca5eeafc3e363e9d556546eb68", "77c6077146f01c32b6b69d5f4ea9ffcf",
    "37a6986cb8847edf0925f0f1309b54de", "a705f0e69da9a8f907241a2e923c8cc8",
    "3dc47d1f29c448461e9e76ed904f6711", "0d62bf01e6fc0e1a0d3c4751c5d3692b",
    "8c03468bca7c669ee4fd5e084bbee7b5", "528a5bb93baf2c9c4473cce5d0d22bd9",
    "df6a301e95c95dad97ae0cc8c6913bd8", "801189902c857f39e73591285e70b6db",
    "e617346ac9c231bb3650ae34ccca0c5b", "27d93437efb721aa401821dcec5adf89",
    "89237d9ded9c5e78d8b1c9b166cc7342", "4a6d8091bf5e7d651189fa94a250b14c",
    "0e33f96055e7ae893ffc0e3dcf492902", "e61c432b720b19d18ec8d84bdc63151b",
    "f7e5aef549f782cf379055a608269b16", "438d030fd0b7a54fa837f2ad201a6403",
    "a590d3ee4fbf04e3247e0d27f286423f", "5fe2c1a172fe93c4b15cd37caef9f538",
    "2c97325cbd06b36eb2133dd08b3a017c", "92c814227a6bca949ff0659f002ad39e",
    "dce850110bd8328cfbd50841d6911d87", "67f14984c7da791248e32bb5922583da",
    "1938f2cf72d54ee97e94166fa91d2a36", "74481e9646ed49fe0f6224301604698e",
    "57fca5de98a9d6d8006438d0583d8a1d", "9fecde1cefdc1cbed4763674d9575359",
    "e3040c00eb28f15366ca73cbd872e740", "7697009a6a831dfecca91c5993670f7a",
    "5853542321f567a005d547a4f04759bd", "5150d1772f50834a503e069a973fbd7c",
};

// The 16 output bytes: lo then hi, each little-endian.
std::string hex_of(const rl::KeyHash& h) {
    static const char* digits = "0123456789abcdef";
    std::string s;
    for (uint64_t w : {h.lo, h.hi}) {
        for (int i = 0; i < 8; i++) {
            unsigned b = static_cast<unsigned>(w >> (8 * i)) & 0xff;
            s += digits[b >> 4];
            s += digits[b & 15];
        }
    }
    return s;
}

std::vector<unsigned char> message(size_t n) {
    std::vector<unsigned char> m(n);
    for (size_t i = 0; i < n; i++) m[i] = static_cast<unsigned char>(i);
    return m;
}

rl::KeyHash hash(const std::string& s, uint64_t k0 = kK0, uint64_t k1 = kK1) {
    return rl::hash_key(s.data(), s.size(), k0, k1);
}

TEST(KeyHash, MatchesEveryOfficialVector) {
    for (size_t n = 0; n < 64; n++) {
        std::vector<unsigned char> m = message(n);
        EXPECT_EQ(hex_of(rl::hash_key(m.data(), n, kK0, kK1)), kVectors128[n]) << "length " << n;
    }
}

TEST(KeyHash, MatchesVectorsAtBlockBoundaries) {
    // Empty, partial first word, exact words, one past, and the longest vector.
    for (size_t n : {0u, 1u, 7u, 8u, 9u, 15u, 16u, 63u}) {
        std::vector<unsigned char> m = message(n);
        EXPECT_EQ(hex_of(rl::hash_key(m.data(), n, kK0, kK1)), kVectors128[n]) << "length " << n;
    }
}

TEST(KeyHash, LoAndHiAreTheOutputBytesReadLittleEndian) {
    rl::KeyHash h = rl::hash_key(nullptr, 0, kK0, kK1);  // vector 0: a3 81 7f 04 ... 02 93
    EXPECT_EQ(h.lo, 0xe6a825ba047f81a3ULL);
    EXPECT_EQ(h.hi, 0x930255c71472f66dULL);
}

TEST(KeyHash, DoesNotDependOnTheInputsAlignment) {
    std::vector<unsigned char> m = message(63);
    alignas(8) unsigned char buf[80];
    for (size_t off = 0; off < 8; off++) {
        std::memcpy(buf + off, m.data(), m.size());
        EXPECT_EQ(hex_of(rl::hash_key(buf + off, m.size(), kK0, kK1)), kVectors128[63]) << "offset " << off;
    }
}

TEST(KeyHash, SameInputSameHash) {
    const std::string key = "203.0.113.7|/api/v1/orders";
    EXPECT_EQ(hash(key), hash(std::string(key)));
    EXPECT_EQ(hash(key, rl::kDefaultHashK0, rl::kDefaultHashK1),
              hash(key, rl::kDefaultHashK0, rl::kDefaultHashK1));
}

TEST(KeyHash, DifferentKeysGiveDifferentHashes) {
    const std::string key = "203.0.113.7";
    const rl::KeyHash base = hash(key);
    EXPECT_FALSE(hash(key, kK0 ^ 1, kK1) == base);
    EXPECT_FALSE(hash(key, kK0, kK1 ^ 1) == base);
    EXPECT_FALSE(hash(key, kK1, kK0) == base);
    EXPECT_FALSE(hash(key, rl::kDefaultHashK0, rl::kDefaultHashK1) == base);
    // Each half differs too, not just the pair.
    rl::KeyHash other = hash(key, kK0 ^ (1ULL << 63), kK1);
    EXPECT_NE(other.lo, base.lo);
    EXPECT_NE(other.hi, base.hi);
}

TEST(KeyHash, DifferentInputsGiveDifferentHashes) {
    // Near misses a limit key sees: one byte off, a prefix, trailing zero bytes (the length is hashed).
    std::vector<std::string> inputs = {"", std::string(1, '\0'), std::string(2, '\0'), std::string(8, '\0'),
                                       "a", "b", "ab", "ba", "10.0.0.1", "10.0.0.10", std::string("10.0.0.1") + '\0'};
    std::set<std::pair<uint64_t, uint64_t>> seen;
    for (const std::string& s : inputs) {
        rl::KeyHash h = hash(s, rl::kDefaultHashK0, rl::kDefaultHashK1);
        EXPECT_TRUE(seen.insert({h.lo, h.hi}).second) << "collision for input of length " << s.size();
    }
    // Many sequential keys: no collision in either half.
    std::set<uint64_t> los, his;
    for (int i = 0; i < 20000; i++) {
        rl::KeyHash h = hash("user-" + std::to_string(i), rl::kDefaultHashK0, rl::kDefaultHashK1);
        EXPECT_TRUE(los.insert(h.lo).second);
        EXPECT_TRUE(his.insert(h.hi).second);
    }
}

}  // namespace
