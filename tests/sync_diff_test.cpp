// Differential test of the Lua's "sync" mode against the C++ core (sync_key: give_back,
// apply_delta of the clamped delta, grant): random timelines of sync calls (deltas of several
// hosts, lease asks, give-backs, clocks that go back, deltas ahead of Redis's clock or of
// windows long over) replayed through both, on a private redis-server, must
// give identical replies and stored states, with the TTL of decide's rule. Through FCALL and
// EVALSHA alike. Also the "hosts" heartbeat. Seeds are fixed.
#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "algo_test_util.h"
#include "core/algo/exact_math.h"
#include "core/wire/redis_keys.h"
#include "core/wire/redis_script.h"
#include "core/reconcile/sync_command.h"
#include "redis_lua_server.h"

namespace {

using rltest::kSec;
using rltest::Reply;

constexpr std::string_view kPrefix = "rlsync:";
constexpr int64_t kT0 = 1763900000LL * kSec;

struct SyncKey {
    rl::Policy p;
    std::string zone;
    rl::KeyHash hash;
    std::string redis_key;
    rl::State s;      // the C++ global state
    rl::Lease lease;  // what one host holds of it, for give-backs
    rl::ShareBook book;  // buckets: Redis's book of shares, kept after the state
    int64_t epoch_us = 0;
};

class SyncDiff : public ::testing::TestWithParam<rl::CommandScript> {
  protected:
    void SetUp() override {
        ASSERT_NO_FATAL_FAILURE(rltest::start_lua_server(server_, conn_));
    }

    static std::string build(const std::vector<rl::SyncItem>& items, int64_t now, rl::SyncForm form = rl::SyncForm::best,
                             std::string_view id = {}) {
        rl::CommandScript script = GetParam();
        size_t len = rl::sync_command_len(script, true, kPrefix, items.data(), items.size(), now, id, form);
        std::string buf(len + 8, '\xee');
        EXPECT_EQ(rl::write_sync_command(buf.data(), script, true, kPrefix, items.data(), items.size(), now, id, form),
                  len);
        EXPECT_EQ(buf.substr(len), std::string(8, '\xee'));
        EXPECT_LE(len, rl::sync_command_bound(kPrefix, items.data(), items.size()) + 20);  // now is sent here
        buf.resize(len);
        return buf;
    }

