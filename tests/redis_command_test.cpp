// The RESP the client sends (exact bytes, and the two passes agree) and the decoding of the
// script's reply. That the script accepts these commands is shown by redis_diff_test.cpp.
#include "core/wire/redis_command.h"

#include <gtest/gtest.h>

#include <cstring>
#include <initializer_list>
#include <random>
#include <string>
#include <vector>

#include "algo_test_util.h"
#include "packed_doubles.h"
#include "core/algo/block.h"
#include "core/algo/settle.h"
#include "core/wire/redis_script.h"

namespace {

using rltest::doubles;
using rltest::kSec;

std::string decide(rl::CommandScript script, bool injected, std::string_view prefix,
                   const std::vector<rl::RedisCheck>& checks, int64_t now) {
    size_t len = rl::decide_command_len(script, injected, prefix, checks.data(), checks.size(), now);
    std::string buf(len, '?');
    EXPECT_EQ(rl::write_decide_command(buf.data(), script, injected, prefix, checks.data(), checks.size(), now), len);
    return buf;
}

TEST(RedisCommand, DoublesAreLittleEndian) {
    EXPECT_EQ(doubles({1}), std::string("\0\0\0\0\0\0\xf0\x3f", 8));
    EXPECT_EQ(doubles({1000000}), std::string("\0\0\0\0\x80\x84\x2e\x41", 8));
    EXPECT_EQ(doubles({4503599627370496.0}), std::string("\0\0\0\0\0\0\x30\x43", 8));  // 2^52
}

TEST(RedisCommand, ExactBytesOfADecideCall) {
    rl::Policy p = rltest::policy(rl::Algo::gcra, 10, kSec, 2);  // refill 1, token 100000, depth 300000
    std::vector<rl::RedisCheck> checks(1);
    checks[0].zone = "api";
    checks[0].hash = rl::KeyHash{0x2, 0x1};  // lo, hi
    checks[0].policy = &p;
    checks[0].cost = 3;
    // One group of one check: algo requests period burst refill token depth wscale cost at
    // delay_level max_delay_units block_us.
    std::string want = std::string("*7\r\n$7\r\nEVALSHA\r\n$40\r\n") + rl::script_sha1(true) +
                       "\r\n$1\r\n1\r\n"
                       "$46\r\nrl:{api:00000000000000010000000000000002}:gcra\r\n"
                       "$6\r\ndecide\r\n$16\r\n1700000000000000\r\n$112\r\n" +
                       doubles({1, 0, 10, 1000000, 2, 1, 100000, 300000, 1000000, 3, 0, -1, -1, 0}) + "\r\n";
    EXPECT_EQ(decide(rl::CommandScript::evalsha, true, "rl:", checks, 1700000000LL * kSec), want);

    // Production: its own script, and now is not sent.
    std::string prod = decide(rl::CommandScript::evalsha, false, "rl:", checks, 1700000000LL * kSec);
    EXPECT_NE(prod.find(rl::script_sha1(false)), std::string::npos);
    EXPECT_EQ(prod.find("1700000000000000"), std::string::npos);
    EXPECT_NE(prod.find("$6\r\ndecide\r\n$1\r\n0\r\n$112\r\n"), std::string::npos);

    // FCALL: the function's name in place of EVALSHA's sha1, the rest alike.
    const std::string tail = want.substr(want.find("\r\n$1\r\n1\r\n"));
    EXPECT_EQ(decide(rl::CommandScript::fcall, true, "rl:", checks, 1700000000LL * kSec),
              std::string("*7\r\n$5\r\nFCALL\r\n$26\r\n") + rl::function_name(true) + tail);
    std::string fprod = decide(rl::CommandScript::fcall, false, "rl:", checks, 1700000000LL * kSec);
    EXPECT_EQ(fprod, std::string("*7\r\n$5\r\nFCALL\r\n$26\r\n") + rl::function_name(false) +
                         prod.substr(prod.find("\r\n$1\r\n1\r\n")));
}

TEST(RedisCommand, EvalCarriesTheScript) {
    rl::Policy p = rltest::policy(rl::Algo::log, 5, kSec);
    std::vector<rl::RedisCheck> checks(1);
    checks[0].zone = "z";
    checks[0].policy = &p;
    std::string cmd = decide(rl::CommandScript::eval, false, "", checks, 0);
    std::string_view text = rl::script_text(false);
    std::string head = "*7\r\n$4\r\nEVAL\r\n$" + std::to_string(text.size()) + "\r\n";
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
    EXPECT_EQ(cmd.substr(0, 4), "*9\r\n");  // EVALSHA sha numkeys, 3 keys, mode now checks
    EXPECT_NE(cmd.find("$2\r\n-7\r\n$320\r\n"), std::string::npos);  // 8 + 3 * 104 bytes
    EXPECT_NE(cmd.find(doubles({4503599627370496.0, 1700000000000001.0})), std::string::npos);  // 2^52, at
    EXPECT_NE(cmd.find(doubles({0, 1700000000000002.0})), std::string::npos);  // cost -5 clamped, at

    size_t len = rl::refund_command_len("p:", checks.data(), 3);
    std::string buf(len, '?');
    EXPECT_EQ(rl::write_refund_command(buf.data(), "p:", checks.data(), 3), len);
    EXPECT_NE(buf.find("$6\r\nrefund\r\n$1\r\n0\r\n$320\r\n"), std::string::npos);
    EXPECT_NE(buf.find(rl::script_sha1(false)), std::string::npos);
    EXPECT_NE(buf.find(doubles({1700000000000002.0})), std::string::npos);
}

// A settle's charge and refund carry a call id as ARGV[4] (cut at kCallIdMax bytes); without
// one, the call is the same bytes as before ids existed (3 ARGV).
TEST(RedisCommand, SettleCallId) {
    rl::Policy p = rltest::policy(rl::Algo::token, 7, 333333, 11);
    rl::RedisCheck c;
    c.zone = "z";
    c.hash = rl::KeyHash{1, 2};
    c.policy = &p;
    c.cost = 3;
    auto charge = [&](std::string_view id) {
        std::string cmd(rl::charge_command(nullptr, rl::CommandScript::fcall, false, "p:", &c, 1, 0, id), '?');
        EXPECT_EQ(rl::charge_command(cmd.data(), rl::CommandScript::fcall, false, "p:", &c, 1, 0, id), cmd.size());
        return cmd;
    };
    const std::string none = charge(""), with = charge("ab.1f");
    EXPECT_EQ(none.substr(0, 4), "*7\r\n");  // FCALL name numkeys, 1 key, mode now checks
    EXPECT_EQ(with, "*8" + none.substr(2) + "$5\r\nab.1f\r\n");
    const std::string cut = charge(std::string(rl::kCallIdMax + 1, 'x'));
    EXPECT_EQ(cut, "*8" + none.substr(2) + "$64\r\n" + std::string(rl::kCallIdMax, 'x') + "\r\n");

    std::string refund(rl::refund_command_len("p:", &c, 1, rl::CommandScript::evalsha, "ab.20"), '?');
    EXPECT_EQ(rl::write_refund_command(refund.data(), "p:", &c, 1, rl::CommandScript::evalsha, "ab.20"), refund.size());
    std::string plain(rl::refund_command_len("p:", &c, 1), '?');
    rl::write_refund_command(plain.data(), "p:", &c, 1);
    EXPECT_EQ(refund, "*8" + plain.substr(2) + "$5\r\nab.20\r\n");
}

// A concurrency check's record carries the slot's owner in burst's place and its seq in at's,
// both masked to what a double holds exactly.
TEST(RedisCommand, ConcurrencyRecord) {
    rl::Policy p = rltest::policy(rl::Algo::concurrency, 3, 30 * kSec);  // refill 1, token 10^7, depth 3
    std::vector<rl::RedisCheck> checks(1);
    checks[0].zone = "api";
    checks[0].hash = rl::KeyHash{0x2, 0x1};
    checks[0].policy = &p;
    checks[0].cost = 1;
    checks[0].at = 99;  // not sent: a slot is named by owner and seq
    checks[0].owner = 281474976710655ULL;
    checks[0].seq = (uint64_t{1} << 52) + 12;  // masked to 12
    std::string want = std::string("*7\r\n$7\r\nEVALSHA\r\n$40\r\n") + rl::script_sha1(true) +
                       "\r\n$1\r\n1\r\n"
                       "$53\r\nrl:{api:00000000000000010000000000000002}:concurrency\r\n"
                       "$6\r\ndecide\r\n$16\r\n1700000000000000\r\n$112\r\n" +
                       doubles({1, 6, 3, 30000000, 281474976710655.0, 1, 10000000, 3, 30000000, 1, 12, -1, -1, 0}) +
                       "\r\n";
    EXPECT_EQ(decide(rl::CommandScript::evalsha, true, "rl:", checks, 1700000000LL * kSec), want);
}

// Two passes of a slot writer: the measured length, nothing written past it.
template <class Len, class Write>
std::string two_pass(Len len_of, Write write) {
    size_t len = len_of();
    std::string buf(len + 8, '\xee');
    EXPECT_EQ(write(buf.data()), len);
    EXPECT_EQ(buf.substr(len), std::string(8, '\xee')) << "wrote past the measured length";
    buf.resize(len);
    return buf;
}

std::string release(std::string_view prefix, const rl::RedisCheck& c) {
    return two_pass([&] { return rl::release_command_len(prefix, c); },
                    [&](char* b) { return rl::write_release_command(b, prefix, c); });
}

std::string refresh(std::string_view prefix, const rl::RedisCheck& c, int64_t score) {
    return two_pass([&] { return rl::refresh_command_len(prefix, c, score); },
                    [&](char* b) { return rl::write_refresh_command(b, prefix, c, score); });
}

TEST(RedisCommand, ReleaseAndRefreshOfSlots) {
    rl::Policy p = rltest::policy(rl::Algo::concurrency, 10, 30 * kSec);
    rl::RedisCheck c;
    c.zone = "api";
    c.hash = rl::KeyHash{0x2, 0x1};
    c.policy = &p;
    c.cost = 1;
    c.owner = 5;
    c.seq = 17;
    const std::string key = "$53\r\nrl:{api:00000000000000010000000000000002}:concurrency\r\n";
    EXPECT_EQ(release("rl:", c), "*3\r\n$4\r\nZREM\r\n" + key + "$4\r\n5.17\r\n");
    EXPECT_EQ(refresh("rl:", c, 1700000030000000LL),
              "*5\r\n$4\r\nZADD\r\n" + key + "$2\r\nXX\r\n$16\r\n1700000030000000\r\n$4\r\n5.17\r\n"
              "*3\r\n$7\r\nPEXPIRE\r\n" + key + "$5\r\n30001\r\n");

    // A cost of n holds seq .. seq + n - 1; cost 0 is taken as 1; a hold rounds up to the ms.
    c.cost = 3;
    p.period_us = 1500;
    EXPECT_EQ(release("", c), "*5\r\n$4\r\nZREM\r\n$50\r\n{api:00000000000000010000000000000002}:concurrency\r\n"
                              "$4\r\n5.17\r\n$4\r\n5.18\r\n$4\r\n5.19\r\n");
    std::string r = refresh("", c, 9);
    EXPECT_EQ(r.substr(0, 4), "*9\r\n");
    EXPECT_NE(r.find("$2\r\nXX\r\n$1\r\n9\r\n$4\r\n5.17\r\n$1\r\n9\r\n$4\r\n5.18\r\n$1\r\n9\r\n$4\r\n5.19\r\n*3\r\n"),
              std::string::npos);
    EXPECT_EQ(r.substr(r.size() - 7), "$1\r\n3\r\n");  // ceil(1.5 ms) + 1
    c.cost = 0;
    EXPECT_EQ(release("", c).substr(0, 4), "*3\r\n");
    c.cost = int64_t{1} << 40;  // bounded: at most kMaxConcurrency slots
    EXPECT_EQ(release("", c).substr(0, 10), "*1000002\r\n");
}

TEST(RedisCommand, ReleaseAndRefreshOfSeveralRequestsOfOneKey) {
    rl::Policy p = rltest::policy(rl::Algo::concurrency, 10, 30 * kSec);
    rl::Policy q = rltest::policy(rl::Algo::concurrency, 10, 60 * kSec);  // a tier's longer hold
    rl::RedisCheck c[2];
    for (auto& x : c) {
        x.zone = "api";
        x.hash = rl::KeyHash{0x2, 0x1};
        x.cost = 1;
        x.owner = 5;
    }
    c[0].policy = &p;
    c[0].seq = 17;
    c[1].policy = &q;
    c[1].seq = 40;
    const std::string key = "$50\r\n{api:00000000000000010000000000000002}:concurrency\r\n";
    std::string rel = two_pass([&] { return rl::release_command_len("", c, 2); },
                               [&](char* b) { return rl::write_release_command(b, "", c, 2); });
    EXPECT_EQ(rel, "*4\r\n$4\r\nZREM\r\n" + key + "$4\r\n5.17\r\n$4\r\n5.40\r\n");
    std::string ref = two_pass([&] { return rl::refresh_command_len("", c, 2, 9); },
                               [&](char* b) { return rl::write_refresh_command(b, "", c, 2, 9); });
    EXPECT_EQ(ref, "*7\r\n$4\r\nZADD\r\n" + key + "$2\r\nXX\r\n$1\r\n9\r\n$4\r\n5.17\r\n$1\r\n9\r\n$4\r\n5.40\r\n"
                   "*3\r\n$7\r\nPEXPIRE\r\n" + key + "$5\r\n60001\r\n");  // the longest hold
    EXPECT_EQ(rl::release_command_len("", c, 0), 0u);
    // One check through either API: the same bytes.
    EXPECT_EQ(two_pass([&] { return rl::release_command_len("", c, 1); },
                       [&](char* b) { return rl::write_release_command(b, "", c, 1); }),
              release("", c[0]));
}

// The RESP of a batch through the two-pass API; checks the passes agree and stay in bounds.
std::string batch(rl::CommandScript script, bool injected, std::string_view prefix,
                  const std::vector<rl::RedisGroup>& groups, int64_t now) {
    size_t len = rl::batch_command_len(script, injected, prefix, groups.data(), groups.size(), now);
    std::string buf(len + 8, '\xee');
    EXPECT_EQ(rl::write_batch_command(buf.data(), script, injected, prefix, groups.data(), groups.size(), now), len);
    EXPECT_EQ(buf.substr(len), std::string(8, '\xee')) << "wrote past the measured length";
    buf.resize(len);
    return buf;
}

TEST(RedisCommand, ExactBytesOfABatch) {
    rl::Policy g = rltest::policy(rl::Algo::gcra, 10, kSec, 2, 0, 150000);  // refill 1, token 100000, depth 300000
    rl::Policy f = rltest::policy(rl::Algo::fixed, 5, 60 * kSec);  // refill 1, token 12000000, depth 5
    g.block_us = 600 * kSec;  // the record's last value (0 for f)
    rl::RedisCheck hot;
    hot.zone = "api";
    hot.hash = rl::KeyHash{0x2, 0x1};
    hot.policy = &g;
    hot.cost = 1;
    rl::RedisCheck other;
    other.zone = "z";
    other.hash = rl::KeyHash{0xb, 0xa};
    other.policy = &f;
    other.cost = 2;
    other.at = 9;  // sent as it is (only a refund reads it)
    const rl::RedisCheck second[] = {hot, other};
    // Two groups: the hot key alone, then the hot key again with another.
    std::vector<rl::RedisGroup> groups = {{&hot, 1}, {second, 2}};
    const std::string key_a = "$46\r\nrl:{api:00000000000000010000000000000002}:gcra\r\n";
    const std::string key_b = "$45\r\nrl:{z:000000000000000a000000000000000b}:fixed\r\n";
    std::string want = std::string("*9\r\n$7\r\nEVALSHA\r\n$40\r\n") + rl::script_sha1(true) + "\r\n$1\r\n3\r\n" + key_a +
                       key_a + key_b + "$6\r\ndecide\r\n$3\r\n123\r\n$328\r\n" +
                       // delay=0: waits above one token; max_delay 0.15 s: 150000 units at refill 1
                       doubles({1, 0, 10, 1000000, 2, 1, 100000, 300000, 1000000, 1, 0, 100000, 150000, 600000000}) +
                       doubles({2, 0, 10, 1000000, 2, 1, 100000, 300000, 1000000, 1, 0, 100000, 150000, 600000000}) +
                       doubles({4, 5, 60000000, 0, 1, 12000000, 5, 60000000, 2, 9, -1, -1, 0}) + "\r\n";
    EXPECT_EQ(batch(rl::CommandScript::evalsha, true, "rl:", groups, 123), want);
    EXPECT_EQ(rl::batch_reply_len(groups.data(), groups.size()), 2u + 4u * 3u);

    // One group is exactly the single-request call.
    std::vector<rl::RedisCheck> one(second, second + 2);
    EXPECT_EQ(batch(rl::CommandScript::evalsha, false, "rl:", {{second, 2}}, 5),
              decide(rl::CommandScript::evalsha, false, "rl:", one, 5));

    // No group at all, and empty groups: still well formed.
    EXPECT_EQ(batch(rl::CommandScript::evalsha, true, "rl:", {}, 1),
              std::string("*6\r\n$7\r\nEVALSHA\r\n$40\r\n") + rl::script_sha1(true) +
                  "\r\n$1\r\n0\r\n$6\r\ndecide\r\n$1\r\n1\r\n$0\r\n\r\n");
    EXPECT_EQ(batch(rl::CommandScript::evalsha, true, "rl:", {{nullptr, 0}, {nullptr, 0}}, 1),
              std::string("*6\r\n$7\r\nEVALSHA\r\n$40\r\n") + rl::script_sha1(true) +
                  "\r\n$1\r\n0\r\n$6\r\ndecide\r\n$1\r\n1\r\n$16\r\n" + doubles({0, 0}) + "\r\n");

    // EVAL carries the text.
    std::string eval = batch(rl::CommandScript::eval, false, "rl:", groups, 0);
    std::string_view text = rl::script_text(false);
    std::string head = "*9\r\n$4\r\nEVAL\r\n$" + std::to_string(text.size()) + "\r\n";
    EXPECT_EQ(eval.substr(0, head.size()), head);
    EXPECT_EQ(eval.substr(head.size(), text.size()), text);
}

TEST(RedisCommand, ExactBytesOfALeanBatch) {
    rl::Policy g = rltest::policy(rl::Algo::gcra, 10, kSec, 2);  // refill 1, token 100000, depth 300000
    rl::Policy same = g;  // another zone's policy of the same numbers
    rl::RedisCheck a;
    a.zone = "api";
    a.hash = rl::KeyHash{0x2, 0x1};
    a.policy = &g;
    a.cost = 1;
    rl::RedisCheck b = a;
    b.zone = "z";
    b.policy = &same;
    b.cost = 3;
    const std::string key_a = "$46\r\nrl:{api:00000000000000010000000000000002}:gcra\r\n";
    const std::string key_b = "$44\r\nrl:{z:00000000000000010000000000000002}:gcra\r\n";
    // Groups of one check, gcra of one policy, no delay, no block: the policy once, then costs.
    std::vector<rl::RedisGroup> groups = {{&a, 1}, {&b, 1}, {&a, 1}};
    std::string want = std::string("*9\r\n$7\r\nEVALSHA\r\n$40\r\n") + rl::script_sha1(true) + "\r\n$1\r\n3\r\n" +
                       key_a + key_b + key_a + "$4\r\nlean\r\n$3\r\n123\r\n$56\r\n" +
                       doubles({2, 1, 100000, 300000, 1, 3, 1}) + "\r\n";
    EXPECT_EQ(batch(rl::CommandScript::evalsha, true, "rl:", groups, 123), want);
    EXPECT_EQ(rl::batch_reply_len(groups.data(), groups.size()), 2u + 4u * 3u);
    EXPECT_LE(want.size(), rl::batch_command_bound("rl:", groups.data(), groups.size()));
    size_t len = rl::batch_command_len(rl::CommandScript::evalsha, true, "rl:", groups.data(), groups.size(), 123,
                                       rl::BatchForm::general);
    std::string forced(len, '?');
    EXPECT_EQ(rl::write_batch_command(forced.data(), rl::CommandScript::evalsha, true, "rl:", groups.data(),
                                      groups.size(), 123, rl::BatchForm::general),
              len);
    EXPECT_NE(forced.find("$6\r\ndecide\r\n"), std::string::npos);

    // Anything else takes the general form: a group of two checks, another policy, a delay, a
    // block, kNeedOne, another algorithm.
    auto general_form = [&](const std::vector<rl::RedisGroup>& gs) {
        return batch(rl::CommandScript::fcall, false, "rl:", gs, 0).find("$6\r\ndecide\r\n") != std::string::npos;
    };
    EXPECT_FALSE(general_form(groups));
    const rl::RedisCheck pair[] = {a, b};
    EXPECT_TRUE(general_form({{pair, 2}}));
    rl::Policy other = rltest::policy(rl::Algo::gcra, 11, kSec, 2);
    rl::RedisCheck c = a;
    c.policy = &other;
    EXPECT_TRUE(general_form({{&a, 1}, {&c, 1}}));
    rl::Policy shaped = rltest::policy(rl::Algo::gcra, 10, kSec, 2, 0);  // delay=0
    c.policy = &shaped;
    EXPECT_TRUE(general_form({{&c, 1}}));
    rl::Policy blocking = g;
    blocking.block_us = kSec;
    c.policy = &blocking;
    EXPECT_TRUE(general_form({{&c, 1}}));
    c = a;
    c.cost = rl::kNeedOne;
    EXPECT_TRUE(general_form({{&a, 1}, {&c, 1}}));
    rl::Policy token = rltest::policy(rl::Algo::token, 10, kSec, 2);
    c.policy = &token;
    c.cost = 1;
    EXPECT_TRUE(general_form({{&c, 1}}));
    EXPECT_TRUE(general_form({}));
}

TEST(RedisCommand, DecodeBatchReply) {
    // Groups of 1, 2 and 0 checks: the first admitted, the second not (one rejection), the
    // empty one admitted.
    const std::vector<rl::RedisGroup> groups = {{nullptr, 1}, {nullptr, 2}, {nullptr, 0}};
    // An allowed check's 4th value is its delay, a rejected one's its retry.
    ASSERT_EQ(rl::batch_reply_len(groups.data(), groups.size()), 14u);
    const int64_t ok[] = {2, 1700000000000000, 1, 4, 100, 250, 1, 3, 50, 0, 0, 0, 5000, -1};
    rl::Decision d[3];
    d[1].limit = 7;
    bool admitted[3] = {false, true, false};
    int64_t now = 0;
    ASSERT_TRUE(rl::decode_batch_reply(ok, 14, groups.data(), 3, d, admitted, &now));
    EXPECT_EQ(now, 1700000000000000);
    EXPECT_TRUE(admitted[0]);
    EXPECT_FALSE(admitted[1]);
    EXPECT_TRUE(admitted[2]);
    EXPECT_TRUE(d[0].allowed);
    EXPECT_EQ(d[0].remaining, 4);
    EXPECT_EQ(d[0].reset_us, 100);
    EXPECT_EQ(d[0].delay_us, 250);
    EXPECT_EQ(d[0].retry_after_us, 0);
    EXPECT_TRUE(d[1].allowed);  // allowed in a group that was not admitted: consumed nothing
    EXPECT_EQ(d[1].remaining, 3);
    EXPECT_EQ(d[1].limit, 7);  // left to the caller
    EXPECT_FALSE(d[2].allowed);
    EXPECT_EQ(d[2].reset_us, 5000);
    EXPECT_EQ(d[2].retry_after_us, rl::kNever);
    EXPECT_EQ(d[2].delay_us, 0);
    EXPECT_TRUE(rl::decode_batch_reply(ok, 14, groups.data(), 3, d, nullptr, nullptr));  // both optional

    // Malformed: nothing written.
    auto rejects = [&](std::vector<int64_t> v, const char* why) {
        rl::Decision untouched[3];
        bool flags[3] = {false, false, false};
        int64_t t = -5;
        EXPECT_FALSE(rl::decode_batch_reply(v.data(), v.size(), groups.data(), 3, untouched, flags, &t)) << why;
        EXPECT_FALSE(untouched[0].allowed || untouched[1].allowed || flags[0] || flags[2]) << why;
        EXPECT_EQ(t, -5) << why;
    };
    std::vector<int64_t> base(ok, ok + 14);
    auto with = [&](size_t i, int64_t value) {
        std::vector<int64_t> v = base;
        v[i] = value;
        return v;
    };
    rejects(std::vector<int64_t>(ok, ok + 13), "short");
    rejects([&] { auto v = base; v.push_back(0); return v; }(), "long");
    rejects(with(0, 3), "admitted count too high");
    rejects(with(0, 1), "admitted count too low");
    rejects(with(0, -1), "negative count");
    rejects(with(1, -1), "negative now");
    rejects(with(1, rl::kExact + 1), "a now beyond exact (a later refund's arithmetic would overflow)");
    rejects(with(2, 4), "bad flag");
    rejects(with(2, -1), "bad flag");
    rejects(with(3, -1), "negative remaining");
    rejects(with(4, -1), "negative reset");
    rejects(with(13, -2), "bad retry");
    rejects(with(5, -1), "an allowed check with a negative delay");
    rejects(with(10, 1), "every check allowed but the group counted as rejected");
    EXPECT_FALSE(rl::decode_batch_reply(nullptr, 0, groups.data(), 3, d, admitted, &now));
    EXPECT_FALSE(rl::decode_batch_reply(ok, 14, nullptr, 3, d, admitted, &now));
    EXPECT_FALSE(rl::decode_batch_reply(ok, 14, groups.data(), 3, nullptr, admitted, &now));

    // No group: {0, now}.
    const int64_t none[] = {0, 9};
    EXPECT_TRUE(rl::decode_batch_reply(none, 2, nullptr, 0, nullptr, nullptr, &now));
    EXPECT_EQ(now, 9);
    const int64_t none_bad[] = {1, 9};
    EXPECT_FALSE(rl::decode_batch_reply(none_bad, 2, nullptr, 0, nullptr, nullptr, &now));
}

// Checks with a block (block.h): 2 rejected by a live block, 3 rejected, starting a block.
TEST(RedisCommand, DecodeBlocks) {
    const int64_t v[] = {0, 1700000000000000, 2, 0, 599000000, 599000000, 3, 0, 800000, 200000, 0, 1, 10, 30};
    rl::Decision d[3];
    ASSERT_TRUE(rl::decode_decide_reply(v, 14, 3, d, nullptr));
    EXPECT_FALSE(d[0].allowed);
    EXPECT_EQ(d[0].block, rl::kBlockLive);
    EXPECT_EQ(d[0].retry_after_us, 599000000);
    EXPECT_EQ(d[0].reset_us, 599000000);
    EXPECT_FALSE(d[1].allowed);
    EXPECT_EQ(d[1].block, rl::kBlockStarted);
    EXPECT_EQ(d[1].retry_after_us, 200000);
    EXPECT_FALSE(d[2].allowed);
    EXPECT_EQ(d[2].block, rl::kBlockNone);
    const int64_t admitted[] = {1, 1700000000000000, 2, 0, 5, 5};  // a blocked check admits nothing
    EXPECT_FALSE(rl::decode_decide_reply(admitted, 6, 1, d, nullptr));
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
    const int64_t bad_flag[] = {0, 5, 4, 0, 0, 0};
    EXPECT_FALSE(rl::decode_decide_reply(bad_flag, 6, 1, untouched, &now));
    const int64_t blocked_no_wait[] = {0, 5, 2, 0, 0, 0};  // a live block has time left
    EXPECT_FALSE(rl::decode_decide_reply(blocked_no_wait, 6, 1, untouched, &now));
    const int64_t negative[] = {1, 5, 1, -1, 0, 0};
    EXPECT_FALSE(rl::decode_decide_reply(negative, 6, 1, untouched, &now));
    const int64_t bad_retry[] = {0, 5, 0, 0, 0, -2};
    EXPECT_FALSE(rl::decode_decide_reply(bad_retry, 6, 1, untouched, &now));
    const int64_t bad_delay[] = {1, 5, 1, 0, 0, -1};  // an allowed check's delay
    EXPECT_FALSE(rl::decode_decide_reply(bad_delay, 6, 1, untouched, &now));
    EXPECT_FALSE(untouched[0].allowed);
    EXPECT_EQ(untouched[0].remaining, 0);
    EXPECT_FALSE(rl::decode_decide_reply(nullptr, 0, 0, untouched, &now));
    const int64_t empty[] = {1, 9};
    EXPECT_TRUE(rl::decode_decide_reply(empty, 2, 0, untouched, &now));
    EXPECT_EQ(now, 9);
}

}  // namespace

