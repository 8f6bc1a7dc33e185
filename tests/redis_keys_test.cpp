// Redis key layout and Redis Cluster slots: the published CRC16 and CLUSTER KEYSLOT values,
// then a real redis-server in cluster mode on hundreds of generated keys.
#include "core/wire/redis_keys.h"

#include <gtest/gtest.h>

#include <random>
#include <string>
#include <vector>

#include "redis_test_server.h"

namespace {

std::string key_of(std::string_view prefix, std::string_view zone, rl::KeyHash h, rl::Algo a) {
    std::string k(rl::redis_key_len(prefix, zone, a), '?');
    EXPECT_EQ(rl::redis_key(k.data(), prefix, zone, h, a), k.size());
    return k;
}

const rl::Algo kAll[] = {rl::Algo::gcra, rl::Algo::token, rl::Algo::leaky,
                         rl::Algo::fixed, rl::Algo::sliding, rl::Algo::log, rl::Algo::concurrency};

TEST(RedisKey, Layout) {
    rl::KeyHash h;
    h.lo = 0x0123456789abcdefULL;
    h.hi = 0xfedcba9876543210ULL;
    EXPECT_EQ(key_of("rl:", "api", h, rl::Algo::gcra), "rl:{api:fedcba98765432100123456789abcdef}:gcra");
    EXPECT_EQ(key_of("", "z", rl::KeyHash{}, rl::Algo::sliding), "{z:00000000000000000000000000000000}:sliding");
    for (rl::Algo a : kAll) {
        EXPECT_LE(rl::redis_key_len("p:", "zone", a), rl::redis_key_max_len("p:", "zone"));
    }
    EXPECT_EQ(rl::redis_key_len("p:", "zone", rl::Algo::concurrency), rl::redis_key_max_len("p:", "zone"));
    EXPECT_EQ(key_of("", "c", rl::KeyHash{}, rl::Algo::concurrency), "{c:00000000000000000000000000000000}:concurrency");
}

std::string member_of(uint64_t owner, uint64_t seq, uint64_t i = 0) {
    std::string m(rl::concurrency_member_len(owner, seq, i), '?');
    EXPECT_EQ(rl::concurrency_member(m.data(), owner, seq, i), m.size());
    EXPECT_LE(m.size(), rl::kMemberMaxLen);
    return m;
}

// "<owner>.<seq + i>" in decimal, owner and seq masked to what the Lua's doubles hold exactly.
TEST(ConcurrencyMember, Decimal) {
    EXPECT_EQ(member_of(0, 0), "0.0");
    EXPECT_EQ(member_of(123456789, 42), "123456789.42");
    EXPECT_EQ(member_of(7, 41, 1), "7.42");
    EXPECT_EQ(member_of(rl::kOwnerMask, rl::kSeqMask), "281474976710655.4503599627370495");
    EXPECT_EQ(member_of(rl::kOwnerMask, rl::kSeqMask, 3), "281474976710655.4503599627370498");
    EXPECT_EQ(member_of(rl::kOwnerMask + 2, rl::kSeqMask + 6), "1.5");
    EXPECT_EQ(rl::concurrency_member_len(~uint64_t{0}, ~uint64_t{0}, 1000000), rl::kMemberMaxLen);
}

// Every algorithm's state for one key lives in one slot; keys of a zone spread over slots.
TEST(RedisKey, HashTagIsZoneAndHash) {
    std::mt19937_64 rng(5);
    std::vector<int> used(rl::kClusterSlots, 0);
    for (int i = 0; i < 2000; i++) {
        rl::KeyHash h{rng(), rng()};
        uint16_t slot = rl::cluster_slot(key_of("rl:", "api", h, rl::Algo::gcra));
        for (rl::Algo a : kAll) EXPECT_EQ(rl::cluster_slot(key_of("other-prefix:", "api", h, a)), slot);
        used[slot]++;
    }
    int distinct = 0;
    for (int n : used) distinct += n > 0;
    EXPECT_GT(distinct, 1800);  // 2000 keys over 16384 slots: few collisions
}

TEST(ClusterSlot, PublishedValues) {
    EXPECT_EQ(rl::crc16_xmodem("123456789", 9), 0x31C3);  // the check value of CRC-16/XMODEM
    EXPECT_EQ(rl::cluster_slot("foo"), 12182);
    EXPECT_EQ(rl::cluster_slot("somekey"), 11058);
    EXPECT_EQ(rl::cluster_slot("foo{hash_tag}"), 2515);
    EXPECT_EQ(rl::cluster_slot("bar{hash_tag}"), 2515);
    EXPECT_EQ(rl::cluster_slot("{user1000}.following"), rl::cluster_slot("user1000"));
    EXPECT_EQ(rl::cluster_slot("{user1000}.followers"), rl::cluster_slot("user1000"));
    EXPECT_EQ(rl::cluster_slot(""), 0);
}

TEST(ClusterSlot, HashTagRules) {
    EXPECT_EQ(rl::cluster_slot("foo{}{bar}"), rl::crc16_xmodem("foo{}{bar}", 10) % 16384);  // empty tag: whole key
    EXPECT_EQ(rl::cluster_slot("foo{{bar}}zap"), rl::cluster_slot("{bar"));  // the tag is "{bar"
    EXPECT_EQ(rl::cluster_slot("foo{bar}{zap}"), rl::cluster_slot("bar"));   // only the first tag
    EXPECT_EQ(rl::cluster_slot("foo}{bar}"), rl::cluster_slot("bar"));       // a '}' before the '{' is nothing
    EXPECT_EQ(rl::cluster_slot("foo{bar"), rl::crc16_xmodem("foo{bar", 7) % 16384);  // unclosed: whole key
}

// What a real cluster node says, for keys as the module writes them and for awkward strings.
TEST(ClusterSlot, MatchesRedisClusterKeyslot) {
    rltest::RedisServer server({"--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf"});
    ASSERT_TRUE(server.ready()) << server.error();
    rltest::Context c = server.connect();
    ASSERT_TRUE(c && c->err == 0);

    std::mt19937_64 rng(11);
    std::vector<std::string> keys;
    const std::string alphabet = "ab:{}{}_-\x01\xff";
    for (int i = 0; i < 300; i++) {
        std::string prefix = i % 3 == 0 ? "" : "rl" + std::to_string(rng() % 100) + ":";
        std::string zone = "zone" + std::to_string(rng() % 1000);
        keys.push_back(key_of(prefix, zone, rl::KeyHash{rng(), rng()}, kAll[rng() % 6]));
    }
    for (int i = 0; i < 300; i++) {
        std::string k;
        size_t len = rng() % 14;
        for (size_t j = 0; j < len; j++) k += alphabet[rng() % alphabet.size()];
        keys.push_back(k);
    }
    for (const char* k : {"foo", "", "{}", "{", "}", "}{", "{a}", "{{}}", "a{b}c{d}e"}) keys.push_back(k);

    for (size_t i = 0; i < keys.size(); i++) rltest::append(c.get(), {"CLUSTER", "KEYSLOT", keys[i]});
    for (const std::string& k : keys) {
        rltest::Reply r = rltest::next_reply(c.get());
        ASSERT_TRUE(r && r->type == REDIS_REPLY_INTEGER) << (r && r->type == REDIS_REPLY_ERROR ? r->str : "");
        EXPECT_EQ(rl::cluster_slot(k), r->integer) << "key \"" << k << "\"";
    }
    std::printf("cluster slots: %zu keys agree with CLUSTER KEYSLOT\n", keys.size());
}

}  // namespace