    // One call on both sides, then the replies and, per key, the stored state and its TTL.
    void run_call(std::vector<SyncKey*>& keys, const std::vector<rl::SyncItem>& items, int64_t now,
                  const std::string& where, std::vector<rl::SyncResult>* results, rl::SyncForm form = rl::SyncForm::best,
                  std::string_view id = {}) {
        std::vector<rl::SyncResult> want(items.size());
        std::vector<rl::Decision> dec(items.size());
        std::vector<bool> written(items.size());
        std::vector<rl::ShareBook> books(items.size());
        for (size_t i = 0; i < items.size(); i++) {
            books[i] = keys[i]->book;
            bool shares = rl::is_bucket(keys[i]->p.algo) && (!books[i].empty() || items[i].share.epoch_us > 0);
            want[i] = rl::sync_key(keys[i]->s, items[i], now, &dec[i], &books[i]);
            written[i] = shares || !(want[i].global == keys[i]->s);
        }
        redisContext* c = conn_.get();
        std::string cmd = build(items, now, form, id);
        const bool counted = cmd.find("\r\n$5\r\ncount\r\n") != std::string::npos;  // its reply: no share fields
        count_calls_ += counted;
        rltest::append(c, {"TIME"});
        rltest::append(c, {"MULTI"});
        redisAppendFormattedCommand(c, cmd.data(), cmd.size());
        for (SyncKey* k : keys) {
            rltest::append(c, {"PEXPIRETIME", k->redis_key});
            rltest::append(c, {"PERSIST", k->redis_key});
            rltest::append(c, {"GET", k->redis_key});
        }
        rltest::append(c, {"EXEC"});
        rltest::append(c, {"TIME"});
        int64_t t0 = rltest::time_us(rltest::next_reply(c).get()) / 1000;
        for (size_t i = 0; i < 2 + 3 * keys.size(); i++) ASSERT_TRUE(rltest::next_reply(c)) << where;
        Reply exec = rltest::next_reply(c);
        int64_t t1 = rltest::time_us(rltest::next_reply(c).get()) / 1000;
        ASSERT_TRUE(exec && exec->type == REDIS_REPLY_ARRAY && exec->elements == 1 + 3 * keys.size()) << where;
        const redisReply* reply = exec->element[0];
        ASSERT_EQ(reply->type, REDIS_REPLY_ARRAY) << where << ": " << (reply->type == REDIS_REPLY_ERROR ? reply->str : "");
        std::vector<int64_t> values;
        for (size_t i = 0; i < reply->elements; i++) {
            ASSERT_EQ(reply->element[i]->type, REDIS_REPLY_INTEGER) << where;
            values.push_back(reply->element[i]->integer);
        }
        std::vector<rl::SyncResult>& got = *results;
        got.resize(items.size());
        int64_t redis_now = -1;
        ASSERT_TRUE(rl::decode_sync_reply(values.data(), values.size(), items.size(), got.data(), &redis_now, counted))
            << where << ": " << ::testing::PrintToString(values);
        ASSERT_EQ(redis_now, now);
        for (size_t i = 0; i < items.size(); i++) {
            SyncKey& k = *keys[i];
            const rl::SyncItem& it = items[i];
            const std::string at = where + " item " + std::to_string(i) + " " + std::string(rl::algo_name(k.p.algo)) +
                                   " " + std::to_string(k.p.requests) + "/" + std::to_string(k.p.period_us) +
                                   "us burst " + std::to_string(k.p.burst) + " state {" + std::to_string(k.s.a) + "," +
                                   std::to_string(k.s.b) + "," + std::to_string(k.s.c) + "} delta {" +
                                   std::to_string(it.delta.units) + "," + std::to_string(it.delta.prev) + "," +
                                   std::to_string(it.delta.at) + "} want " + std::to_string(it.want) + " need " +
                                   std::to_string(it.need) + " hosts " + std::to_string(it.hosts) + " back " +
                                   std::to_string(it.give_back) + " at " + std::to_string(it.give_back_at) + " top " +
                                   std::to_string(it.give_back_top) + " now " + std::to_string(now);
            ASSERT_EQ(got[i].global, want[i].global) << at << " got {" << got[i].global.a << "," << got[i].global.b
                                                     << "," << got[i].global.c << "}";
            ASSERT_EQ(got[i].granted, want[i].granted) << at;
            ASSERT_EQ(got[i].retry_after_us, want[i].retry_after_us) << at;
            ASSERT_EQ(got[i].share.epoch_at, want[i].share.epoch_at) << at;
            for (int e = 0; e < 2; e++) {
                ASSERT_EQ(got[i].share.rate[e], want[i].share.rate[e]) << at << " share " << e;
                ASSERT_EQ(got[i].share.burst[e], want[i].share.burst[e]) << at << " share " << e;
            }
            shares_ += want[i].share.rate[0] + want[i].share.rate[1] > 0;
            granted_ += want[i].granted;
            refused_ += want[i].granted == 0 && it.need > 0;

            const redisReply* exp = exec->element[1 + 3 * i];
            const redisReply* st = exec->element[3 + 3 * i];
            const int64_t ttl_ms = rl::ceil_div(dec[i].reset_us, 1000) + 1;
            if (exp->integer == -2 && written[i] && t1 - t0 >= ttl_ms) {
                k.s = rl::State{};  // expired in real time before PERSIST (a 1-2 ms TTL on a stalled machine)
                k.book = rl::ShareBook{};
                continue;
            }
            k.s = want[i].global;
            k.book = books[i];
            if (!written[i]) {
                ASSERT_LT(exp->integer, 0) << at << ": a TTL set on a key that was not written";
                continue;
            }
            writes_++;
            ASSERT_EQ(st->type, REDIS_REPLY_STRING) << at;
            ASSERT_EQ(st->len, k.book.empty() ? 24u : 96u) << at;
            double d[12];
            std::memcpy(d, st->str, st->len);  // little-endian hosts (as the writer's fast path)
            if (!k.book.empty()) {
                const rl::ShareBook& b = k.book;
                const int64_t fields[9] = {b.epoch_at,  b.epoch_us,  b.rate[0],   b.rate[1],  b.burst[0],
                                           b.burst[1],  b.demand[0], b.demand[1], b.settled_at};
                for (int f = 0; f < 9; f++) ASSERT_EQ(static_cast<int64_t>(d[3 + f]), fields[f]) << at << " book field " << f;
            }
            ASSERT_EQ(rl::State({static_cast<int64_t>(d[0]), static_cast<int64_t>(d[1]), static_cast<int64_t>(d[2])}),
                      k.s)
                << at;
            if (exp->integer == -2) continue;
            ASSERT_GE(ttl_ms, exp->integer - t1) << at << ": TTL longer than ceil(reset / 1 ms) + 1 ms";
            ASSERT_LE(ttl_ms, exp->integer - t0) << at << ": TTL shorter than ceil(reset / 1 ms) + 1 ms";
        }
    }