// The request path sizes its buffer with batch_command_bound: it must never be short.
// The library's mode "reset": every algorithm's key and its block, then the marker that keeps
// the reset's time, all in the key's hash tag; ARGV: the mode, the time (0: Redis's clock) and
// the marker's life.
TEST(RedisCommand, ResetDeletesEveryAlgorithmsKeyAndItsBlockAndKeepsItsTime) {
    const rl::KeyHash h{0x2, 0x1};
    for (bool injected : {false, true}) {
        const int64_t now = 1700000000000001;
        size_t len = rl::reset_command(nullptr, rl::CommandScript::fcall, injected, "rl:", "api", h, now);
        std::string buf(len + 8, '?');
        ASSERT_EQ(rl::reset_command(buf.data(), rl::CommandScript::fcall, injected, "rl:", "api", h, now), len);
        EXPECT_EQ(buf.substr(len), std::string(8, '?')) << "wrote past the measured length";
        buf.resize(len);
        // FCALL of the library's function, its mode "reset", 15 keys.
        const std::string name = rl::function_name(injected);
        const std::string head = "*21\r\n$5\r\nFCALL\r\n$" + std::to_string(name.size()) + "\r\n" + name + "\r\n$2\r\n15\r\n";
        ASSERT_EQ(buf.substr(0, head.size()), head);
        std::string want;
        for (const char* algo : {"gcra", "token", "leaky", "sliding", "fixed", "log", "concurrency"}) {
            std::string key = std::string("rl:{api:00000000000000010000000000000002}:") + algo;
            want += "$" + std::to_string(key.size()) + "\r\n" + key + "\r\n";
            want += "$" + std::to_string(key.size() + 6) + "\r\n" + key + ":block\r\n";
        }
        want += "$47\r\nrl:{api:00000000000000010000000000000002}:reset\r\n$5\r\nreset\r\n";
        // The time only in the tests' variant: production's is Redis's clock.
        const std::string t = injected ? std::to_string(now) : "0";
        want += "$" + std::to_string(t.size()) + "\r\n" + t + "\r\n$8\r\n86400000\r\n";
        EXPECT_EQ(buf.substr(head.size()), want);
    }
}

