// The RESP of sync calls (exact bytes, two passes agree, bound) and the decoding of their
// replies. That the script accepts them is shown by sync_diff_test.cpp.
#include "core/reconcile/sync_command.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "algo_test_util.h"
#include "packed_doubles.h"
#include "core/wire/redis_keys.h"
#include "core/wire/redis_script.h"

namespace {

using rltest::doubles;
using rltest::kSec;

std::string sync_cmd(rl::CommandScript script, bool injected, const std::vector<rl::SyncItem>& items, int64_t now,
                     std::string_view id = {}) {
    size_t len = rl::sync_command_len(script, injected, "rl:", items.data(), items.size(), now, id);
    std::string buf(len + 4, '?');
    EXPECT_EQ(rl::write_sync_command(buf.data(), script, injected, "rl:", items.data(), items.size(), now, id), len);
    EXPECT_EQ(buf.substr(len), "????");
    buf.resize(len);
    return buf;
}

// The count form: exact bytes, and only for calls whose every item is a count ask of one gcra
// policy; any field it does not send that would decide something sends the general form.
TEST(SyncCommand, CountForm) {
    rl::Policy p = rltest::policy(rl::Algo::gcra, 10, kSec, 2);  // refill 1, token 100000, depth 300000
    rl::Policy same = p, other = rltest::policy(rl::Algo::gcra, 10, kSec, 3);
    rl::Policy token = rltest::policy(rl::Algo::token, 10, kSec, 2);
    rl::SyncItem it;
    it.zone = "api";
    it.hash = rl::KeyHash{0x2, 0x1};
    it.policy = &p;
    it.want = it.need = 3;
    it.hosts = 5;                  // decide nothing for a count ask: not sent
    it.delta.at = 99;
    it.give_back_at = 77;
    it.give_back_top = 200000;
    rl::SyncItem b = it;
    b.hash = rl::KeyHash{0x4, 0x3};
    b.policy = &same;  // another Policy of the same numbers
    b.want = b.need = 0;
    std::string want = std::string("*9\r\n$5\r\nFCALL\r\n$26\r\n") + rl::function_name(true) +
                       "\r\n$1\r\n2\r\n"
                       "$46\r\nrl:{api:00000000000000010000000000000002}:gcra\r\n"
                       "$46\r\nrl:{api:00000000000000030000000000000004}:gcra\r\n"
                       "$5\r\ncount\r\n$16\r\n1700000000000000\r\n$80\r\n" +
                       doubles({0, 10, 1000000, 2, 1, 100000, 300000, 1000000, 3, 0}) + "\r\n$3\r\nh-7\r\n";
    EXPECT_EQ(sync_cmd(rl::CommandScript::fcall, true, {it, b}, 1700000000LL * kSec, "h-7"), want);
    // SyncForm::count (the caller found them in it): the same bytes, the items not looked at again.
    std::vector<rl::SyncItem> both{it, b};
    std::string c(rl::sync_command_len(rl::CommandScript::fcall, true, "rl:", both.data(), 2, 1700000000LL * kSec,
                                       "h-7", rl::SyncForm::count), '?');
    c.resize(rl::write_sync_command(c.data(), rl::CommandScript::fcall, true, "rl:", both.data(), 2,
                                    1700000000LL * kSec, "h-7", rl::SyncForm::count));
    EXPECT_TRUE(rl::sync_count_form(both.data(), 2));
    EXPECT_EQ(c, want);
    EXPECT_LE(sync_cmd(rl::CommandScript::evalsha, false, {it, b}, 0, std::string(200, 'i')).size(),
              rl::sync_command_bound("rl:", nullptr, 2));
    auto general = [&](const rl::SyncItem& x) {
        return sync_cmd(rl::CommandScript::fcall, true, {it, x}, 1700000000LL * kSec).find("\r\n$4\r\nsync\r\n") !=
               std::string::npos;
    };
    EXPECT_FALSE(general(b));
    std::vector<rl::SyncItem> not_counts(16, b);
    not_counts[0].want = 1;
    not_counts[1].delta.units = 1;
    not_counts[2].delta.prev = -1;
    not_counts[3].give_back = 1;
    not_counts[4].share.epoch_us = 1;
    not_counts[5].share.demand = 1;
    not_counts[6].share.rate[0] = 1;
    not_counts[7].share.rate[1] = 1;
    not_counts[8].share.burst[0] = 1;
    not_counts[9].share.burst[1] = 1;
    not_counts[10].share.back_at = 1;
    not_counts[11].share.back_rate[0] = 1;
    not_counts[12].share.back_rate[1] = 1;
    not_counts[13].share.back_burst[0] = 1;
    not_counts[14].share.back_burst[1] = 1;
    not_counts[15].policy = &other;
    for (size_t i = 0; i < not_counts.size(); i++) EXPECT_TRUE(general(not_counts[i])) << "item " << i;
    rl::SyncItem t = it;
    t.policy = &token;
    EXPECT_TRUE(general(t)) << "gcra only";
    EXPECT_EQ(sync_cmd(rl::CommandScript::fcall, true, {t}, 0).find("\r\n$5\r\ncount\r\n"), std::string::npos);
    // SyncForm::general never sends it.
    std::string g(rl::sync_command_len(rl::CommandScript::fcall, true, "rl:", &it, 1, 0, {}, rl::SyncForm::general), '?');
    rl::write_sync_command(g.data(), rl::CommandScript::fcall, true, "rl:", &it, 1, 0, {}, rl::SyncForm::general);
    EXPECT_NE(g.find("\r\n$4\r\nsync\r\n"), std::string::npos);
}

TEST(SyncCommand, ExactBytes) {
    rl::Policy p = rltest::policy(rl::Algo::gcra, 10, kSec, 2);  // refill 1, token 100000, depth 300000
    rl::SyncItem it;
    it.zone = "api";
    it.hash = rl::KeyHash{0x2, 0x1};
    it.policy = &p;
    it.delta = rl::Delta{3, 0, 1700000000LL * kSec - 5};
    it.want = 4;
    it.need = 1;
    it.hosts = 2;
    it.give_back = 2;
    it.give_back_at = 77;
    it.give_back_top = 200000;
    it.share.epoch_us = 200000;
    it.share.demand = 300;
    it.share.rate[1] = 9;
    it.share.burst[1] = 2;
    std::string want = std::string("*8\r\n$5\r\nFCALL\r\n$26\r\n") + rl::function_name(true) +
                       "\r\n$1\r\n1\r\n"
                       "$46\r\nrl:{api:00000000000000010000000000000002}:gcra\r\n"
                       "$4\r\nsync\r\n$16\r\n1700000000000000\r\n$224\r\n" +
                       doubles({0, 10, 1000000, 2, 1, 100000, 300000, 1000000, 3, 0, 1700000000LL * kSec - 5.0, 4, 1, 2,
                                2, 77, 200000, 200000, 300, 0, 9, 0, 2, 0, 0, 0, 0, 0}) +
                       "\r\n$3\r\nh-7\r\n";
    EXPECT_EQ(sync_cmd(rl::CommandScript::fcall, true, {it}, 1700000000LL * kSec, "h-7"), want);
    // Production: now not sent; EVALSHA names the script.
    std::string prod = sync_cmd(rl::CommandScript::evalsha, false, {it, it}, 1700000000LL * kSec);
    EXPECT_EQ(prod.rfind("*9\r\n$7\r\nEVALSHA\r\n$40\r\n", 0), 0u);
    EXPECT_EQ(prod.substr(prod.size() - 6), "$0\r\n\r\n");  // no call id
    // A call id is cut at kSyncCallIdMax bytes, within the bound.
    std::string long_id(200, 'i');
    std::string with_id = sync_cmd(rl::CommandScript::evalsha, false, {it, it}, 0, long_id);
    EXPECT_NE(with_id.find("$64\r\n" + std::string(64, 'i') + "\r\n"), std::string::npos);
    EXPECT_LE(with_id.size(), rl::sync_command_bound("rl:", nullptr, 2));
    EXPECT_NE(prod.find("$4\r\nsync\r\n$1\r\n0\r\n$448\r\n"), std::string::npos);
    EXPECT_LE(prod.size(), rl::sync_command_bound("rl:", nullptr, 2));
    // Hostile values are clamped into what the script checks: counts >= 0, hosts >= 1.
    it.want = -5;
    it.hosts = 0;
    std::string clamped = sync_cmd(rl::CommandScript::fcall, true, {it}, 1700000000LL * kSec);
    EXPECT_NE(clamped.find(doubles({0, 1, 1})), std::string::npos);
}

TEST(SyncCommand, BoundHoldsForLongZones) {
    rl::Policy p = rltest::policy(rl::Algo::sliding, 10, kSec);
    std::string zone(rl::kMaxZoneLen, 'z');
    std::vector<rl::SyncItem> items(50);
    for (auto& it : items) {
        it.zone = zone;
        it.policy = &p;
    }
    EXPECT_LE(sync_cmd(rl::CommandScript::evalsha, false, items, 0).size(),
              rl::sync_command_bound("prefix:", items.data(), items.size()) - 0);
    EXPECT_LE(sync_cmd(rl::CommandScript::fcall, false, items, 0).size(),
              rl::sync_command_bound("rl:", items.data(), items.size()));
}

TEST(SyncCommand, HostsBytes) {
    size_t len = rl::hosts_command_len(rl::CommandScript::evalsha, false, "rl:", "api", "h1", 300000, 5);
    std::string buf(len, '?');
    ASSERT_EQ(rl::write_hosts_command(buf.data(), rl::CommandScript::evalsha, false, "rl:", "api", "h1", 300000, 5), len);
    EXPECT_EQ(buf, std::string("*8\r\n$7\r\nEVALSHA\r\n$40\r\n") + rl::script_sha1(false) +
                       "\r\n$1\r\n1\r\n$14\r\nrl:{api}:hosts\r\n$5\r\nhosts\r\n$1\r\n0\r\n$6\r\n300000\r\n$2\r\nh1\r\n");
    char key[32];
    ASSERT_EQ(rl::hosts_key(key, "rl:", "api"), rl::hosts_key_len("rl:", "api"));
    EXPECT_EQ(rl::cluster_slot(std::string_view(key, rl::hosts_key_len("rl:", "api"))), rl::cluster_slot("api"));
}

TEST(SyncCommand, DecodeReply) {
    std::vector<int64_t> v = {1700000000LL * kSec, -300000, 5, 1, 4, 0, 1000000, 7, 8, 2, 3,
                              10, 20, 30, 0, rl::kNever, 0, 0, 0, 0, 0};
    rl::SyncResult out[2];
    int64_t now = 0;
    ASSERT_TRUE(rl::decode_sync_reply(v.data(), v.size(), 2, out, &now));
    EXPECT_EQ(now, 1700000000LL * kSec);
    EXPECT_EQ(out[0].global, (rl::State{-300000, 5, 1}));  // a token bucket in debt: negative tokens
    EXPECT_EQ(out[0].granted, 4);
    EXPECT_EQ(out[1].retry_after_us, rl::kNever);
    EXPECT_EQ(out[0].share.epoch_at, 1000000);
    EXPECT_EQ(out[0].share.rate[1], 8);
    EXPECT_EQ(out[0].share.burst[1], 3);
    EXPECT_EQ(rl::sync_reply_len(2), v.size());

    // Bad shapes write nothing.
    rl::SyncResult untouched[2];
    untouched[0].granted = 99;
    EXPECT_FALSE(rl::decode_sync_reply(v.data(), v.size() - 1, 2, untouched, &now));
    auto bad = [&](size_t i, int64_t value) {
        std::vector<int64_t> w = v;
        w[i] = value;
        return !rl::decode_sync_reply(w.data(), w.size(), 2, untouched, nullptr) && untouched[0].granted == 99;
    };
    EXPECT_TRUE(bad(0, -1));                  // now
    EXPECT_TRUE(bad(4, -1));                  // granted
    EXPECT_TRUE(bad(4, rl::kExact + 1));
    EXPECT_TRUE(bad(15, -2));                 // retry
    EXPECT_TRUE(bad(15, rl::kExact + 1));     // retry beyond exact: now + retry would overflow
    EXPECT_TRUE(bad(0, rl::kExact + 1));      // now beyond exact
    EXPECT_TRUE(bad(12, rl::kExact + 1));     // a state beyond exact
    EXPECT_TRUE(bad(7, -1));                  // a share granted below 0
    EXPECT_TRUE(bad(20, rl::kExact + 1));
    EXPECT_TRUE(bad(1, -rl::kExact - 1));
    EXPECT_FALSE(rl::decode_sync_reply(nullptr, 0, 0, nullptr, nullptr));
    int64_t only_now = 5;
    EXPECT_TRUE(rl::decode_sync_reply(&only_now, 1, 0, nullptr, nullptr));
}

// A count form's reply: five integers per item, no share fields; the general reply's length
// does not decode as one, nor the other way round.
TEST(SyncCommand, DecodeCountReply) {
    std::vector<int64_t> v = {1700000000LL * kSec, 1700000000LL * kSec + 7, 3, 0, 1, 0,
                              1700000000LL * kSec + 9, 0, 0, 0, rl::kNever};
    rl::SyncResult out[2];
    out[0].share.rate[0] = 9;  // written over: none
    int64_t now = 0;
    EXPECT_EQ(rl::sync_reply_len(2, true), v.size());
    ASSERT_TRUE(rl::decode_sync_reply(v.data(), v.size(), 2, out, &now, true));
    EXPECT_EQ(now, 1700000000LL * kSec);
    EXPECT_EQ(out[0].global, (rl::State{1700000000LL * kSec + 7, 3, 0}));
    EXPECT_EQ(out[0].granted, 1);
    EXPECT_EQ(out[0].retry_after_us, 0);
    EXPECT_EQ(out[0].share.rate[0], 0);
    EXPECT_EQ(out[1].granted, 0);
    EXPECT_EQ(out[1].retry_after_us, rl::kNever);
    rl::SyncResult untouched[2];
    untouched[0].granted = 99;
    EXPECT_FALSE(rl::decode_sync_reply(v.data(), v.size(), 2, untouched, nullptr, false));
    EXPECT_FALSE(rl::decode_sync_reply(v.data(), v.size() - 1, 2, untouched, nullptr, true));
    std::vector<int64_t> w = v;
    w[10] = -2;  // retry below kNever
    EXPECT_FALSE(rl::decode_sync_reply(w.data(), w.size(), 2, untouched, nullptr, true));
    w = v;
    w[4] = rl::kExact + 1;  // granted beyond exact
    EXPECT_FALSE(rl::decode_sync_reply(w.data(), w.size(), 2, untouched, nullptr, true));
    EXPECT_EQ(untouched[0].granted, 99);
}

}  // namespace