    void timeline(rl::Algo algo, uint64_t seed, int calls) {
        std::mt19937_64 rng(seed);
        auto pick = [&rng](int64_t n) { return static_cast<int64_t>(rng() % static_cast<uint64_t>(n)); };
        static const int64_t kRequests[] = {1, 3, 10, 100, 999, 1000000};
        static const int64_t kPeriods[] = {1000, 333333, kSec, 60 * kSec, 86400 * kSec};
        std::vector<SyncKey> keys(4);
        for (size_t i = 0; i < keys.size(); i++) {
            SyncKey& k = keys[i];
            const int64_t req = kRequests[pick(6)], per = kPeriods[pick(5)];
            int64_t burst = rl::is_bucket(algo) ? pick(20) : 0;
            if (rl::is_bucket(algo) && pick(3) == 0) {
                // Large bursts too: the shares' burst arithmetic beyond 2^16 units (the Lua's
                // doubles against the C++ integers), up to finish_policy's bound.
                const int64_t token = per / std::gcd(req, per);
                const int64_t most = (rl::kExact / 4) / token - 1;
                const int64_t bigs[] = {65535, 65536, 1000003, int64_t{1} << 40, most};
                burst = std::min(most, bigs[pick(5)] + pick(3));
            }
            k.p = rltest::policy(algo, req, per, burst);
            k.zone = "z" + std::to_string(seed) + "_" + std::to_string(i);
            k.hash = rl::KeyHash{rng(), rng()};
            k.redis_key.resize(rl::redis_key_len(kPrefix, k.zone, algo));
            k.redis_key.resize(rl::redis_key(k.redis_key.data(), kPrefix, k.zone, k.hash, algo));
        }
        int64_t now = kT0 + pick(kSec);
        for (int call = 0; call < calls && !HasFatalFailure(); call++) {
            std::vector<SyncKey*> ks;
            std::vector<rl::SyncItem> items;
            for (SyncKey& k : keys) {
                if (pick(3) == 0) continue;
                const rl::Policy& p = k.p;
                const int64_t cap = p.capacity();
                rl::SyncItem it;
                it.zone = k.zone;
                it.hash = k.hash;
                it.policy = &k.p;
                int64_t t = now - pick(2 * p.period_us + 1);
                // A host's clock ahead of Redis's, or a delta sent again long after: clamped by
                // Redis (clamp_delta), the same on both sides.
                if (pick(8) == 0) t = now + pick(3 * p.period_us + 1);
                if (pick(12) == 0) t = now - 3 * p.period_us - pick(4 * p.period_us + 1);
                for (int64_t n = pick(4); n > 0; n--) {
                    t += pick(p.period_us / 2 + 1);
                    rl::delta_add(it.delta, p, t, pick(8) == 0 ? -1 - pick(cap) : 1 + pick(pick(4) == 0 ? 3 * cap : 3));
                }
                it.want = pick(4) == 0 ? 0 : pick(cap + 3);
                it.need = pick(3) == 0 ? 1 + pick(cap + 1) : 0;
                it.hosts = 1 + pick(8);
                if (pick(4) == 0 && k.lease.units > 0) {
                    it.give_back = k.lease.units;
                    it.give_back_at = k.lease.at;
                    it.give_back_top = k.lease.top;
                    k.lease = rl::Lease{};
                } else if (pick(10) == 0) {
                    it.give_back = 1 + pick(cap);
                    it.give_back_at = now - pick(p.period_us + 1);
                    it.give_back_top = pick(p.depth + 1);
                }
                // Buckets: shares asked, mostly with the key's epoch (another one is refused).
                if (rl::is_bucket(algo) && pick(2) == 0) {
                    if (k.epoch_us == 0) k.epoch_us = std::max<int64_t>(1, p.period_us / (1 + pick(5)));
                    rl::ShareAsk& sh = it.share;
                    sh.epoch_us = pick(10) == 0 ? k.epoch_us + 1 : k.epoch_us;
                    sh.demand = pick(3) == 0 ? 0 : pick(3 * rl::kShareParts);
                    for (int e = 0; e < 2; e++) {
                        if (pick(2) == 0) continue;
                        sh.rate[e] = pick(rl::kShareParts + 2);
                        sh.burst[e] = pick(cap + 2);
                    }
                    if (pick(5) == 0) {
                        sh.back_at = rl::window_start(now, k.epoch_us) - pick(2) * k.epoch_us;
                        for (int e = 0; e < 2; e++) {
                            sh.back_rate[e] = pick(rl::kShareParts);
                            sh.back_burst[e] = pick(cap + 1);
                        }
                    }
                }
                ks.push_back(&k);
                items.push_back(it);
            }
            if (items.empty()) continue;
            std::vector<rl::SyncResult> results;
            run_call(ks, items, now, "seed " + std::to_string(seed) + " call " + std::to_string(call), &results);
            for (size_t i = 0; i < results.size(); i++) {
                rl::lease_add(ks[i]->lease, ks[i]->p, now, results[i].granted, results[i].global);
            }
            // Time: bursts at one instant, small steps, around the period, a clock that goes back.
            switch (pick(8)) {
                case 0: break;
                case 1: now -= pick(keys[0].p.period_us / 2 + 1); break;
                case 2: now += pick(3 * keys[0].p.period_us + 1); break;
                default: now += pick(keys[0].p.period_us / keys[0].p.capacity() * 3 + 2); break;
            }
        }
    }