// A refund's and a charge's record carry the time of the admission they are for where a
// decide's carries its block (they never block); a decide's is unchanged.
TEST(RedisCommand, GiveBacksCarryTheirAdmissionsTime) {
    rl::Policy p = rltest::policy(rl::Algo::fixed, 5, 3600 * kSec);
    p.block_us = 60 * kSec;
    rl::RedisCheck c;
    c.zone = "z";
    c.hash = rl::KeyHash{1, 2};
    c.policy = &p;
    c.cost = 2;
    c.at = 1700000000000002;
    c.admitted_at = 1700000000000003;
    const std::string admitted = doubles({1700000000000003.0}) + "\r\n";
    std::string refund(rl::refund_command_len("p:", &c, 1), '?');
    rl::write_refund_command(refund.data(), "p:", &c, 1);
    EXPECT_EQ(refund.substr(refund.size() - admitted.size()), admitted);
    std::string charge(rl::charge_command(nullptr, rl::CommandScript::fcall, false, "p:", &c, 1, 0), '?');
    rl::charge_command(charge.data(), rl::CommandScript::fcall, false, "p:", &c, 1, 0);
    EXPECT_EQ(charge.substr(charge.size() - admitted.size()), admitted);
    const std::string block = doubles({60.0 * kSec}) + "\r\n";
    const std::string d = decide(rl::CommandScript::fcall, false, "p:", {c}, 0);
    EXPECT_EQ(d.substr(d.size() - block.size()), block);
}

