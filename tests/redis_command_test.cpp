// The RESP the client sends (exact bytes, and the two passes agree) and the decoding of the
// script's reply. That the script accepts these commands is shown by redis_diff_test.cpp.
#include "core/redis_command.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "algo_test_util.h"
#include "core/redis_script.h"

namespace {

using rltest::kSec;

std::string decide(rl::CommandScript script, bool injected, std::string_view prefix,
                   const std::vector<rl::RedisCheck>& checks, int64_t now) {
    size_t len = rl::decide_command_len(script, injected, prefix, checks.data(), checks.size(), now);
    std::string buf(len, '?');
    EXPECT_EQ(rl::write_decide_command(buf.data(), script, injected, prefix, checks.data(), checks.size(), now), len);
    return buf;
}

TEST(RedisCommand, ExactBytesOfADecideCall) {
    rl::Policy p = rltest::policy(rl::Algo::gcra, 10, kSec, 2);  // refill 1, token 100000, depth 300000
    std::vector<rl::RedisCheck> checks(1);
    checks[0].zone = "api";
    checks[0].hash = rl::KeyHash{0x2, 0x1};  // lo, hi
    checks[0].policy = &p;
    checks[0].cost = 3;
    std::string want = std::string("*16\r\n$7\r\nEVALSHA\r\n$40\r\n") + rl::script_sha1(true) +
                       "\r\n$1\r\n1\r\n"
                       "$46\r\nrl:{api:00000000000000010000000000000002}:gcra\r\n"
                       "$6\r\ndecide\r\n$16\r\n1700000000000000\r\n"
                       "$1\r\n0\r\n$2\r\n10\r\n$7\r\n1000000\r\n$1\r\n2\r\n$1\r\n1\r\n$6\r\n100000\r\n"
                       "$6\r\n300000\r\n$7\r\n1000000\r\n$1\r\n3\r\n$1\r\n0\r\n";
    EXPECT_EQ(decide(rl::CommandScript::evalsha, true, "rl:", checks, 1700000000LL * kSec), want);

    // Production: its own script, and now is not sent.
    std::string prod = decide(rl::CommandScript::evalsha, false, "rl:", checks, 1700000000LL * kSec);
    EXPECT_NE(prod.find(rl::script_sha1(false)), std::string::npos);
    EXPECT_EQ(prod.find("1700000000000000"), std::string::npos);
    EXPECT_NE(prod.find("$6\r\ndecide\r\n$1\r\n0\r\n"), std::string::npos);
}

TEST(RedisCommand, EvalCarriesTheScript) {
    rl::Policy p = rltest::policy(rl::Algo::log, 5, kSec);
    std::vector<rl::RedisCheck> checks(1);
    checks[0].zone = "z";
    checks[0].policy = &p;
    std::string cmd = decide(rl::CommandScript::eval, false, "", checks, 0);
    std::string_view text = rl::script_text(false);
    std::string head = "*16\r\n$4\r\nEVAL\r\n$" + std::to_string(text.size()) + "\r\n";
    EXPECT_EQ(cmd.substr(0, head.size()), head);
    EXPECT_EQ(cmd.substr(head.size(), text.size()), text);
}

TEST(RedisCommand, ManyChecksAndRefunds) {
    rl::Policy pa = rltest::policy(rl::Algo::sliding, 1000000000, 86400 * kSec);
    rl::Policy pb = rltest::policy(rl::Algo::token, 7, 333333, 11);
    std::vector<rl::RedisCheck> checks(3);
    for (size_t i = 0; i < 3; i++) {
        checks[i].zone = i == 0 ? "a" : "zone-b";
        checks[i].hash = rl::KeyHash{i, ~i};
        checks[i].policy = i == 1 ? &pb : &pa;
        checks[i].cost = i == 2 ? -5 : (i == 1 ? int64_t{1} << 62 : 1);  // clamped to 0 and to 2^52
        checks[i].at = 1700000000LL * kSec + static_cast<int64_t>(i);
    }
    std::string cmd = decide(rl::CommandScript::evalsha, true, "p:", checks, -7);
    EXPECT_EQ(cmd.substr(0, 5), "*38\r\n");  // EVALSHA sha numkeys, 3 keys, mode now, 3 * 10
    EXPECT_NE(cmd.find("$2\r\n-7\r\n"), std::string::npos);
    EXPECT_NE(cmd.find("$16\r\n4503599627370496\r\n"), std::string::npos);  // 2^52
    EXPECT_EQ(cmd.find("-5"), std::string::npos);

    size_t len = rl::refund_command_len("p:", checks.data(), 3);
    std::string buf(len, '?');
    EXPECT_EQ(rl::write_refund_command(buf.data(), "p:", checks.data(), 3), len);
    EXPECT_NE(buf.find("$6\r\nrefund\r\n$1\r\n0\r\n"), std::string::npos);
    EXPECT_NE(buf.find(rl::script_sha1(false)), std::string::npos);
    EXPECT_NE(buf.find("$16\r\n1700000000000002\r\n"), std::string::npos);
}

TEST(RedisCommand, DecodeReply) {
    const int64_t ok[] = {0, 1700000000000000, 1, 4, 100, 0, 0, 0, 5000, -1};
    rl::Decision d[2];
    d[0].limit = 10;
    int64_t now = 0;
    ASSERT_TRUE(rl::decode_decide_reply(ok, 10, 2, d, &now));
    EXPECT_EQ(now, 1700000000000000);
    EXPECT_TRUE(d[0].allowed);
    EXPECT_EQ(d[0].remaining, 4);
    EXPECT_EQ(d[0].reset_us, 100);
    EXPECT_EQ(d[0].limit, 10);  // left to the caller
    EXPECT_FALSE(d[1].allowed);
    EXPECT_EQ(d[1].reset_us, 5000);
    EXPECT_EQ(d[1].retry_after_us, rl::kNever);

    rl::Decision untouched[2];
    const int64_t short_reply[] = {1, 5, 1, 0, 0};
    EXPECT_FALSE(rl::decode_decide_reply(short_reply, 5, 2, untouched, &now));
    const int64_t bad_all[] = {1, 5, 1, 0, 0, 0, 0, 0, 0, 7};  // all_allowed with a rejection
    EXPECT_FALSE(rl::decode_decide_reply(bad_all, 10, 2, untouched, &now));
    const int64_t bad_flag[] = {0, 5, 2, 0, 0, 0};
    EXPECT_FALSE(rl::decode_decide_reply(bad_flag, 6, 1, untouched, &now));
    const int64_t negative[] = {1, 5, 1, -1, 0, 0};
    EXPECT_FALSE(rl::decode_decide_reply(negative, 6, 1, untouched, &now));
    const int64_t bad_retry[] = {0, 5, 0, 0, 0, -2};
    EXPECT_FALSE(rl::decode_decide_reply(bad_retry, 6, 1, untouched, &now));
    EXPECT_FALSE(untouched[0].allowed);
    EXPECT_EQ(untouched[0].remaining, 0);
    EXPECT_FALSE(rl::decode_decide_reply(nullptr, 0, 0, untouched, &now));
    const int64_t empty[] = {1, 9};
    EXPECT_TRUE(rl::decode_decide_reply(empty, 2, 0, untouched, &now));
    EXPECT_EQ(now, 9);
}

}  // namespace