    std::unique_ptr<rltest::RedisServer> server_;
    rltest::Context conn_;
    int64_t granted_ = 0, refused_ = 0, writes_ = 0, shares_ = 0, count_calls_ = 0;
};

INSTANTIATE_TEST_SUITE_P(Lua, SyncDiff, ::testing::Values(rl::CommandScript::fcall, rl::CommandScript::evalsha),
                         [](const ::testing::TestParamInfo<rl::CommandScript>& i) {
                             return std::string(i.param == rl::CommandScript::fcall ? "FCALL" : "EVALSHA");
                         });

TEST_P(SyncDiff, Timelines) {
    const rl::Algo algos[] = {rl::Algo::gcra, rl::Algo::token, rl::Algo::leaky, rl::Algo::fixed, rl::Algo::sliding};
    for (rl::Algo a : algos) {
        for (uint64_t seed = 1; seed <= 6 && !HasFatalFailure(); seed++) timeline(a, seed * 31 + static_cast<uint64_t>(a), 150);
    }
    std::printf("sync diff: %lld units granted, %lld needs refused, %lld states written, %lld share grants\n",
                static_cast<long long>(granted_), static_cast<long long>(refused_), static_cast<long long>(writes_),
                static_cast<long long>(shares_));
    EXPECT_GT(shares_, 100);
    EXPECT_GT(granted_, 0);
    EXPECT_GT(refused_, 0);
    EXPECT_GT(writes_, 1000);
}

// The count form (sync_command.h; lua/13-sync.lua, sync_count): calls whose items are all count
// asks of one gcra policy (a lease zone's cold keys), against sync_key: every reply, state and
// TTL. Needs of 0, within what remains, beyond it and beyond the burst; the fields that decide
// nothing for a count ask (hosts, the times of an empty delta and of an empty give-back) random;
// keys expired, a clock that goes back, idle gaps. Keys hold a book of shares after a call that
// asked shares (the general form), which the count form decides through the general item code,
// in the middle of its inline items. One call in four is sent in the general form, so each form
// reads what the other wrote. A call with an id is sometimes sent again (its reply lost): the
// same reply, no state changed (the engine gives count calls no id, sync_count_form: the Lua
// keeps the reply of any call that has one).
TEST_P(SyncDiff, CountCalls) {
    std::mt19937_64 rng(977);
    auto pick = [&rng](int64_t n) { return static_cast<int64_t>(rng() % static_cast<uint64_t>(n)); };
    static const int64_t kRequests[] = {1, 3, 10, 100, 999, 1000000};
    static const int64_t kPeriods[] = {1000, 333333, kSec, 60 * kSec, 3600 * kSec};
    redisContext* c = conn_.get();
    auto get = [c](const std::string& key) {
        Reply r = rltest::command(c, {"GET", key});
        return r && r->type == REDIS_REPLY_STRING ? std::string(r->str, r->len) : std::string();
    };
    int64_t calls = 0, general = 0, booked = 0, expired = 0, backs = 0, resent = 0, beyond = 0, ids = 0;
    for (int round = 0; round < 60 && !HasFatalFailure(); round++) {
        const int64_t req = kRequests[pick(6)], per = kPeriods[pick(5)];
        const rl::Policy p = rltest::policy(rl::Algo::gcra, req, per, pick(4) == 0 ? 0 : pick(12));
        const int64_t cap = p.capacity();
        std::vector<SyncKey> keys(static_cast<size_t>(1 + pick(8)));
        for (size_t i = 0; i < keys.size(); i++) {
            SyncKey& k = keys[i];
            k.p = p;
            k.zone = "c" + std::to_string(round) + "_" + std::to_string(i);
            k.hash = rl::KeyHash{rng(), rng()};
            k.redis_key.resize(rl::redis_key_len(kPrefix, k.zone, p.algo));
            k.redis_key.resize(rl::redis_key(k.redis_key.data(), kPrefix, k.zone, k.hash, p.algo));
            k.epoch_us = std::max<int64_t>(1, per / (1 + pick(5)));
        }
        int64_t now = kT0 + pick(kSec);
        for (int e = 0; e < 40 && !HasFatalFailure(); e++) {
            const std::string where = "count round " + std::to_string(round) + " call " + std::to_string(e);
            for (SyncKey& k : keys) {
                // Expired: Redis drops a key once its state is worth a fresh key's.
                if (pick(4) == 0 && k.book.empty() && rl::decide(k.s, k.p, now, 0).reset_us == 0) {
                    Reply d = rltest::command(c, {"DEL", k.redis_key});
                    ASSERT_TRUE(d && d->type == REDIS_REPLY_INTEGER);
                    expired += d->integer;
                    k.s = rl::State{};
                }
            }
            const bool shares = pick(6) == 0;  // some items ask a share: a book is kept on their keys
            const rl::SyncForm form = e % 4 == 3 ? rl::SyncForm::general : rl::SyncForm::best;
            std::vector<SyncKey*> ks;
            std::vector<rl::SyncItem> items;
            int64_t with_book = 0;
            bool asked = false;  // a share
            for (SyncKey& k : keys) {
                if (pick(3) == 0) continue;
                rl::SyncItem it;
                it.zone = k.zone;
                it.hash = k.hash;
                it.policy = &k.p;
                it.need = pick(5) == 0 ? 0 : (pick(4) == 0 ? 1 + pick(cap + 3) : 1 + pick(2));
                it.want = it.need;
                it.hosts = 1 + pick(8);
                it.delta.at = now - pick(2 * per);
                if (pick(3) == 0) {
                    it.give_back_at = now - pick(per);
                    it.give_back_top = pick(p.depth + 1);
                }
                if (shares && pick(2) == 0) {
                    it.share.epoch_us = k.epoch_us;
                    it.share.demand = pick(rl::kShareParts);
                    it.share.rate[0] = 1 + pick(rl::kShareParts / 2);
                    it.share.burst[0] = pick(cap + 1);
                    it.want = std::max(it.need, rl::share_units_wanted(it.share));
                    asked = true;
                }
                beyond += it.need > p.burst + 1;
                with_book += !k.book.empty();
                ks.push_back(&k);
                items.push_back(it);
            }
            if (items.empty()) continue;
            const int64_t counted = count_calls_;
            const std::string id = pick(3) == 0 ? "h." + std::to_string(++ids) : std::string();
            std::vector<rl::SyncResult> results;
            run_call(ks, items, now, where, &results, form, id);
            if (HasFatalFailure()) return;
            const bool count = count_calls_ > counted;
            ASSERT_EQ(count, !asked && form == rl::SyncForm::best) << where;  // every count ask: the count form
            calls += count;
            general += form == rl::SyncForm::general;
            if (count) booked += with_book;
            if (!id.empty() && pick(2) == 0) {
                // Sent again later: the first reply, nothing applied twice.
                std::vector<std::string> before;
                for (SyncKey* k : ks) before.push_back(get(k->redis_key));
                std::string cmd = build(items, now + 1 + pick(per), form, id);
                redisAppendFormattedCommand(c, cmd.data(), cmd.size());
                Reply r = rltest::next_reply(c);
                ASSERT_TRUE(r && r->type == REDIS_REPLY_ARRAY) << where << (r && r->type == REDIS_REPLY_ERROR ? r->str : "");
                std::vector<int64_t> values;
                for (size_t i = 0; i < r->elements; i++) values.push_back(r->element[i]->integer);
                std::vector<rl::SyncResult> again(items.size());
                int64_t redis_now = -1;
                ASSERT_TRUE(rl::decode_sync_reply(values.data(), values.size(), items.size(), again.data(), &redis_now,
                                                  count))
                    << where;
                EXPECT_EQ(redis_now, now) << where;
                for (size_t i = 0; i < items.size(); i++) {
                    EXPECT_EQ(again[i].global, results[i].global) << where << " item " << i;
                    EXPECT_EQ(again[i].granted, results[i].granted) << where << " item " << i;
                    EXPECT_EQ(again[i].retry_after_us, results[i].retry_after_us) << where << " item " << i;
                    EXPECT_EQ(get(ks[i]->redis_key), before[i]) << where << " item " << i;
                }
                resent++;
            }
            switch (pick(8)) {
                case 0: break;
                case 1:
                    now -= 1 + pick(per / 2 + 1);  // a clock that goes back
                    backs++;
                    break;
                case 2: now += pick(3 * per + 1); break;
                default: now += pick(per / cap * 3 + 2); break;
            }
        }
    }
    std::printf("count calls: %lld in the count form (%lld items of keys with a book), %lld general; %lld units "
                "granted, %lld needs refused; %lld keys expired, %lld clock steps back, %lld sent again\n",
                static_cast<long long>(calls), static_cast<long long>(booked), static_cast<long long>(general),
                static_cast<long long>(granted_), static_cast<long long>(refused_), static_cast<long long>(expired),
                static_cast<long long>(backs), static_cast<long long>(resent));
    EXPECT_GT(calls, 1000);
    EXPECT_GT(general, 300);
    EXPECT_GT(booked, 100) << "count calls must meet keys holding a book of shares";
    EXPECT_GT(expired, 100);
    EXPECT_GT(backs, 100);
    EXPECT_GT(resent, 100);
    EXPECT_GT(beyond, 100);
    EXPECT_GT(refused_, 1000);
    EXPECT_GT(granted_, 1000);
}

}  // namespace