TEST(RedisCommandBound, NeverBelowTheExactLength) {
    std::mt19937_64 rng(77);
    std::vector<rl::Policy> policies;
    for (rl::Algo a : {rl::Algo::gcra, rl::Algo::sliding, rl::Algo::log}) {
        rl::Policy p;
        p.algo = a;
        p.requests = 1000000000LL;
        p.period_us = 86400LL * 1000000;
        ASSERT_EQ(rl::finish_policy(p), nullptr);
        policies.push_back(p);
    }
    std::string zone_name(rl::kMaxZoneLen, 'z');
    for (int round = 0; round < 200; round++) {
        size_t ngroups = 1 + rng() % 64;
        std::vector<std::vector<rl::RedisCheck>> checks(ngroups);
        std::vector<rl::RedisGroup> groups(ngroups);
        for (size_t g = 0; g < ngroups; g++) {
            size_t n = 1 + rng() % 3;
            for (size_t i = 0; i < n; i++) {
                rl::RedisCheck c;
                c.zone = std::string_view(zone_name).substr(0, 1 + rng() % rl::kMaxZoneLen);
                c.hash = rl::KeyHash{rng(), rng()};
                c.policy = &policies[rng() % policies.size()];
                c.cost = static_cast<int64_t>(rng() % 1000000000000ULL);
                checks[g].push_back(c);
            }
            groups[g] = rl::RedisGroup{checks[g].data(), checks[g].size()};
        }
        std::string prefix(rng() % 40, 'p');
        size_t exact = rl::batch_command_len(rl::CommandScript::evalsha, false, prefix, groups.data(), ngroups, 0);
        EXPECT_GE(rl::batch_command_bound(prefix, groups.data(), ngroups), exact);
        EXPECT_LE(rl::batch_command_bound(prefix, groups.data(), ngroups), exact + ngroups * 3 * 400 + 400);
        EXPECT_GE(rl::batch_command_bound(prefix, groups.data(), ngroups),
                  rl::batch_command_len(rl::CommandScript::fcall, false, prefix, groups.data(), ngroups, 0));
    }
}