namespace {

// Redis's clock, in ms.
int64_t redis_ms(redisContext* c) {
    Reply r = rltest::command(c, {"TIME"});
    return r && r->type == REDIS_REPLY_ARRAY ? rltest::time_us(r.get()) / 1000 : -1;
}

// The heartbeat: each host's latest time; hosts silent for a window are dropped. A window of a
// minute: the key (two windows) lives on between the beats in real time, however slow the machine.
TEST_P(SyncDiff, HostsHeartbeat) {
    redisContext* c = conn_.get();
    const int64_t window = 60 * kSec;
    auto beat = [&](std::string_view host, int64_t now) -> int64_t {
        rl::CommandScript script = GetParam();
        size_t len = rl::hosts_command_len(script, true, kPrefix, "api", host, window, now);
        std::string cmd(len, '?');
        EXPECT_EQ(rl::write_hosts_command(cmd.data(), script, true, kPrefix, "api", host, window, now), len);
        redisAppendFormattedCommand(c, cmd.data(), cmd.size());
        Reply r = rltest::next_reply(c);
        EXPECT_TRUE(r && r->type == REDIS_REPLY_INTEGER) << (r && r->type == REDIS_REPLY_ERROR ? r->str : "");
        return r && r->type == REDIS_REPLY_INTEGER ? r->integer : -1;
    };
    EXPECT_EQ(beat("host-a", kT0), 1);
    EXPECT_EQ(beat("host-b", kT0 + 1000), 2);
    EXPECT_EQ(beat("host-a", kT0 + 30 * kSec), 2);  // again: still two
    EXPECT_EQ(beat("host-b", kT0 + window + 29 * kSec), 2);  // a's last beat is 59 s old: kept
    EXPECT_EQ(beat("host-b", kT0 + window + 30 * kSec), 2);  // 60 s: kept
    const int64_t t0 = redis_ms(c);
    EXPECT_EQ(beat("host-b", kT0 + window + 30 * kSec + 1), 1);  // 60 s and 1 us: dropped
    const int64_t t1 = redis_ms(c);
    // Two windows and a millisecond, set during the last beat (PEXPIRETIME: exact after any stall).
    Reply exp = rltest::command(c, {"PEXPIRETIME", std::string(kPrefix) + "{api}:hosts"});
    ASSERT_TRUE(exp && exp->type == REDIS_REPLY_INTEGER);
    EXPECT_GE(exp->integer - 120001, t0);
    EXPECT_LE(exp->integer - 120001, t1);
}

// A call sent again with the id of one that ran (its reply was lost) gets the same reply and
// changes nothing: the delta, the grant and the give-back are applied once. A new id applies.
TEST_P(SyncDiff, CallIdAppliedOnce) {
    // 10 per hour: the state outlives in real time any stall between the calls.
    rl::Policy p = rltest::policy(rl::Algo::gcra, 10, 3600 * kSec, 4);
    rl::SyncItem it;
    it.zone = "once";
    it.hash = rl::KeyHash{5, 6};
    it.policy = &p;
    it.delta = rl::Delta{2, 0, kT0 - 10};
    it.want = 2;
    it.need = 1;
    it.hosts = 1;
    std::string key(rl::redis_key_len(kPrefix, it.zone, p.algo), '?');
    key.resize(rl::redis_key(key.data(), kPrefix, it.zone, it.hash, p.algo));
    redisContext* c = conn_.get();
    auto send = [&](int64_t now, std::string_view id) {
        rl::CommandScript script = GetParam();
        size_t len = rl::sync_command_len(script, true, kPrefix, &it, 1, now, id);
        std::string cmd(len, '?');
        rl::write_sync_command(cmd.data(), script, true, kPrefix, &it, 1, now, id);
        redisAppendFormattedCommand(c, cmd.data(), cmd.size());
        Reply r = rltest::next_reply(c);
        std::vector<int64_t> v;
        EXPECT_TRUE(r && r->type == REDIS_REPLY_ARRAY) << (r && r->type == REDIS_REPLY_ERROR ? r->str : "");
        for (size_t i = 0; r && r->type == REDIS_REPLY_ARRAY && i < r->elements; i++) v.push_back(r->element[i]->integer);
        return v;
    };
    auto state = [&]() {
        Reply r = rltest::command(c, {"GET", key});
        return r && r->type == REDIS_REPLY_STRING ? std::string(r->str, r->len) : std::string();
    };
    const int64_t t0 = redis_ms(c);
    std::vector<int64_t> first = send(kT0, "host-a:1:1");
    const int64_t t1 = redis_ms(c);
    ASSERT_EQ(first.size(), rl::sync_reply_len(1));
    rl::SyncResult want = rl::sync_key(rl::State{}, it, kT0);
    EXPECT_EQ(first[0], kT0);
    EXPECT_EQ((rl::State{first[1], first[2], first[3]}), want.global);
    EXPECT_EQ(first[4], 2);  // granted: want 2, need 1 in it
    EXPECT_EQ(want.granted, 2);
    std::string after = state();
    Reply exp = rltest::command(c, {"PEXPIRETIME", key + ":call:host-a:1:1"});  // set during the call
    ASSERT_TRUE(exp && exp->type == REDIS_REPLY_INTEGER);
    EXPECT_GE(exp->integer - rl::kSyncCallMemoryMs, t0);
    EXPECT_LE(exp->integer - rl::kSyncCallMemoryMs, t1);
    // Sent again later (its reply was lost): the same reply, the state untouched.
    EXPECT_EQ(send(kT0 + 3 * kSec, "host-a:1:1"), first);
    EXPECT_EQ(state(), after);
    // Another id: applied.
    std::vector<int64_t> second = send(kT0 + 1, "host-a:1:2");
    EXPECT_NE(state(), after);
    EXPECT_EQ((rl::State{second[1], second[2], second[3]}), rl::sync_key(want.global, it, kT0 + 1).global);
    // No id: nothing remembered.
    Reply n0 = rltest::command(c, {"DBSIZE"});
    send(kT0 + 2, "");
    Reply n1 = rltest::command(c, {"DBSIZE"});
    EXPECT_EQ(n0->integer, n1->integer);
}

// A log item is refused (its state is not counts that hosts can add), and nothing is written.
TEST_P(SyncDiff, LogRefused) {
    rl::Policy p = rltest::policy(rl::Algo::log, 10, kSec);
    rl::SyncItem it;
    it.zone = "z";
    it.policy = &p;
    it.want = 1;
    std::string cmd = build({it}, kT0);
    redisAppendFormattedCommand(conn_.get(), cmd.data(), cmd.size());
    Reply r = rltest::next_reply(conn_.get());
    ASSERT_TRUE(r && r->type == REDIS_REPLY_ERROR);
    EXPECT_NE(std::string(r->str).find("bad item 1"), std::string::npos) << r->str;
    Reply n = rltest::command(conn_.get(), {"DBSIZE"});
    EXPECT_EQ(n->integer, 0);
}

}  // namespace
