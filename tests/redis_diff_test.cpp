// Differential test of the Redis Lua against the C++ core: the same timelines, replayed
// through rl::decide / rl::refund and through the Lua (its test variant, with the same
// injected time) on a private redis-server, must give identical decisions and states after
// every event, single checks and multi-check calls alike. Also checked after every event:
// each key the Lua wrote carries a TTL just beyond the decision's reset. Every timeline runs
// twice, through both ways of calling the Lua: FCALL of the library and EVALSHA of the script.
// Seeds are fixed.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <map>
#include <ostream>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "algo_test_util.h"
#include "packed_doubles.h"
#include "core/algo/block.h"
#include "core/algo/concurrency.h"
#include "core/algo/exact_math.h"
#include "core/wire/redis_command.h"
#include "core/wire/redis_keys.h"
#include "core/wire/redis_script.h"
#include "core/algo/refund.h"
#include "core/algo/settle.h"
#include "core/reconcile/sync_command.h"
#include "redis_lua_server.h"

namespace rl {

// For GoogleTest's names of the parameterized tests.
void PrintTo(CommandScript s, std::ostream* os) { *os << (s == CommandScript::fcall ? "FCALL" : "EVALSHA"); }

}  // namespace rl

namespace {

using rltest::doubles;
using rltest::Context;
using rltest::Key;
using rltest::kSec;
using rltest::Reply;

constexpr int64_t kDay = 86400 * kSec;
constexpr std::string_view kPrefix = "rltest:";

const rl::Algo kAll[] = {rl::Algo::gcra, rl::Algo::token, rl::Algo::leaky,
                         rl::Algo::fixed, rl::Algo::sliding, rl::Algo::log};

// ---- random policies and timelines ---------------------------------------------------------

rl::Policy make_policy(rl::Algo algo, int64_t requests, int64_t period_us, int64_t burst) {
    if (algo == rl::Algo::log) requests = std::min<int64_t>(requests, 999);  // a ring of `requests` entries
    return rltest::policy(algo, requests, period_us, rl::is_bucket(algo) ? burst : 0);
}

// The properties test's policies, plus the extremes: 1 per day, 10^9 per second with burst 999,
// 10^9 per day (the sliding window's coarse weight), and 333333 us periods.
rl::Policy random_rate_policy(std::mt19937_64& rng, rl::Algo algo) {
    static const int64_t kRequests[] = {1, 2, 3, 5, 7, 10, 60, 100, 999};
    static const int64_t kPeriods[] = {333333, kSec, 7 * kSec, 60 * kSec, 3600 * kSec, kDay};
    int64_t burst = static_cast<int64_t>(rng() % 12);
    switch (rng() % 12) {
        case 0: return make_policy(algo, 1, kDay, burst);
        case 1: return make_policy(algo, 1000000000, kSec, 999);
        case 2: return make_policy(algo, 1000000000, kDay, burst);
        case 3: return make_policy(algo, kRequests[rng() % 9], 333333, burst);
        case 4: return make_policy(algo, 1 + static_cast<int64_t>(rng() % 1000), 1 + static_cast<int64_t>(rng() % (10 * kSec)),
                                   static_cast<int64_t>(rng() % 1000));
        default: return make_policy(algo, kRequests[rng() % 9], kPeriods[rng() % 6], burst);
    }
}

// Two bucket policies in three shape (delay.h): delay= from 0 to beyond the burst, with no
// max_delay or one up to the longest possible wait.
rl::Policy random_policy(std::mt19937_64& rng, rl::Algo algo) {
    rl::Policy p = random_rate_policy(rng, algo);
    if (!rl::is_bucket(algo) || rng() % 3 == 0) return p;
    p.delay = static_cast<int64_t>(rng() % static_cast<uint64_t>(p.burst + 2));
    if (rng() % 2 == 0) {
        uint64_t longest = static_cast<uint64_t>((p.burst + 1) * (p.period_us / p.requests) + 2);
        p.max_delay_us = 1 + static_cast<int64_t>(rng() % longest);
    }
    const char* err = rl::finish_policy(p);
    EXPECT_EQ(err, nullptr) << err;
    return p;
}

// A step of time: bursts at one instant, microseconds, traffic around the rate, idle gaps.
int64_t time_step(std::mt19937_64& rng, const rl::Policy& p) {
    int64_t interval = std::max<int64_t>(1, p.period_us / p.requests);
    switch (rng() % 10) {
        case 0: case 1: case 2: return 0;
        case 3: return 1 + static_cast<int64_t>(rng() % 3);
        case 9: return static_cast<int64_t>(rng() % static_cast<uint64_t>(3 * p.period_us));
        default: return static_cast<int64_t>(rng() % static_cast<uint64_t>(2 * interval));
    }
}

int64_t random_cost(std::mt19937_64& rng, const rl::Policy& p) {
    uint64_t c = rng() % 10;
    if (c == 0) return 0;
    if (c == 1) return 1 + static_cast<int64_t>(rng() % static_cast<uint64_t>(p.capacity() + 1));  // up to capacity + 1
    return 1;
}

const int64_t kBacks[] = {1, 1000, kSec, 3600 * kSec, int64_t{1} << 49};

// ---- one limit on both sides ---------------------------------------------------------------

struct Limit {
    Limit(const rl::Policy& p, std::string zone_name, rl::KeyHash h)
        : key(p), zone(std::move(zone_name)), hash(h) {
        redis_key.resize(rl::redis_key_len(kPrefix, zone, p.algo));
        redis_key.resize(rl::redis_key(redis_key.data(), kPrefix, zone, hash, p.algo));
    }
    Key key;  // the C++ side: policy, state, ring
    std::string zone;
    rl::KeyHash hash;
    std::string redis_key;
    std::vector<std::pair<int64_t, int64_t>> admitted;  // (time, cost) of admissions, for refunds
    int64_t reset_at = 0;  // its last reset (run_reset): refunds and charges of earlier admissions are dropped

    bool is_log() const { return key.p.algo == rl::Algo::log; }

    // The ring's live entries, oldest first: what the Redis list must hold.
    std::vector<int64_t> live() const {
        std::vector<int64_t> out;
        if (!is_log()) return out;
        const int64_t n = key.p.requests;
        int64_t head = key.s.a >= 0 && key.s.a < n ? key.s.a : 0;
        int64_t count = key.s.b > 0 ? std::min(key.s.b, n) : 0;
        for (int64_t i = 0; i < count; i++) out.push_back(key.ring[static_cast<size_t>((head + i) % n)]);
        return out;
    }
};

rl::KeyHash random_hash(std::mt19937_64& rng) {
    rl::KeyHash h;
    h.lo = rng();
    h.hi = rng();
    return h;
}

// The shared-memory path's all-or-nothing (rl_store_decide_local in src/ngx/store_shm.cpp): decide all at
// one now; commit all if all allow, else report the allowed ones as a cost-0 request would.
bool reference_decide_all(const std::vector<Limit*>& lims, const std::vector<int64_t>& costs, int64_t now,
                          std::vector<rl::Decision>& out) {
    bool all = true;
    out.resize(lims.size());
    for (size_t i = 0; i < lims.size(); i++) {
        Key& k = lims[i]->key;
        out[i] = rl::decide(k.s, k.p, now, costs[i], k.ring.data());
        all = all && out[i].allowed;
    }
    for (size_t i = 0; i < lims.size(); i++) {
        Key& k = lims[i]->key;
        if (!all) {
            if (out[i].allowed) out[i] = rl::decide(k.s, k.p, now, 0, k.ring.data());
            continue;
        }
        if (k.p.algo == rl::Algo::log) rl::commit_log(out[i], k.ring.data(), k.p, costs[i]);
        k.s = out[i].next;
    }
    return all;
}

std::string describe(const std::vector<rl::Decision>& ds) {
    std::string out;
    for (const rl::Decision& d : ds) {
        out += "{allowed " + std::to_string(d.allowed) + " remaining " + std::to_string(d.remaining) + " reset " +
               std::to_string(d.reset_us) + " retry " + std::to_string(d.retry_after_us) + " delay " +
               std::to_string(d.delay_us) + "} ";
    }
    return out;
}

std::string describe_input(const std::vector<Limit*>& lims, const std::vector<rl::State>& before, int64_t now,
                           const std::vector<int64_t>& costs) {
    std::string out = " now " + std::to_string(now);
    for (size_t i = 0; i < lims.size(); i++) {
        const rl::Policy& p = lims[i]->key.p;
        out += "; " + std::string(rl::algo_name(p.algo)) + " " + std::to_string(p.requests) + "/" +
               std::to_string(p.period_us) + "us burst " + std::to_string(p.burst) + " delay " +
               std::to_string(p.delay) + " max_delay " + std::to_string(p.max_delay_us) + " state {" +
               std::to_string(before[i].a) + ", " + std::to_string(before[i].b) + ", " + std::to_string(before[i].c) +
               "} cost " + std::to_string(costs[i]);
    }
    return out;
}

// ---- the fixture ---------------------------------------------------------------------------

struct Counts {
    std::map<rl::Algo, int64_t> decisions;  // per-check decisions compared, by algorithm
    int64_t refunds = 0;
    int64_t ttl_checked = 0;
    int64_t partial_rejections = 0;  // multi-check calls where some checks allowed and another rejected
    int64_t rejected = 0;            // decisions that rejected (retry > 0)
    int64_t never = 0;               // decisions that rejected for good (kNever)
    int64_t refunds_changed = 0;     // refund checks that changed a state
    int64_t coarse = 0;              // sliding decisions with a coarse weight (weight_scale < period)
    int64_t clock_back = 0;          // events on a clock behind an earlier event
    int64_t policy_changes = 0;
    int64_t expired_in_real_time = 0;  // keys with a 1-2 ms TTL that Redis expired during the call
    int64_t groups = 0;                // batches: groups decided
    int64_t groups_admitted = 0;
    int64_t hot_groups = 0;            // groups with a key that an earlier group of the batch changed
    int64_t delayed = 0;               // allowed decisions with a delay
    int64_t too_late = 0;              // rejected by max_delay while the burst had room
    int64_t charges = 0;               // settle charges (run_charge)
    int64_t charged_past = 0;          //   that took only what fitted in the debt
    int64_t need_one = 0;              // decisions of quantity 0 with settle= (kNeedOne)
    int64_t resent = 0;                // settle calls sent again with their call id
    int64_t resets = 0;                // keys reset (run_reset)
    int64_t dropped = 0;               // refunds and charges of an admission before the key's reset
    int64_t lean_calls = 0;            // batches sent in the lean form (redis_command.h)
};

// A private redis-server with both variants of the script and of the library loaded; script_
// is how the tests call the Lua.
class RedisLua : public ::testing::Test {
  protected:
    void SetUp() override {
        ASSERT_NO_FATAL_FAILURE(rltest::start_lua_server(server_, conn_));
    }

    void TearDown() override {
        conn_.reset();
        server_.reset();
    }

    // The RESP of one call, through the two-pass API.
    // call_id: a refund's (redis_command.h).
    static std::string build(bool refund, rl::CommandScript script, bool injected, int64_t now,
                             const std::vector<rl::RedisCheck>& checks, std::string_view call_id = {}) {
        const rl::RedisCheck* c = checks.data();
        size_t n = checks.size();
        size_t len = refund ? rl::refund_command_len(script, injected, kPrefix, c, n, now, call_id)
                            : rl::decide_command_len(script, injected, kPrefix, c, n, now);
        std::string buf(len + 16, '\xee');
        size_t wrote = refund ? rl::write_refund_command(buf.data(), script, injected, kPrefix, c, n, now, call_id)
                              : rl::write_decide_command(buf.data(), script, injected, kPrefix, c, n, now);
        EXPECT_EQ(wrote, len);
        EXPECT_EQ(buf.substr(len), std::string(16, '\xee')) << "wrote past the measured length";
        buf.resize(len);
        return buf;
    }

    static std::vector<rl::RedisCheck> checks_of(const std::vector<Limit*>& lims, const std::vector<int64_t>& costs,
                                                 const std::vector<int64_t>& ats) {
        std::vector<rl::RedisCheck> checks(lims.size());
        for (size_t i = 0; i < lims.size(); i++) {
            checks[i].zone = lims[i]->zone;
            checks[i].hash = lims[i]->hash;
            checks[i].policy = &lims[i]->key.p;
            checks[i].cost = costs[i];
            checks[i].at = ats.empty() ? 0 : ats[i];
            checks[i].admitted_at = checks[i].at;  // a refund's admission
        }
        return checks;
    }

    // Queues the read of a key's state: LRANGE of the log's list, ZRANGE of a concurrency key's
    // slots (with their scores), GET of the others' 24 bytes.
    static void append_state_read(redisContext* c, const Limit& l) {
        if (l.key.p.algo == rl::Algo::concurrency) {
            rltest::append(c, {"ZRANGE", l.redis_key, "0", "-1", "WITHSCORES"});
        } else if (l.is_log()) {
            rltest::append(c, {"LRANGE", l.redis_key, "0", "-1"});
        } else {
            rltest::append(c, {"GET", l.redis_key});
        }
    }

    // A hash algorithm's state as stored: three little-endian doubles (redis_command.h), or
    // no key (a fresh state). False if it is neither.
    static bool stored_state(const redisReply* r, rl::State& s) {
        if (r->type == REDIS_REPLY_NIL) {
            s = rl::State{};
            return true;
        }
        if (r->type != REDIS_REPLY_STRING || r->len != 24) return false;
        int64_t f[3];
        for (size_t j = 0; j < 3; j++) {
            uint64_t u = 0;
            for (size_t b = 0; b < 8; b++) u |= uint64_t{static_cast<unsigned char>(r->str[8 * j + b])} << (8 * b);
            double d;
            std::memcpy(&d, &u, sizeof d);
            if (d != static_cast<double>(static_cast<int64_t>(d))) return false;  // integers only
            f[j] = static_cast<int64_t>(d);
        }
        s = rl::State{f[0], f[1], f[2]};
        return true;
    }

    // What Redis holds for one key right after a call (its PEXPIRETIME, then its state, read in
    // the transaction of the call) against the C++ side. written: the call changed the key;
    // reset_us: the decision of its last change, the base of its TTL.
    void compare_key(Limit& l, const redisReply* exp, const redisReply* state, bool written, int64_t reset_us,
                     int64_t t0_ms, int64_t t1_ms, const std::string& at) {
        ASSERT_EQ(exp->type, REDIS_REPLY_INTEGER) << at;
        std::vector<int64_t> live_after = l.live();

        // A key given 1 or 2 ms can expire in real time before PERSIST reaches it when the
        // machine stalls Redis (the transaction does not freeze every clock). Redis then
        // holds a fresh key, as it would in production once that time had passed: the C++
        // side follows, and the timeline goes on from identical states.
        const bool cpp_fresh = l.is_log() ? live_after.empty() : l.key.s == rl::State{};
        if (exp->integer == -2 && !cpp_fresh) {
            int64_t ttl_ms = rl::ceil_div(reset_us, 1000) + 1;
            // Set at or after t0, gone by t1: at least its TTL must have passed.
            ASSERT_TRUE(written && t1_ms - t0_ms >= ttl_ms)
                << at << ": key missing, TTL " << ttl_ms << " ms, the call took " << t1_ms - t0_ms << " ms";
            l.key.s = rl::State{};
            counts_.expired_in_real_time++;
            return;
        }

        // The state, read back.
        if (l.is_log()) {
            ASSERT_EQ(state->type, REDIS_REPLY_ARRAY) << at;
            std::vector<int64_t> list;
            for (size_t j = 0; j < state->elements; j++) list.push_back(std::atoll(state->element[j]->str));
            ASSERT_EQ(list, live_after) << at;
        } else {
            rl::State got;
            ASSERT_TRUE(stored_state(state, got)) << at << ": not a stored state";
            ASSERT_EQ(got.a, l.key.s.a) << at;
            ASSERT_EQ(got.b, l.key.s.b) << at;
            ASSERT_EQ(got.c, l.key.s.c) << at;
        }

        // The TTL: set on what was written, to ceil(reset / 1 ms) + 1 ms, i.e. in
        // (reset, reset + 2 ms]; the script ran between t0 and t1, so the expiry time it set
        // minus the TTL lies in [t0, t1] (ms).
        if (written && exp->integer != -2) {
            ASSERT_GE(exp->integer, 0) << at << ": a written key without a TTL";
            int64_t ttl_ms = rl::ceil_div(reset_us, 1000) + 1;
            ASSERT_GT(ttl_ms * 1000, reset_us);
            ASSERT_LE(ttl_ms * 1000, reset_us + 2000);
            ASSERT_GE(ttl_ms, exp->integer - t1_ms) << at << ": TTL longer than ceil(reset / 1 ms) + 1 ms";
            ASSERT_LE(ttl_ms, exp->integer - t0_ms) << at << ": TTL shorter than ceil(reset / 1 ms) + 1 ms";
            counts_.ttl_checked++;
        } else if (written) {
            ASSERT_TRUE(l.is_log() && live_after.empty()) << at << ": a written key is missing";
        } else {
            ASSERT_LT(exp->integer, 0) << at << ": a TTL set on a key that was not written";
        }
    }

    // One call on both sides, then every comparison. `ats` empty: a decide call; else a refund.
    // One script call observed: TIME, then in one transaction the call and, per key, its expiry
    // time, PERSIST and its state, then TIME. PERSIST keeps real time from expiring the keys of
    // this simulated timeline later; the transaction keeps Redis from expiring them before
    // PERSIST, unless the machine stalls it (see compare_key). The script's reply (integers) goes
    // to out->values; out->exec keeps the rest: element 1 + 3i is key i's expiry, 3 + 3i its state.
    // more: other keys the call may write (blocks), observed the same way after `keys`, read by GET.
    struct Observed {
        Reply exec;
        std::vector<int64_t> values;
        int64_t t0_ms = 0, t1_ms = 0;
    };
    void observe_call(const std::string& cmd, const std::vector<Limit*>& keys, const std::string& where,
                      Observed* out, const std::vector<std::string>& more = {}) {
        redisContext* c = conn_.get();
        rltest::append(c, {"TIME"});
        rltest::append(c, {"MULTI"});
        redisAppendFormattedCommand(c, cmd.data(), cmd.size());
        for (Limit* l : keys) {
            rltest::append(c, {"PEXPIRETIME", l->redis_key});
            rltest::append(c, {"PERSIST", l->redis_key});
            append_state_read(c, *l);
        }
        for (const std::string& k : more) {
            rltest::append(c, {"PEXPIRETIME", k});
            rltest::append(c, {"PERSIST", k});
            rltest::append(c, {"GET", k});
        }
        const size_t observed = keys.size() + more.size();
        rltest::append(c, {"EXEC"});
        rltest::append(c, {"TIME"});
        Reply t0 = rltest::next_reply(c);
        for (size_t i = 0; i < 2 + 3 * observed; i++) {
            Reply queued = rltest::next_reply(c);  // OK, then QUEUED for each command
            ASSERT_TRUE(queued && queued->type == REDIS_REPLY_STATUS) << where << ": " << c->errstr;
        }
        out->exec = rltest::next_reply(c);
        Reply t1 = rltest::next_reply(c);
        const redisReply* exec = out->exec.get();
        ASSERT_TRUE(exec && exec->type == REDIS_REPLY_ARRAY && exec->elements == 1 + 3 * observed)
            << where << ": " << c->errstr;
        const redisReply* reply = exec->element[0];
        ASSERT_EQ(reply->type, REDIS_REPLY_ARRAY) << where << ": " << (reply->type == REDIS_REPLY_ERROR ? reply->str : "");
        for (size_t i = 0; i < reply->elements; i++) {
            ASSERT_EQ(reply->element[i]->type, REDIS_REPLY_INTEGER) << where;
            out->values.push_back(reply->element[i]->integer);
        }
        out->t0_ms = rltest::time_us(t0.get()) / 1000;
        out->t1_ms = rltest::time_us(t1.get()) / 1000;
        ASSERT_GT(out->t0_ms, 0);
    }

    // A refund with a call id is sent again after the comparisons when `again` (resend_same).
    void run_call(const std::vector<Limit*>& lims, int64_t now, const std::vector<int64_t>& costs,
                  const std::vector<int64_t>& ats, const std::string& where, std::string_view call_id = {},
                  bool again = false) {
        const bool refund = !ats.empty();
        const size_t n = lims.size();
        std::vector<rl::State> before(n);
        std::vector<std::vector<int64_t>> live_before(n);
        for (size_t i = 0; i < n; i++) {
            before[i] = lims[i]->key.s;
            live_before[i] = lims[i]->live();
        }

        // The C++ side.
        std::vector<rl::Decision> want;
        bool all = true;
        if (refund) {
            want.resize(n);
            for (size_t i = 0; i < n; i++) {
                Key& k = lims[i]->key;
                if (gone(*lims[i], ats[i])) {
                    counts_.dropped++;  // the key's old life's: nothing back to its new one
                } else {
                    rl::refund(k.s, k.ring.data(), k.p, now, ats[i], costs[i]);
                }
                want[i] = rl::decide(k.s, k.p, now, 0, k.ring.data());
                all = all && want[i].allowed;
            }
        } else {
            all = reference_decide_all(lims, costs, now, want);
        }

        // The Redis side, in one pipeline (observe_call).
        std::string cmd = build(refund, script_, true, now, checks_of(lims, costs, ats), call_id);
        Observed obs;
        observe_call(cmd, lims, where, &obs);
        if (HasFatalFailure()) return;
        const redisReply* exec = obs.exec.get();
        const std::vector<int64_t>& values = obs.values;
        const int64_t t0_ms = obs.t0_ms, t1_ms = obs.t1_ms;
        std::vector<rl::Decision> got(n);
        int64_t redis_now = -1;
        ASSERT_TRUE(rl::decode_decide_reply(values.data(), values.size(), n, got.data(), &redis_now))
            << where << ": reply " << ::testing::PrintToString(values) << ", C++: " << describe(want)
            << describe_input(lims, before, now, costs);
        EXPECT_EQ(redis_now, now) << where;
        EXPECT_EQ(values[0], all ? 1 : 0) << where;

        bool some_allowed = false;
        for (size_t i = 0; i < n; i++) {
            Limit& l = *lims[i];
            const std::string at = where + " check " + std::to_string(i) + " (" + std::string(rl::algo_name(l.key.p.algo)) +
                                   " " + std::to_string(l.key.p.requests) + "/" + std::to_string(l.key.p.period_us) +
                                   "us burst " + std::to_string(l.key.p.burst) + ") cost " + std::to_string(costs[i]) +
                                   " now " + std::to_string(now) + (refund ? " refund at " + std::to_string(ats[i]) : "");
            // What the C++ decided must make sense on its own (the script mirrors its mistakes too).
            ASSERT_GE(want[i].remaining, 0) << at;
            ASSERT_GE(want[i].reset_us, 0) << at;
            if (want[i].allowed) {
                ASSERT_EQ(want[i].retry_after_us, 0) << at;
            } else {
                ASSERT_TRUE(want[i].retry_after_us == rl::kNever || want[i].retry_after_us > 0) << at;
            }
            ASSERT_EQ(got[i].allowed, want[i].allowed) << at;
            ASSERT_EQ(got[i].remaining, want[i].remaining) << at;
            ASSERT_EQ(got[i].reset_us, want[i].reset_us) << at;
            ASSERT_EQ(got[i].retry_after_us, want[i].retry_after_us) << at;
            ASSERT_EQ(got[i].delay_us, want[i].delay_us) << at;
            count_shaping(l.key.p, costs[i], got[i]);
            some_allowed = some_allowed || got[i].allowed;
            counts_.decisions[l.key.p.algo]++;
            if (!got[i].allowed) (got[i].retry_after_us == rl::kNever ? counts_.never : counts_.rejected)++;
            if (l.key.p.algo == rl::Algo::sliding && l.key.p.weight_scale != l.key.p.period_us) counts_.coarse++;

            const redisReply* exp = exec->element[1 + 3 * i];
            const redisReply* state = exec->element[3 + 3 * i];
            ASSERT_EQ(exp->type, REDIS_REPLY_INTEGER) << at;

            std::vector<int64_t> live_after = l.live();
            bool written = l.is_log() ? live_after != live_before[i] : !(l.key.s == before[i]);
            if (!refund && !all) written = false;
            if (refund && written) counts_.refunds_changed++;
            compare_key(l, exp, state, written, want[i].reset_us, t0_ms, t1_ms, at);
            if (HasFatalFailure()) return;
        }
        if (!refund && !all && some_allowed) counts_.partial_rejections++;
        if (refund) counts_.refunds++;
        if (again) resend_same(cmd, lims, values, where);
        if (HasFatalFailure()) return;

        // History for later refunds.
        if (!refund && all) {
            for (size_t i = 0; i < n; i++) {
                if (costs[i] > 0) lims[i]->admitted.emplace_back(now, costs[i]);
            }
        }
    }

    // A settle's charge (settle.h) on both sides: rl::charge against the script's charge mode,
    // then the reply, the key's state and its TTL.
    // With a call id, sent again after the comparisons when `again` (resend_same).
    // admitted_at: the time of the admission it is for (0: not checked against a reset).
    void run_charge(Limit& l, int64_t now, int64_t cost, const std::string& where, std::string_view call_id = {},
                    bool again = false, int64_t admitted_at = 0) {
        const rl::State before = l.key.s;
        const std::vector<int64_t> live_before = l.live();
        const rl::Policy debt = rl::debt_policy(l.key.p);
        rl::Decision want;
        const bool dropped = gone(l, admitted_at);
        int64_t charged = 0;
        if (dropped) {
            // Reported as the script's cost-0 check on the debt policy (a token bucket read as a
            // charge reads it), charging nothing.
            rl::State t = l.key.s;
            if (t.c != 0) t.a += rl::debt_shift(l.key.p, debt);
            want = rl::decide(t, debt, now, 0, l.key.ring.data());
            counts_.dropped++;
        } else {
            charged = rl::charge(l.key.s, l.key.ring.data(), l.key.p, debt, now, cost, &want);
        }

        rl::RedisCheck c;
        c.zone = l.zone;
        c.hash = l.hash;
        c.policy = &debt;
        c.cost = cost;
        c.at = rl::debt_shift(l.key.p, debt);
        c.admitted_at = admitted_at;
        size_t len = rl::charge_command(nullptr, script_, true, kPrefix, &c, 1, now, call_id);
        std::string cmd(len, '\0');
        ASSERT_EQ(rl::charge_command(cmd.data(), script_, true, kPrefix, &c, 1, now, call_id), len);
        Observed obs;
        observe_call(cmd, {&l}, where, &obs);
        if (HasFatalFailure()) return;
        rl::Decision got;
        int64_t redis_now = -1;
        const std::string at = where + " charge " + std::to_string(cost) + " (" + std::string(rl::algo_name(l.key.p.algo)) +
                               " " + std::to_string(l.key.p.requests) + "/" + std::to_string(l.key.p.period_us) +
                               "us burst " + std::to_string(l.key.p.burst) + ") now " + std::to_string(now);
        ASSERT_TRUE(rl::decode_decide_reply(obs.values.data(), obs.values.size(), 1, &got, &redis_now)) << at;
        ASSERT_EQ(got.allowed, dropped || charged > 0) << at;
        ASSERT_EQ(got.remaining, want.remaining) << at;
        ASSERT_EQ(got.reset_us, want.reset_us) << at;
        ASSERT_EQ(got.retry_after_us, want.retry_after_us) << at;
        bool written = l.is_log() ? l.live() != live_before : !(l.key.s == before);
        compare_key(l, obs.exec->element[1], obs.exec->element[3], written, want.reset_us, obs.t0_ms, obs.t1_ms, at);
        if (HasFatalFailure()) return;
        counts_.charges++;
        counts_.charged_past += charged > 0 && charged < cost;
        if (charged > 0) l.admitted.emplace_back(now, charged);
        if (again) resend_same(cmd, {&l}, obs.values, where);
    }

    // Whether a refund or a charge of an admission at `admitted_at` is the key's old life's: the
    // key was reset at or after it (redis_command.h: reset_command, admitted_at).
    static bool gone(const Limit& l, int64_t admitted_at) {
        return admitted_at > 0 && l.reset_at > 0 && l.reset_at >= admitted_at && l.key.p.algo != rl::Algo::concurrency;
    }

    // The API's DELETE of a key at `now` (the test variant's clock) on both sides: Redis deletes
    // its keys and keeps the time; the C++ key starts afresh, and its earlier admissions stay
    // known (their refunds and charges are then dropped).
    void run_reset(Limit& l, int64_t now, const std::string& where) {
        size_t len = rl::reset_command(nullptr, script_, true, kPrefix, l.zone, l.hash, now);
        std::string cmd(len, '\0');
        ASSERT_EQ(rl::reset_command(cmd.data(), script_, true, kPrefix, l.zone, l.hash, now), len);
        Reply r = send(cmd);
        ASSERT_TRUE(r && r->type == REDIS_REPLY_INTEGER) << where << ": " << (r && r->type == REDIS_REPLY_ERROR ? r->str : "");
        const std::string marker = l.redis_key.substr(0, l.redis_key.rfind(':') + 1) + "reset";
        Reply kept = rltest::command(conn_.get(), {"GET", marker});
        ASSERT_TRUE(kept && kept->type == REDIS_REPLY_STRING) << where;
        ASSERT_EQ(std::string(kept->str, kept->len), std::to_string(now)) << where;
        Reply ttl = rltest::command(conn_.get(), {"PTTL", marker});
        ASSERT_TRUE(ttl && ttl->type == REDIS_REPLY_INTEGER && ttl->integer > rl::kResetMemoryMs - 60000) << where;
        l.key.s = rl::State{};
        std::fill(l.key.ring.begin(), l.key.ring.end(), 0);
        l.reset_at = now;
        counts_.resets++;
    }

    // A settle sent again with its call id, as if its reply had been lost (settle.h): the first
    // reply back, and every key as the first call left it (compare_key against the C++ state,
    // which does not move; no TTL set: observe_call made the keys persistent).
    void resend_same(const std::string& cmd, const std::vector<Limit*>& lims, const std::vector<int64_t>& first,
                     const std::string& where) {
        const std::string at = where + ", sent again";
        Observed obs;
        observe_call(cmd, lims, at, &obs);
        if (HasFatalFailure()) return;
        ASSERT_EQ(obs.values, first) << at;
        for (size_t i = 0; i < lims.size(); i++) {
            compare_key(*lims[i], obs.exec->element[1 + 3 * i], obs.exec->element[3 + 3 * i], false, 0, obs.t0_ms,
                        obs.t1_ms, at);
            if (HasFatalFailure()) return;
        }
        counts_.resent++;
    }

    // One batch on both sides: the C++ applies the groups one after the other (each group is
    // reference_decide_all at the same now), the script decides them in one call; then every
    // decision, every admitted flag, and each key's state and TTL after the batch.
    void run_batch(const std::vector<std::vector<Limit*>>& groups, const std::vector<std::vector<int64_t>>& costs,
                   int64_t now, const std::string& where, rl::BatchForm form = rl::BatchForm::best) {
        // The keys of the batch, each once, and what the C++ does to them.
        std::vector<Limit*> keys;
        for (const auto& g : groups) {
            for (Limit* l : g) {
                if (std::find(keys.begin(), keys.end(), l) == keys.end()) keys.push_back(l);
            }
        }
        std::map<Limit*, bool> written;
        std::map<Limit*, int64_t> last_reset;  // the reset of a key's last change: its TTL's base
        std::vector<std::vector<rl::Decision>> want(groups.size());
        std::vector<char> want_admitted(groups.size());
        for (size_t g = 0; g < groups.size(); g++) {
            std::vector<rl::State> before;
            std::vector<std::vector<int64_t>> live_before;
            bool hot = false;
            for (Limit* l : groups[g]) {
                before.push_back(l->key.s);
                live_before.push_back(l->live());
                hot = hot || written[l];
            }
            want_admitted[g] = reference_decide_all(groups[g], costs[g], now, want[g]);
            for (size_t i = 0; i < groups[g].size(); i++) {
                Limit* l = groups[g][i];
                bool changed = l->is_log() ? l->live() != live_before[i] : !(l->key.s == before[i]);
                if (changed) {
                    written[l] = true;
                    last_reset[l] = want[g][i].reset_us;
                }
                if (want_admitted[g] && costs[g][i] > 0) l->admitted.emplace_back(now, costs[g][i]);
            }
            counts_.groups++;
            counts_.groups_admitted += want_admitted[g];
            counts_.hot_groups += hot;
        }

        // The RESP of the batch, through the two-pass API.
        std::vector<std::vector<rl::RedisCheck>> checks(groups.size());
        std::vector<rl::RedisGroup> rgroups(groups.size());
        for (size_t g = 0; g < groups.size(); g++) {
            checks[g] = checks_of(groups[g], costs[g], {});
            rgroups[g] = rl::RedisGroup{checks[g].data(), checks[g].size()};
        }
        size_t len = rl::batch_command_len(script_, true, kPrefix, rgroups.data(), rgroups.size(), now, form);
        std::string cmd(len + 16, '\xee');
        ASSERT_EQ(rl::write_batch_command(cmd.data(), script_, true, kPrefix, rgroups.data(),
                                          rgroups.size(), now, form),
                  len);
        ASSERT_EQ(cmd.substr(len), std::string(16, '\xee')) << "wrote past the measured length";
        cmd.resize(len);
        counts_.lean_calls += cmd.find("\r\n$4\r\nlean\r\n") != std::string::npos;

        Observed obs;
        observe_call(cmd, keys, where, &obs);
        if (HasFatalFailure()) return;
        const redisReply* exec = obs.exec.get();
        const std::vector<int64_t>& values = obs.values;
        const int64_t t0_ms = obs.t0_ms, t1_ms = obs.t1_ms;
        ASSERT_EQ(values.size(), rl::batch_reply_len(rgroups.data(), rgroups.size())) << where;
        std::vector<rl::Decision> got(values.size());
        std::unique_ptr<bool[]> admitted(new bool[groups.size() + 1]);
        int64_t redis_now = -1;
        ASSERT_TRUE(rl::decode_batch_reply(values.data(), values.size(), rgroups.data(), rgroups.size(), got.data(),
                                           admitted.get(), &redis_now))
            << where << ": reply " << ::testing::PrintToString(values);
        EXPECT_EQ(redis_now, now) << where;

        size_t k = 0;
        for (size_t g = 0; g < groups.size(); g++) {
            const std::string gw = where + " group " + std::to_string(g) + " of " + std::to_string(groups.size());
            ASSERT_EQ(admitted[g], want_admitted[g] != 0) << gw;
            bool some_allowed = false;
            for (size_t i = 0; i < groups[g].size(); i++, k++) {
                const rl::Policy& p = groups[g][i]->key.p;
                const std::string at = gw + " check " + std::to_string(i) + " (" + std::string(rl::algo_name(p.algo)) +
                                       " " + std::to_string(p.requests) + "/" + std::to_string(p.period_us) +
                                       "us burst " + std::to_string(p.burst) + ") cost " + std::to_string(costs[g][i]) +
                                       " now " + std::to_string(now);
                ASSERT_EQ(got[k].allowed, want[g][i].allowed) << at;
                ASSERT_EQ(got[k].remaining, want[g][i].remaining) << at;
                ASSERT_EQ(got[k].reset_us, want[g][i].reset_us) << at;
                ASSERT_EQ(got[k].retry_after_us, want[g][i].retry_after_us) << at;
                ASSERT_EQ(got[k].delay_us, want[g][i].delay_us) << at;
                count_shaping(p, costs[g][i], got[k]);
                counts_.decisions[p.algo]++;
                some_allowed = some_allowed || got[k].allowed;
                if (!got[k].allowed) (got[k].retry_after_us == rl::kNever ? counts_.never : counts_.rejected)++;
            }
            if (!admitted[g] && some_allowed) counts_.partial_rejections++;
        }
        for (size_t i = 0; i < keys.size(); i++) {
            Limit& l = *keys[i];
            const std::string at = where + " key " + l.zone + " (" + std::string(rl::algo_name(l.key.p.algo)) + ")";
            compare_key(l, exec->element[1 + 3 * i], exec->element[3 + 3 * i], written[&l], last_reset[&l], t0_ms,
                        t1_ms, at);
            if (HasFatalFailure()) return;
        }
    }

    void count_shaping(const rl::Policy& p, int64_t cost, const rl::Decision& d) {
        counts_.delayed += d.delay_us > 0;
        counts_.too_late += !d.allowed && p.max_delay_units != rl::kNoDelay && cost > 0 && d.remaining >= cost;
    }

    // A refund of one of the last admissions (or of something never admitted).
    static void pick_refund(std::mt19937_64& rng, const Limit& l, int64_t now, int64_t& at, int64_t& cost) {
        if (!l.admitted.empty() && rng() % 5 != 0) {
            size_t back = std::min<size_t>(l.admitted.size(), 1 + rng() % 5);
            const auto& adm = l.admitted[l.admitted.size() - back];
            at = adm.first;
            cost = rng() % 4 == 0 ? static_cast<int64_t>(rng() % static_cast<uint64_t>(l.key.p.capacity() + 2)) : adm.second;
        } else {
            at = now - static_cast<int64_t>(rng() % static_cast<uint64_t>(2 * l.key.p.period_us));
            cost = static_cast<int64_t>(rng() % static_cast<uint64_t>(l.key.p.capacity() + 2));
        }
    }

    // A new policy for a key that has state: any for the hash algorithms; for the log the same
    // number of requests (the C++ ring's length), another period.
    static rl::Policy changed_policy(std::mt19937_64& rng, const rl::Policy& p) {
        rl::Policy q = random_policy(rng, p.algo);
        if (p.algo == rl::Algo::log) q = make_policy(p.algo, p.requests, q.period_us, 0);
        return q;
    }

    // Random timelines of single checks of one algorithm.
    void single_algorithm(rl::Algo algo, uint64_t seed, int timelines, int events) {
        std::mt19937_64 rng(seed);
        for (int round = 0; round < timelines; round++) {
            Limit l(random_policy(rng, algo), "z" + std::to_string(round), random_hash(rng));
            int64_t t = 1600000000LL * kSec + static_cast<int64_t>(rng() % (1000 * kSec));
            for (int e = 0; e < events; e++) {
                t += time_step(rng, l.key.p);
                int64_t now = t;
                uint64_t what = rng() % 100;
                if (what < 2) now = t - kBacks[rng() % 5];       // one event on a clock that stepped back
                if (what == 2) t = now = t - kBacks[rng() % 4];  // the clock stays back
                if (what == 3) {
                    l.key.p = changed_policy(rng, l.key.p);
                    counts_.policy_changes++;
                }
                counts_.clock_back += what < 3;
                std::string where = std::string(rl::algo_name(algo)) + " round " + std::to_string(round) + " event " +
                                    std::to_string(e);
                if (what >= 90) {
                    int64_t at, cost;
                    pick_refund(rng, l, now, at, cost);
                    run_call({&l}, now, {cost}, {at}, where);
                } else {
                    run_call({&l}, now, {random_cost(rng, l.key.p)}, {}, where);
                }
                if (HasFatalFailure()) return;
            }
        }
    }

    void summary(const char* what) {
        std::string line = std::string("redis differential (") +
                           (script_ == rl::CommandScript::fcall ? "FCALL" : "EVALSHA") + "), " + what + ":";
        int64_t total = 0;
        for (rl::Algo a : kAll) {
            auto it = counts_.decisions.find(a);
            if (it == counts_.decisions.end()) continue;
            line += " " + std::string(rl::algo_name(a)) + " " + std::to_string(it->second);
            total += it->second;
        }
        line += " decisions compared (" + std::to_string(total) + " in all: " + std::to_string(counts_.rejected) +
                " rejected, " + std::to_string(counts_.never) + " never admissible; " + std::to_string(counts_.refunds) +
                " refund calls, " + std::to_string(counts_.refunds_changed) + " refunds that changed a state; " +
                std::to_string(counts_.ttl_checked) + " TTLs checked";
        if (counts_.clock_back > 0) line += "; " + std::to_string(counts_.clock_back) + " clock steps back";
        if (counts_.policy_changes > 0) line += "; " + std::to_string(counts_.policy_changes) + " policy changes";
        if (counts_.coarse > 0) line += "; " + std::to_string(counts_.coarse) + " with a coarse sliding weight";
        if (counts_.delayed > 0 || counts_.too_late > 0) {
            line += "; " + std::to_string(counts_.delayed) + " delayed, " + std::to_string(counts_.too_late) +
                    " rejected by max_delay";
        }
        if (counts_.expired_in_real_time > 0) {
            line += "; " + std::to_string(counts_.expired_in_real_time) + " keys expired in real time";
        }
        if (counts_.lean_calls > 0) line += "; " + std::to_string(counts_.lean_calls) + " calls in the lean form";
        if (counts_.groups > 0) {
            line += "; " + std::to_string(counts_.groups) + " groups, " + std::to_string(counts_.groups_admitted) +
                    " admitted, " + std::to_string(counts_.hot_groups) + " on a key an earlier group of the batch changed";
        }
        if (counts_.partial_rejections > 0) {
            line += ", " + std::to_string(counts_.partial_rejections) + " calls rejected by some checks only";
        }
        std::printf("%s)\n", line.c_str());
    }

    // Redis's clock, in ms: brackets a call whose TTLs a test checks.
    int64_t redis_ms() {
        Reply r = rltest::command(conn_.get(), {"TIME"});
        return r && r->type == REDIS_REPLY_ARRAY ? rltest::time_us(r.get()) / 1000 : -1;
    }

    // That `key`'s expiry was set to ttl_ms from a time within [t0_ms, t1_ms] (Redis's clock):
    // exact, however long the machine stalls after the call (a PTTL read later is not).
    void expect_ttl_set(const std::string& key, int64_t ttl_ms, int64_t t0_ms, int64_t t1_ms) {
        Reply exp = rltest::command(conn_.get(), {"PEXPIRETIME", key});
        ASSERT_TRUE(exp && exp->type == REDIS_REPLY_INTEGER);
        ASSERT_GT(t0_ms, 0);
        EXPECT_GE(exp->integer - ttl_ms, t0_ms) << key << ": TTL shorter than " << ttl_ms << " ms";
        EXPECT_LE(exp->integer - ttl_ms, t1_ms) << key << ": TTL longer than " << ttl_ms << " ms";
    }

    // Sends one command as the writers of redis_command.h made it; its reply.
    Reply send(const std::string& cmd) {
        redisAppendFormattedCommand(conn_.get(), cmd.data(), cmd.size());
        return rltest::next_reply(conn_.get());
    }

    // Empties Redis's scripts or functions (what: "SCRIPT" or "FUNCTION"), then expects `cmd` to
    // fail with an error that starts with `error`.
    void flush_then_expect_error(const char* what, const std::string& cmd, const std::string& error) {
        Reply flushed = rltest::command(conn_.get(), {what, "FLUSH"});
        ASSERT_TRUE(flushed && flushed->type == REDIS_REPLY_STATUS);
        Reply r = send(cmd);
        ASSERT_TRUE(r);
        ASSERT_EQ(r->type, REDIS_REPLY_ERROR);
        EXPECT_EQ(std::string(r->str).rfind(error, 0), 0u) << r->str;
    }

    // The command's head as the tests write it by hand: EVALSHA <sha1> or FCALL <name>.
    std::vector<std::string> head(bool injected) const {
        if (script_ == rl::CommandScript::fcall) return {"FCALL", rl::function_name(injected)};
        return {"EVALSHA", rl::script_sha1(injected)};
    }

    std::unique_ptr<rltest::RedisServer> server_;
    Context conn_;
    Counts counts_;
    rl::CommandScript script_ = rl::CommandScript::evalsha;
};

// The tests of decisions, through each way of calling the Lua.
class RedisDiff : public RedisLua, public ::testing::WithParamInterface<rl::CommandScript> {
  protected:
    void SetUp() override {
        script_ = GetParam();
        RedisLua::SetUp();
    }
};

INSTANTIATE_TEST_SUITE_P(Lua, RedisDiff, ::testing::Values(rl::CommandScript::fcall, rl::CommandScript::evalsha),
                         [](const ::testing::TestParamInfo<rl::CommandScript>& p) {
                             return std::string(p.param == rl::CommandScript::fcall ? "fcall" : "evalsha");
                         });

// ---- the timelines -------------------------------------------------------------------------

constexpr int kTimelines = 400;
constexpr int kEvents = 150;

// Every algorithm's timelines must reach the paths worth comparing.
void expect_coverage(const Counts& c, rl::Algo algo) {
    const int64_t n = kTimelines * kEvents;
    EXPECT_EQ(c.decisions.at(algo), n);
    EXPECT_GT(c.rejected, n / 20);
    EXPECT_GT(c.never, n / 200);
    EXPECT_GT(c.refunds_changed, n / 100);
    EXPECT_GT(c.ttl_checked, n / 4);
    EXPECT_GT(c.clock_back, n / 50);
    EXPECT_GT(c.policy_changes, n / 200);
    if (algo == rl::Algo::sliding) {
        EXPECT_GT(c.coarse, n / 50);
    }
    if (rl::is_bucket(algo)) {
        EXPECT_GT(c.delayed, n / 20);
        EXPECT_GT(c.too_late, n / 200);
    }
}

TEST_P(RedisDiff, Gcra) {
    single_algorithm(rl::Algo::gcra, 101, kTimelines, kEvents);
    summary("gcra");
    expect_coverage(counts_, rl::Algo::gcra);
}

TEST_P(RedisDiff, Token) {
    single_algorithm(rl::Algo::token, 102, kTimelines, kEvents);
    summary("token");
    expect_coverage(counts_, rl::Algo::token);
}

TEST_P(RedisDiff, Leaky) {
    single_algorithm(rl::Algo::leaky, 103, kTimelines, kEvents);
    summary("leaky");
    expect_coverage(counts_, rl::Algo::leaky);
}

TEST_P(RedisDiff, Fixed) {
    single_algorithm(rl::Algo::fixed, 104, kTimelines, kEvents);
    summary("fixed");
    expect_coverage(counts_, rl::Algo::fixed);
}

TEST_P(RedisDiff, Sliding) {
    single_algorithm(rl::Algo::sliding, 105, kTimelines, kEvents);
    summary("sliding");
    expect_coverage(counts_, rl::Algo::sliding);
}

TEST_P(RedisDiff, Log) {
    single_algorithm(rl::Algo::log, 106, kTimelines, kEvents);
    summary("log");
    expect_coverage(counts_, rl::Algo::log);
}

// Calendar windows (period=day|week|month, UTC, Berlin, New York) around DST changes and month
// ends: nginx computes the bounds from its clock (here mostly the same as Redis's, sometimes
// skewed by seconds, an hour or more than a window), Redis's clock decides which applies.
TEST_P(RedisDiff, CalendarTimelines) {
    std::mt19937_64 rng(108);
    const void* zones[] = {nullptr, rl::find_time_zone("Europe/Berlin"), rl::find_time_zone("America/New_York")};
    ASSERT_NE(zones[1], nullptr);
    ASSERT_NE(zones[2], nullptr);
    const rl::Calendar cals[] = {rl::Calendar::day, rl::Calendar::week, rl::Calendar::month};
    // 2026-03-27, 2026-10-23, 2026-01-29, 2026-02-26 (UTC midnights): DST changes, month ends.
    const int64_t starts[] = {1774569600LL * kSec, 1792713600LL * kSec, 1769644800LL * kSec, 1772064000LL * kSec};
    const int64_t hour = 3600 * kSec;
    int64_t skewed = 0, shifted_or_refused = 0, rounds = 60, events = 80;
    for (int round = 0; round < rounds; round++) {
        rl::Policy p;
        p.algo = round % 2 ? rl::Algo::sliding : rl::Algo::fixed;
        p.requests = rng() % 4 == 0 ? 1000 + static_cast<int64_t>(rng() % 100000) : 1 + static_cast<int64_t>(rng() % 20);
        p.calendar = cals[rng() % 3];
        p.period_us = rl::calendar_longest_us(p.calendar);
        ASSERT_EQ(rl::finish_policy(p), nullptr);
        const void* tz = zones[rng() % 3];
        Limit l(p, "cal" + std::to_string(round), random_hash(rng));
        int64_t t = starts[rng() % 4] + static_cast<int64_t>(rng() % static_cast<uint64_t>(24 * hour));
        const int64_t step = p.calendar == rl::Calendar::day ? 3 * hour : p.calendar == rl::Calendar::week ? 20 * hour : 80 * hour;
        for (int e = 0; e < events; e++) {
            t += rng() % 4 == 0 ? 0 : static_cast<int64_t>(rng() % static_cast<uint64_t>(step));
            int64_t seen = t;  // nginx's clock
            uint64_t what = rng() % 100;
            if (what < 15) {
                const int64_t skews[] = {-2 * kSec, 2 * kSec, -hour, hour, -2 * p.period_us, 2 * p.period_us};
                seen = t + skews[rng() % 6];
                skewed++;
            }
            ASSERT_TRUE(rl::calendar_window(p.calendar, tz, seen, l.key.p.win));
            if (t < l.key.p.win.start || t >= l.key.p.win.end) shifted_or_refused++;
            std::string where = "calendar round " + std::to_string(round) + " event " + std::to_string(e) + " (" +
                                std::string(rl::calendar_name(p.calendar)) + ", nginx's clock " +
                                std::to_string(seen - t) + " us off)";
            if (what >= 90) {
                int64_t at, cost;
                pick_refund(rng, l, t, at, cost);
                run_call({&l}, t, {cost}, {at}, where);
            } else {
                const int64_t cost = rng() % 8 == 0 ? 0 : 1 + static_cast<int64_t>(rng() % static_cast<uint64_t>(std::min<int64_t>(p.requests, 5)));
                run_call({&l}, t, {cost}, {}, where);
            }
            if (HasFatalFailure()) return;
        }
    }
    summary("calendar");
    EXPECT_EQ(counts_.decisions[rl::Algo::fixed] + counts_.decisions[rl::Algo::sliding], rounds * events);
    EXPECT_GT(counts_.rejected, rounds * events / 20);
    EXPECT_GT(shifted_or_refused, skewed / 4);
}

// 2 to 4 checks of mixed algorithms per call: one rejection leaves every state untouched.
TEST_P(RedisDiff, MultiCheckAllOrNothing) {
    std::mt19937_64 rng(107);
    int64_t calls = 0;
    for (int round = 0; round < 200; round++) {
        std::vector<std::unique_ptr<Limit>> owned;
        std::vector<Limit*> lims;
        size_t n = 2 + rng() % 3;
        for (size_t i = 0; i < n; i++) {
            rl::Algo algo = kAll[rng() % 6];
            owned.push_back(std::make_unique<Limit>(random_policy(rng, algo), "m" + std::to_string(i), random_hash(rng)));
            lims.push_back(owned.back().get());
        }
        int64_t t = 1600000000LL * kSec + static_cast<int64_t>(rng() % (1000 * kSec));
        for (int e = 0; e < 100; e++) {
            t += time_step(rng, lims[rng() % n]->key.p);
            std::string where = "multi round " + std::to_string(round) + " event " + std::to_string(e);
            std::vector<int64_t> costs(n), ats;
            if (rng() % 10 == 0) {
                ats.resize(n);
                for (size_t i = 0; i < n; i++) pick_refund(rng, *lims[i], t, ats[i], costs[i]);
            } else {
                for (size_t i = 0; i < n; i++) costs[i] = random_cost(rng, lims[i]->key.p);
            }
            run_call(lims, t, costs, ats, where);
            if (HasFatalFailure()) return;
            calls++;
        }
    }
    summary("multi-check calls");
    EXPECT_EQ(calls, 200 * 100);
    EXPECT_GT(counts_.partial_rejections, 1000) << "the timelines must exercise all-or-nothing";
}

// Batches of 1 to 50 groups of 1 to 3 checks of mixed algorithms over a few keys, which recur
// across the groups of a batch (hot keys): one call, against the C++ deciding the groups one
// after the other. Between batches: time steps, clock steps back, policy changes.
TEST_P(RedisDiff, Batches) {
    std::mt19937_64 rng(108);
    constexpr int kRounds = 250, kBatches = 25;
    for (int round = 0; round < kRounds; round++) {
        std::vector<std::unique_ptr<Limit>> pool;
        size_t n = 1 + rng() % 8;
        for (size_t i = 0; i < n; i++) {
            rl::Algo algo = kAll[rng() % 6];
            pool.push_back(std::make_unique<Limit>(random_policy(rng, algo), "b" + std::to_string(i), random_hash(rng)));
        }
        int64_t t = 1600000000LL * kSec + static_cast<int64_t>(rng() % (1000 * kSec));
        for (int e = 0; e < kBatches; e++) {
            t += time_step(rng, pool[rng() % n]->key.p);
            int64_t now = t;
            uint64_t what = rng() % 100;
            if (what < 3) now = t - kBacks[rng() % 5];
            if (what == 3) {
                Limit& l = *pool[rng() % n];
                l.key.p = changed_policy(rng, l.key.p);
                counts_.policy_changes++;
            }
            counts_.clock_back += what < 3;
            size_t ngroups = 1 + rng() % 50;
            std::vector<std::vector<Limit*>> groups(ngroups);
            std::vector<std::vector<int64_t>> costs(ngroups);
            for (size_t g = 0; g < ngroups; g++) {
                size_t m = 1 + rng() % std::min<size_t>(3, n);
                while (groups[g].size() < m) {  // distinct keys within a group
                    Limit* l = pool[rng() % n].get();
                    if (std::find(groups[g].begin(), groups[g].end(), l) == groups[g].end()) groups[g].push_back(l);
                }
                for (Limit* l : groups[g]) costs[g].push_back(random_cost(rng, l->key.p));
            }
            run_batch(groups, costs, now, "batch round " + std::to_string(round) + " batch " + std::to_string(e));
            if (HasFatalFailure()) return;
        }
    }
    summary("batches");
    EXPECT_GT(counts_.groups, kRounds * kBatches * 10);
    EXPECT_GT(counts_.groups_admitted, counts_.groups / 10);
    EXPECT_GT(counts_.groups - counts_.groups_admitted, counts_.groups / 10) << "the batches must reject too";
    EXPECT_GT(counts_.hot_groups, counts_.groups / 4) << "the batches must exercise hot keys";
    EXPECT_GT(counts_.partial_rejections, 500) << "the batches must exercise all-or-nothing";
    for (rl::Algo a : kAll) EXPECT_GT(counts_.decisions[a], 1000) << rl::algo_name(a);
    EXPECT_GT(counts_.ttl_checked, 1000);
}

// The lean form (redis_command.h, lua/13-lean.lua): batches of single-check gcra groups of one
// policy, against the C++ core as Batches (every decision, state and TTL): keys repeated within
// a batch, costs beyond 1 and beyond the burst, idle gaps, a clock that goes back, keys expired
// (deleted once worth a fresh key's, on both sides). Every third batch is sent in the general
// form on the same keys, so each path reads what the other wrote; a limit of another policy
// (some shaped) joins some rounds, and a batch with it takes the general form.
TEST_P(RedisDiff, LeanBatches) {
    std::mt19937_64 rng(109);
    constexpr int kRounds = 200, kBatches = 25;
    int64_t expired = 0, general = 0, above_one = 0;
    for (int round = 0; round < kRounds; round++) {
        std::vector<std::unique_ptr<Limit>> pool;
        const rl::Policy p = random_rate_policy(rng, rl::Algo::gcra);
        size_t n = 1 + rng() % 6;
        for (size_t i = 0; i < n; i++) {
            pool.push_back(std::make_unique<Limit>(p, "l" + std::to_string(i), random_hash(rng)));
        }
        if (rng() % 4 == 0) {
            pool.push_back(std::make_unique<Limit>(random_policy(rng, rl::Algo::gcra), "other", random_hash(rng)));
        }
        int64_t t = 1600000000LL * kSec + static_cast<int64_t>(rng() % (1000 * kSec));
        for (int e = 0; e < kBatches; e++) {
            t += time_step(rng, p);
            int64_t now = t;
            uint64_t what = rng() % 100;
            if (what < 3) now = t - kBacks[rng() % 5];
            counts_.clock_back += what < 3;
            for (auto& l : pool) {
                // Expired: Redis drops a key once its state is worth a fresh key's.
                if (rng() % 4 == 0 && rl::decide(l->key.s, l->key.p, now, 0, nullptr).reset_us == 0) {
                    Reply d = rltest::command(conn_.get(), {"DEL", l->redis_key});
                    ASSERT_TRUE(d && d->type == REDIS_REPLY_INTEGER);
                    expired += d->integer;
                    l->key.s = rl::State{};
                }
            }
            size_t ngroups = 1 + rng() % 40;
            std::vector<std::vector<Limit*>> groups(ngroups);
            std::vector<std::vector<int64_t>> costs(ngroups);
            for (size_t g = 0; g < ngroups; g++) {
                Limit* l = pool[rng() % pool.size()].get();
                groups[g].push_back(l);
                costs[g].push_back(random_cost(rng, l->key.p));
                above_one += costs[g].back() > 1;
            }
            rl::BatchForm form = e % 3 == 2 ? rl::BatchForm::general : rl::BatchForm::best;
            general += form == rl::BatchForm::general;
            run_batch(groups, costs, now, "lean round " + std::to_string(round) + " batch " + std::to_string(e), form);
            if (HasFatalFailure()) return;
        }
    }
    summary("lean batches");
    const int64_t calls = kRounds * kBatches;
    EXPECT_GT(counts_.lean_calls, calls / 2);
    EXPECT_LT(counts_.lean_calls, calls - general) << "a batch with a second policy must take the general form";
    EXPECT_GT(counts_.hot_groups, counts_.groups / 4) << "keys must repeat within a batch";
    EXPECT_GT(counts_.groups - counts_.groups_admitted, counts_.groups / 10) << "the batches must reject too";
    EXPECT_GT(counts_.never, 100);
    EXPECT_GT(counts_.ttl_checked, calls);
    EXPECT_GT(expired, calls / 20);
    EXPECT_GT(above_one, counts_.groups / 20);
}

// settle= (settle.h): timelines of decisions (some of quantity 0, kNeedOne), charges past the
// limit, and refunds of part of a cost, against the C++: every reply, state and TTL. Charges
// and refunds carry a call id, as nginx sends them; one in three is sent again (its reply lost):
// the same reply, nothing applied twice.
TEST_P(RedisDiff, SettleTimelines) {
    std::mt19937_64 rng(113);
    std::mt19937_64 lose(114);  // its own: the timelines stay those of seed 113
    int64_t ids = 0;
    auto next_id = [&ids]() { return "w1." + std::to_string(++ids); };
    const rl::Algo kAlgos[] = {rl::Algo::gcra, rl::Algo::token, rl::Algo::leaky,
                               rl::Algo::fixed, rl::Algo::sliding, rl::Algo::log};
    for (int round = 0; round < 120; round++) {
        rl::Algo algo = kAlgos[round % 6];
        Limit l(random_policy(rng, algo), "s" + std::to_string(round), random_hash(rng));
        int64_t t = 1600000000LL * kSec + static_cast<int64_t>(rng() % (1000 * kSec));
        for (int e = 0; e < 60; e++) {
            t += time_step(rng, l.key.p);
            std::string where = "settle round " + std::to_string(round) + " event " + std::to_string(e);
            uint64_t what = rng() % 20;
            if (what < 6) {
                int64_t cap = l.key.p.capacity();
                int64_t cost = rng() % 3 == 0 ? 1 + static_cast<int64_t>(rng() % static_cast<uint64_t>(3 * cap + 2))
                                              : 1 + static_cast<int64_t>(rng() % 4);
                run_charge(l, t, cost, where, next_id(), lose() % 3 == 0);
            } else if (what < 9) {
                int64_t at, cost;
                pick_refund(rng, l, t, at, cost);
                run_call({&l}, t, {cost}, {at}, where, next_id(), lose() % 3 == 0);
            } else if (what < 13) {
                run_call({&l}, t, {rl::kNeedOne}, {}, where);
                counts_.need_one++;
            } else {
                run_call({&l}, t, {random_cost(rng, l.key.p)}, {}, where);
            }
            if (HasFatalFailure()) return;
        }
    }
    std::printf("settle timelines: %lld charges (%lld partly past the debt), %lld of quantity 0, %lld refunds, "
                "%lld sent again\n",
                static_cast<long long>(counts_.charges), static_cast<long long>(counts_.charged_past),
                static_cast<long long>(counts_.need_one), static_cast<long long>(counts_.refunds),
                static_cast<long long>(counts_.resent));
    EXPECT_GT(counts_.resent, 500) << "charges and refunds must be sent again";
    EXPECT_GT(counts_.charges, 1500);
    EXPECT_GT(counts_.charged_past, 100) << "charges must reach the debt's end";
    EXPECT_GT(counts_.rejected, 500) << "the debt must reject later requests";
    for (rl::Algo a : kAlgos) EXPECT_GT(counts_.decisions[a], 300) << rl::algo_name(a);
}

// The API's DELETE between an admission and its refund or charge (issue 30): Redis keeps the
// reset's time, and a refund or a charge of an admission made before it changes nothing (the
// key's new life owes nothing of the old one) while those of later admissions apply; the C++
// side models it as shared memory does (a reset key is a new life). Timelines of decisions
// (quantity 0 among them), refunds, charges and resets, and a refund or a charge of an
// admission picked from before or after the last reset.
TEST_P(RedisDiff, ResetTimelines) {
    std::mt19937_64 rng(131);
    int64_t ids = 0;
    int64_t applied_after = 0;
    for (int round = 0; round < 60; round++) {
        rl::Algo algo = kAll[round % 6];
        Limit l(random_policy(rng, algo), "r" + std::to_string(round), random_hash(rng));
        std::vector<int64_t> decided;  // times of the decisions that admitted, quantity 0 included
        int64_t t = 1600000000LL * kSec + static_cast<int64_t>(rng() % (1000 * kSec));
        for (int e = 0; e < 50; e++) {
            t += time_step(rng, l.key.p);
            std::string where = "reset round " + std::to_string(round) + " event " + std::to_string(e);
            uint64_t what = rng() % 20;
            const std::string id = "r1." + std::to_string(++ids);
            if (what < 2) {
                run_reset(l, t, where);
            } else if (what < 6 && !decided.empty()) {
                int64_t cap = l.key.p.capacity();
                int64_t admitted_at = decided[decided.size() - 1 - rng() % std::min<size_t>(decided.size(), 6)];
                applied_after += !gone(l, admitted_at);
                run_charge(l, t, 1 + static_cast<int64_t>(rng() % static_cast<uint64_t>(cap + 2)), where, id, false,
                           admitted_at);
            } else if (what < 10) {
                int64_t at, cost;
                pick_refund(rng, l, t, at, cost);
                applied_after += !gone(l, at);
                run_call({&l}, t, {cost}, {at}, where, id);
            } else {
                int64_t cost = what < 13 ? rl::kNeedOne : random_cost(rng, l.key.p);
                size_t before = l.admitted.size();
                run_call({&l}, t, {cost}, {}, where);
                if (l.admitted.size() > before || cost == rl::kNeedOne) decided.push_back(t);
            }
            if (HasFatalFailure()) return;
        }
    }
    std::printf("reset timelines: %lld resets, %lld refunds and charges of an earlier life dropped, %lld applied\n",
                static_cast<long long>(counts_.resets), static_cast<long long>(counts_.dropped),
                static_cast<long long>(applied_after));
    EXPECT_GT(counts_.resets, 200);
    EXPECT_GT(counts_.dropped, 150) << "refunds and charges must cross resets";
    EXPECT_GT(applied_after, 500);
    for (rl::Algo a : kAll) EXPECT_GT(counts_.decisions[a], 200) << rl::algo_name(a);
}

// A settle's call id (redis_command.h): a charge or a refund sent again with the id of one that
// ran gets its reply back and changes nothing; its reply is kept kCallMemoryMs under
// "<key>:call:<id>", in the key's cluster slot; another id is applied; no id keeps nothing; a
// decide call takes no id.
TEST_P(RedisDiff, SettleCallIdAppliedOnce) {
    rl::Policy p = rltest::policy(rl::Algo::gcra, 10, 3600 * kSec, 4);  // outlives any stall
    const rl::Policy debt = rl::debt_policy(p);
    rl::RedisCheck c;
    c.zone = "once";
    c.hash = rl::KeyHash{7, 8};
    c.policy = &debt;
    c.cost = 3;
    c.at = rl::debt_shift(p, debt);
    std::string key(rl::redis_key_len(kPrefix, c.zone, p.algo), '?');
    key.resize(rl::redis_key(key.data(), kPrefix, c.zone, c.hash, p.algo));
    const int64_t t = 1600000000LL * kSec;
    auto charge = [&](int64_t now, std::string_view id) {
        std::string cmd(rl::charge_command(nullptr, script_, true, kPrefix, &c, 1, now, id), '?');
        EXPECT_EQ(rl::charge_command(cmd.data(), script_, true, kPrefix, &c, 1, now, id), cmd.size());
        return cmd;
    };
    auto values = [](const Reply& r) {
        std::vector<int64_t> v;
        EXPECT_TRUE(r && r->type == REDIS_REPLY_ARRAY) << (r && r->type == REDIS_REPLY_ERROR ? r->str : "");
        for (size_t i = 0; r && r->type == REDIS_REPLY_ARRAY && i < r->elements; i++) v.push_back(r->element[i]->integer);
        return v;
    };
    auto state = [&]() {
        Reply r = rltest::command(conn_.get(), {"GET", key});
        return r && r->type == REDIS_REPLY_STRING ? std::string(r->str, r->len) : std::string("(none)");
    };
    auto dbsize = [&]() { return rltest::command(conn_.get(), {"DBSIZE"})->integer; };

    const std::string cmd = charge(t, "w1.1");
    const int64_t t0 = redis_ms();
    const std::vector<int64_t> first = values(send(cmd));
    const int64_t t1 = redis_ms();
    ASSERT_EQ(first.size(), rl::decide_reply_len(1));
    EXPECT_EQ(first[0], 1);
    rl::State cpp{};  // the C++ side: each charge applied once
    rl::Decision want;
    EXPECT_EQ(rl::charge(cpp, nullptr, p, debt, t, 3, &want), 3);
    EXPECT_EQ(first[3], want.remaining);
    const std::string after = state();
    const std::string marker = key + ":call:w1.1";
    expect_ttl_set(marker, rl::kCallMemoryMs, t0, t1);
    EXPECT_EQ(rl::cluster_slot(marker), rl::cluster_slot(key));
    // The same bytes again (a reply lost): the first reply, nothing charged.
    EXPECT_EQ(values(send(cmd)), first);
    EXPECT_EQ(state(), after);
    // Later, with the same id (Redis's time moved on): still the first reply.
    EXPECT_EQ(values(send(charge(t + kSec, "w1.1"))), first);
    EXPECT_EQ(state(), after);
    // Another id: charged.
    std::vector<int64_t> second = values(send(charge(t, "w1.2")));
    EXPECT_NE(state(), after);
    rl::charge(cpp, nullptr, p, debt, t, 3, &want);
    EXPECT_EQ(second[3], want.remaining);
    EXPECT_EQ(second[4], want.reset_us);
    // No id: nothing remembered.
    const int64_t keys = dbsize();
    values(send(charge(t, "")));
    EXPECT_EQ(dbsize(), keys);
    // An id beyond kCallIdMax bytes is cut there.
    const std::string long_id(rl::kCallIdMax + 10, 'x');
    values(send(charge(t, long_id)));
    EXPECT_EQ(rltest::command(conn_.get(), {"EXISTS", key + ":call:" + long_id.substr(0, rl::kCallIdMax)})->integer, 1);

    // A refund sent twice with one id gives back once: its state as after one refund.
    rl::RedisCheck r = c;
    r.policy = &p;
    r.cost = 2;
    r.at = t;
    const std::string refund = build(true, script_, true, t + 1, {r}, "w1.9");
    const std::string before_refund = state();
    const std::vector<int64_t> refunded = values(send(refund));
    const std::string once = state();
    EXPECT_NE(once, before_refund);
    EXPECT_EQ(values(send(refund)), refunded);
    EXPECT_EQ(state(), once);
    // Without an id, the same refund applies again (what the id prevents).
    values(send(build(true, script_, true, t + 1, {r})));
    EXPECT_NE(state(), once);

    // A decide call takes no id: bad arguments, nothing written.
    const int64_t before_decide = dbsize();
    std::string decide = build(false, script_, true, t, {r});  // "*<n>\r\n...": one argument more
    const size_t eol = decide.find("\r\n");
    decide = "*" + std::to_string(std::stoi(decide.substr(1, eol - 1)) + 1) + decide.substr(eol) + "$5\r\nw1.10\r\n";
    Reply bad = send(decide);
    ASSERT_TRUE(bad && bad->type == REDIS_REPLY_ERROR);
    EXPECT_EQ(std::string(bad->str), "ERR ratelimit script: bad arguments");
    EXPECT_EQ(dbsize(), before_decide);
}

// After a SCRIPT FLUSH, EVALSHA fails with NOSCRIPT (the client then sends EVAL), EVAL works,
// and loads the script again for EVALSHA.
// Block after abuse (block.h): groups of 1 or 2 checks with block_us, against the C++ of the
// shared-memory pass (decide_blocking per check, then all or nothing): a live block rejects
// with its time left and changes nothing, a check that rejects by itself starts its block,
// another check's rejection does not; time steps land before, on and after a block's end.
// After every call, as in run_call: the states and their TTLs, and each check's block key (its
// end, and the TTL of a block just started).
TEST_P(RedisDiff, BlockTimelines) {
    std::mt19937_64 rng(109);
    static const int64_t kBlocks[] = {kSec, 7 * kSec, 60 * kSec, 3600 * kSec};
    int64_t live = 0, started = 0, ended = 0, bystander = 0, calls = 0, block_ttls = 0;
    for (int round = 0; round < 150; round++) {
        size_t n = 1 + rng() % 2;
        std::vector<std::unique_ptr<Limit>> owned;
        std::vector<Limit*> lims;
        std::vector<int64_t> until(n, 0);
        for (size_t i = 0; i < n; i++) {
            rl::Policy p = random_policy(rng, kAll[rng() % 6]);
            if (i == 0 || rng() % 2 == 0) p.block_us = kBlocks[rng() % 4];
            owned.push_back(std::make_unique<Limit>(p, "b" + std::to_string(i), random_hash(rng)));
            lims.push_back(owned.back().get());
        }
        int64_t t = 1600000000LL * kSec + static_cast<int64_t>(rng() % (1000 * kSec));
        for (int e = 0; e < 60; e++) {
            const rl::Policy& p0 = lims[0]->key.p;
            switch (rng() % 12) {
                case 0: t = until[0] > t ? until[0] - 1 : t; break;  // the last microsecond of a block
                case 1: t = until[0] > t ? until[0] : t; break;      // its end
                case 2: t += p0.block_us / 2; break;
                default: t += time_step(rng, lims[rng() % n]->key.p);
            }
            std::string where = "block round " + std::to_string(round) + " event " + std::to_string(e);
            std::vector<int64_t> costs(n);
            for (size_t i = 0; i < n; i++) costs[i] = random_cost(rng, lims[i]->key.p);

            // The C++ side.
            std::vector<rl::State> before(n);
            std::vector<std::vector<int64_t>> live_before(n);
            for (size_t i = 0; i < n; i++) {
                before[i] = lims[i]->key.s;
                live_before[i] = lims[i]->live();
            }
            std::vector<rl::Decision> want(n);
            bool all = true;
            for (size_t i = 0; i < n; i++) {
                auto& k = lims[i]->key;
                if (until[i] != 0 && !rl::block_live(until[i], t)) {
                    ended++;  // (forgotten: an ended block decides nothing)
                    until[i] = 0;
                }
                want[i] = rl::decide_blocking(k.s, &until[i], k.p, t, costs[i], k.ring.data());
                all = all && want[i].allowed;
            }
            for (size_t i = 0; i < n; i++) {
                auto& k = lims[i]->key;
                if (all) {
                    if (k.p.algo == rl::Algo::log) rl::commit_log(want[i], k.ring.data(), k.p, costs[i]);
                    k.s = want[i].next;
                } else if (want[i].allowed) {
                    want[i] = rl::decide(k.s, k.p, t, 0, k.ring.data());  // reports, as a cost-0 request
                    if (k.p.block_us > 0) bystander++;
                }
                live += want[i].block == rl::kBlockLive;
                started += want[i].block == rl::kBlockStarted;
            }

            // Redis, observed (and its keys made persistent, so that none expires in real time
            // before the next event: the timeline's clock is the injected one) with the block
            // keys, those of checks without block_us too.
            std::vector<std::string> blocks;
            for (Limit* l : lims) blocks.push_back(l->redis_key + ":block");
            Observed obs;
            observe_call(build(false, script_, true, t, checks_of(lims, costs, {})), lims, where, &obs, blocks);
            if (HasFatalFailure()) return;
            std::vector<rl::Decision> got(n);
            ASSERT_TRUE(rl::decode_decide_reply(obs.values.data(), obs.values.size(), n, got.data(), nullptr)) << where;
            const redisReply* exec = obs.exec.get();
            for (size_t i = 0; i < n; i++) {
                Limit& l = *lims[i];
                const std::string at = where + " check " + std::to_string(i) + " (" + std::string(rl::algo_name(l.key.p.algo)) +
                                       " " + std::to_string(l.key.p.requests) + "/" + std::to_string(l.key.p.period_us) +
                                       "us burst " + std::to_string(l.key.p.burst) + " block " +
                                       std::to_string(l.key.p.block_us) + "us) cost " + std::to_string(costs[i]) +
                                       " now " + std::to_string(t);
                ASSERT_EQ(got[i].allowed, want[i].allowed) << at;
                ASSERT_EQ(int(got[i].block), int(want[i].block)) << at;
                ASSERT_EQ(got[i].remaining, want[i].remaining) << at;
                ASSERT_EQ(got[i].reset_us, want[i].reset_us) << at;
                ASSERT_EQ(got[i].retry_after_us, want[i].retry_after_us) << at;
                ASSERT_EQ(got[i].delay_us, want[i].delay_us) << at;

                bool written = all && (l.is_log() ? l.live() != live_before[i] : !(l.key.s == before[i]));
                compare_key(l, exec->element[1 + 3 * i], exec->element[3 + 3 * i], written, want[i].reset_us,
                            obs.t0_ms, obs.t1_ms, at);
                if (HasFatalFailure()) return;

                // The block key: the end C++ holds for a live block; a TTL only on a block just
                // started (block_ms + 1, set within the call); none at all without block_us.
                const redisReply* bexp = exec->element[1 + 3 * (n + i)];
                const redisReply* bval = exec->element[3 + 3 * (n + i)];
                ASSERT_EQ(bexp->type, REDIS_REPLY_INTEGER) << at;
                if (l.key.p.block_us == 0) {
                    ASSERT_EQ(bexp->integer, -2) << at << ": a block key without block_us";
                    continue;
                }
                if (until[i] != 0) {
                    ASSERT_EQ(bval->type, REDIS_REPLY_STRING) << at << ": a live block without its key";
                    ASSERT_EQ(std::string(bval->str, bval->len), std::to_string(until[i])) << at;
                } else if (bval->type != REDIS_REPLY_NIL) {
                    ASSERT_EQ(bval->type, REDIS_REPLY_STRING) << at;
                    ASSERT_LE(std::atoll(bval->str), t) << at << ": Redis holds a live block C++ does not";
                }
                if (want[i].block == rl::kBlockStarted) {
                    const int64_t ttl_ms = rl::ceil_div(l.key.p.block_us, 1000) + 1;
                    ASSERT_GE(ttl_ms, bexp->integer - obs.t1_ms) << at << ": block TTL longer than block_ms + 1 ms";
                    ASSERT_LE(ttl_ms, bexp->integer - obs.t0_ms) << at << ": block TTL shorter than block_ms + 1 ms";
                    block_ttls++;
                } else {
                    ASSERT_LT(bexp->integer, 0) << at << ": a block TTL set without a block starting";
                }
            }
            calls++;
        }
    }
    std::printf("block timelines: %lld calls, %lld blocked, %lld blocks started (%lld block TTLs checked), %lld ended, "
                "%lld bystanders; %lld state TTLs checked, %lld keys expired in real time\n",
                static_cast<long long>(calls), static_cast<long long>(live), static_cast<long long>(started),
                static_cast<long long>(block_ttls), static_cast<long long>(ended), static_cast<long long>(bystander),
                static_cast<long long>(counts_.ttl_checked), static_cast<long long>(counts_.expired_in_real_time));
    EXPECT_EQ(calls, 150 * 60);
    EXPECT_EQ(block_ttls, started);
    EXPECT_GT(counts_.ttl_checked, 1000);
    EXPECT_GT(live, 1000);
    EXPECT_GT(started, 100);
    EXPECT_GT(ended, 100);
    EXPECT_GT(bystander, 50);
}

TEST_F(RedisLua, NoscriptAfterFlushThenEval) {
    // 10 per hour: the state written by EVAL lives 6 minutes in real time, beyond any stall
    // before EVALSHA reads it.
    Limit l(rltest::policy(rl::Algo::gcra, 10, 3600 * kSec, 2), "ns", rl::KeyHash{1, 2});
    const int64_t now = 1700000000LL * kSec;
    std::vector<rl::RedisCheck> checks = checks_of({&l}, {1}, {});
    flush_then_expect_error("SCRIPT", build(false, rl::CommandScript::evalsha, true, now, checks), "NOSCRIPT");
    if (HasFatalFailure()) return;

    Reply r = send(build(false, rl::CommandScript::eval, true, now, checks));
    ASSERT_TRUE(r && r->type == REDIS_REPLY_ARRAY) << (r && r->type == REDIS_REPLY_ERROR ? r->str : "");
    ASSERT_EQ(r->elements, rl::decide_reply_len(1));
    EXPECT_EQ(r->element[0]->integer, 1);
    EXPECT_EQ(r->element[3]->integer, 2);  // remaining: burst 2 + 1 - 1

    r = send(build(false, rl::CommandScript::evalsha, true, now, checks));
    ASSERT_TRUE(r && r->type == REDIS_REPLY_ARRAY) << "EVAL should have cached the script for EVALSHA";
    EXPECT_EQ(r->element[3]->integer, 1);
}

// The production variant reads Redis's clock: its now lies between the TIME before and after.
// The ARGV now is ignored. Its key then expires by itself once idle. Its expiry is read in the
// call's transaction: the 51 ms key cannot expire before, however the machine stalls.
TEST_P(RedisDiff, ProductionVariantUsesRedisTime) {
    Limit l(rltest::policy(rl::Algo::gcra, 20, kSec), "prod", rl::KeyHash{3, 4});
    // Production: the Lua's production variant; the now passed is not sent.
    std::string cmd = build(false, script_, false, 12345, checks_of({&l}, {1}, {}));
    EXPECT_EQ(cmd.find("12345"), std::string::npos);
    redisContext* c = conn_.get();
    rltest::append(c, {"TIME"});
    rltest::append(c, {"MULTI"});
    redisAppendFormattedCommand(c, cmd.data(), cmd.size());
    rltest::append(c, {"PEXPIRETIME", l.redis_key});
    rltest::append(c, {"EXEC"});
    rltest::append(c, {"TIME"});
    Reply t0 = rltest::next_reply(c);
    for (int i = 0; i < 3; i++) ASSERT_TRUE(rltest::next_reply(c));  // OK, QUEUED, QUEUED
    Reply exec = rltest::next_reply(c), t1 = rltest::next_reply(c);
    ASSERT_TRUE(exec && exec->type == REDIS_REPLY_ARRAY && exec->elements == 2);
    const redisReply* r = exec->element[0];
    const redisReply* exp = exec->element[1];
    ASSERT_TRUE(r->type == REDIS_REPLY_ARRAY) << (r->type == REDIS_REPLY_ERROR ? r->str : "");
    std::vector<int64_t> values;
    for (size_t i = 0; i < r->elements; i++) values.push_back(r->element[i]->integer);
    rl::Decision d;
    int64_t now = 0;
    ASSERT_TRUE(rl::decode_decide_reply(values.data(), values.size(), 1, &d, &now));
    EXPECT_TRUE(d.allowed);
    EXPECT_EQ(d.reset_us, 50000);  // one request of 20/s drains in 50 ms
    EXPECT_GE(now, rltest::time_us(t0.get()));
    EXPECT_LE(now, rltest::time_us(t1.get()));
    EXPECT_LT(std::llabs(now - rltest::time_us(t1.get())), kSec);
    ASSERT_EQ(exp->type, REDIS_REPLY_INTEGER);  // 51 ms, set during the call
    EXPECT_GE(exp->integer - 51, rltest::time_us(t0.get()) / 1000);
    EXPECT_LE(exp->integer - 51, rltest::time_us(t1.get()) / 1000);

    std::this_thread::sleep_for(std::chrono::milliseconds(120));
    Reply exists = rltest::command(c, {"EXISTS", l.redis_key});
    EXPECT_EQ(exists->integer, 0) << "an idle key must expire once its state is worth a fresh one";
}

// The production script decides a batch on Redis's clock: one hot key of capacity 2 in four
// groups admits the first two, and a group with a rejected check consumes none of its others.
TEST_P(RedisDiff, ProductionBatch) {
    Limit hot(rltest::policy(rl::Algo::gcra, 2, kSec, 1), "prodb", rl::KeyHash{7, 8});
    Limit other(rltest::policy(rl::Algo::fixed, 100, 60 * kSec), "prodb", rl::KeyHash{9, 10});
    std::vector<rl::RedisCheck> one = checks_of({&hot}, {1}, {}), two = checks_of({&other, &hot}, {1, 1}, {});
    std::vector<rl::RedisGroup> groups = {{one.data(), 1}, {two.data(), 2}, {one.data(), 1}, {two.data(), 2}};
    size_t len = rl::batch_command_len(script_, false, kPrefix, groups.data(), groups.size(), 0);
    std::string cmd(len, '\0');
    ASSERT_EQ(rl::write_batch_command(cmd.data(), script_, false, kPrefix, groups.data(),
                                      groups.size(), 0),
              len);
    redisContext* c = conn_.get();
    rltest::append(c, {"TIME"});
    rltest::append(c, {"MULTI"});  // the hot key's expiry read before it can expire (as above)
    redisAppendFormattedCommand(c, cmd.data(), cmd.size());
    rltest::append(c, {"PEXPIRETIME", hot.redis_key});
    rltest::append(c, {"GET", other.redis_key});
    rltest::append(c, {"EXEC"});
    rltest::append(c, {"TIME"});
    Reply t0 = rltest::next_reply(c);
    for (int i = 0; i < 4; i++) ASSERT_TRUE(rltest::next_reply(c));  // OK, QUEUED...
    Reply exec = rltest::next_reply(c), t1 = rltest::next_reply(c);
    ASSERT_TRUE(exec && exec->type == REDIS_REPLY_ARRAY && exec->elements == 3);
    const redisReply* r = exec->element[0];
    const redisReply* exp = exec->element[1];
    const redisReply* fixed = exec->element[2];
    ASSERT_TRUE(r->type == REDIS_REPLY_ARRAY) << (r->type == REDIS_REPLY_ERROR ? r->str : "");
    std::vector<int64_t> values;
    for (size_t i = 0; i < r->elements; i++) values.push_back(r->element[i]->integer);
    rl::Decision d[6];
    bool admitted[4];
    int64_t now = 0;
    ASSERT_TRUE(rl::decode_batch_reply(values.data(), values.size(), groups.data(), groups.size(), d, admitted, &now));
    EXPECT_GE(now, rltest::time_us(t0.get()));
    EXPECT_LE(now, rltest::time_us(t1.get()));
    EXPECT_TRUE(admitted[0]);
    EXPECT_TRUE(admitted[1]);
    EXPECT_FALSE(admitted[2]);
    EXPECT_FALSE(admitted[3]);
    EXPECT_TRUE(d[1].allowed);   // group 2's fixed window: admitted with it
    EXPECT_EQ(d[1].remaining, 99);
    EXPECT_TRUE(d[4].allowed);   // group 4's fixed window allowed, but its group was rejected...
    EXPECT_EQ(d[4].remaining, 99);  // ...so it reports the state as it stands: one consumed
    EXPECT_FALSE(d[5].allowed);
    EXPECT_EQ(d[5].reset_us, kSec);  // the bucket holds 2 units of 0.5 s
    ASSERT_EQ(exp->type, REDIS_REPLY_INTEGER);  // TTL of the hot key's last change: 1 s + 1 ms
    EXPECT_GE(exp->integer - 1001, rltest::time_us(t0.get()) / 1000);
    EXPECT_LE(exp->integer - 1001, rltest::time_us(t1.get()) / 1000);
    rl::State s;
    ASSERT_TRUE(stored_state(fixed, s));
    EXPECT_EQ(s.b, 1);
}

// Malformed calls are error replies, never decisions, and write nothing.
TEST_P(RedisDiff, BadArgumentsAreErrors) {
    // The call without its head (EVALSHA <sha1> or FCALL <name>).
    auto call = [this](const std::vector<std::string>& rest) {
        std::vector<std::string> args = head(true);
        args.insert(args.end(), rest.begin(), rest.end());
        return rltest::command(conn_.get(), args);
    };
    // One gcra check: algo requests period burst refill token depth wscale cost at delay_level
    // max_delay_units block_us.
    const std::string ok = doubles({1, 0, 1, 1, 0, 1, 1, 1, 1, 1, 0, -1, -1, 0});
    const double nan = std::nan("");
    const std::vector<std::vector<std::string>> bad = {
        {"1", "k", "decide", "1"},                                            // too few ARGV
        {"1", "k", "decide", "1", ok, "x"},                                   // too many
        {"1", "k", "judge", "1", ok},                                         // mode
        {"1", "k", "charges", "1", ok},                                       // mode
        {"1", "k", "decide", "x", ok},                                        // now
        {"1", "k", "decide", "1", doubles({1, 9, 1, 1, 0, 1, 1, 1, 1, 1, 0, -1, -1, 0})},    // algo
        {"1", "k", "decide", "1", doubles({1, 0.5, 1, 1, 0, 1, 1, 1, 1, 1, 0, -1, -1, 0})},  // algo
        {"1", "k", "decide", "1", doubles({1, 0, 0, 1, 0, 1, 1, 1, 1, 1, 0, -1, -1, 0})},    // requests
        {"1", "k", "decide", "1", doubles({1, 0, 1, 1, 0, 0, 1, 1, 1, 1, 0, -1, -1, 0})},    // refill
        {"1", "k", "decide", "1", doubles({1, 0, 1, 1, 0, 1, 1, 1, 1, -2, 0, -1, -1, 0})},   // cost (-1: kNeedOne)
        {"1", "k", "decide", "1", doubles({1, 0, 1, 1, 0, 1, 1, 1, 1, nan, 0, -1, -1, 0})},  // cost
        {"1", "k", "decide", "1", doubles({1, 0, 1, 1, 0, 1, 1, 1, 1, 1, 0, -2, -1, 0})},  // delay_level
        {"1", "k", "decide", "1", doubles({1, 0, 1, 1, 0, 1, 1, 1, 1, 1, 0, -1, nan, 0})},  // max_delay_units
        {"1", "k", "decide", "1", doubles({1, 0, 1, 1, 0, 1, 1, 1, 1, 1, 0, -1, -1, -1})},  // block_us
        {"1", "k", "decide", "1", doubles({1, 0, 1, 1, 0, 1, 1, 1, 1, 1, 0, -1, -1, 0.5})},  // block_us
        {"1", "k", "decide", "1", ok.substr(0, ok.size() - 1)},               // truncated
        {"1", "k", "decide", "1", ok + "x"},                                  // trailing bytes
        {"1", "k", "decide", "1", doubles({2, 0, 1, 1, 0, 1, 1, 1, 1, 1, 0, -1, -1, 0})},    // group of 2
        {"1", "k", "decide", "1", doubles({-1}) + ok},                        // group size
        {"1", "k", "decide", "1", doubles({0.5}) + ok},                       // group size
        {"2", "k", "k2", "decide", "1", ok},                                  // keys
        {"0", "decide", "1", ok},                                             // keys
        // The lean form: burst refill token depth, then each check's cost.
        {"1", "k", "lean", "1", doubles({1, 1, 1, 1, 1}), "x"},               // too many ARGV
        {"1", "k", "lean", "x", doubles({1, 1, 1, 1, 1})},                    // now
        {"1", "k", "lean", "1", doubles({1, 0, 1, 1, 1})},                    // refill
        {"1", "k", "lean", "1", doubles({1, 1, 1, 0, 1})},                    // depth
        {"1", "k", "lean", "1", doubles({nan, 1, 1, 1, 1})},                  // burst
        {"1", "k", "lean", "1", doubles({1, 1, 1, 1, -1})},                   // cost (no kNeedOne)
        {"1", "k", "lean", "1", doubles({1, 1, 1, 1, nan})},                  // cost
        {"1", "k", "lean", "1", doubles({1, 1, 1, 1, 1}).substr(1)},          // truncated
        {"1", "k", "lean", "1", doubles({1, 1, 1, 1, 1}) + "x"},              // trailing bytes
        {"2", "k", "k2", "lean", "1", doubles({1, 1, 1, 1, 1})},              // keys
        // The count form of a sync call (sync_command.h): a gcra policy's 8 doubles, then each need.
        {"1", "k", "count", "1", doubles({0, 1, 1, 0, 1, 1, 1, 1, 1}), "", "x"},  // too many ARGV
        {"1", "k", "count", "x", doubles({0, 1, 1, 0, 1, 1, 1, 1, 1})},          // now
        {"1", "k", "count", "1", doubles({1, 1, 1, 0, 1, 1, 1, 1, 1})},          // algo: gcra only
        {"1", "k", "count", "1", doubles({0, 0, 1, 0, 1, 1, 1, 1, 1})},          // requests
        {"1", "k", "count", "1", doubles({0, 1, 1, nan, 1, 1, 1, 1, 1})},        // burst
        {"1", "k", "count", "1", doubles({0, 1, 1, 0, 0, 1, 1, 1, 1})},          // refill
        {"1", "k", "count", "1", doubles({0, 1, 1, 0, 1, 1, 1, 0, 1})},          // weight_scale
        {"1", "k", "count", "1", doubles({0, 1, 1, 0, 1, 1, 1, 1, -1})},         // need
        {"1", "k", "count", "1", doubles({0, 1, 1, 0, 1, 1, 1, 1, nan})},        // need
        {"1", "k", "count", "1", doubles({0, 1, 1, 0, 1, 1, 1, 1, 1}).substr(1)},  // truncated
        {"1", "k", "count", "1", doubles({0, 1, 1, 0, 1, 1, 1, 1, 1}) + "x"},      // trailing bytes
        {"2", "k", "k2", "count", "1", doubles({0, 1, 1, 0, 1, 1, 1, 1, 1})},      // keys
    };
    for (size_t i = 0; i < bad.size(); i++) {
        Reply r = call(bad[i]);
        ASSERT_TRUE(r);
        EXPECT_EQ(r->type, REDIS_REPLY_ERROR) << "case " << i;
    }
    Reply good = call({"1", "k", "decide", "1", ok});
    ASSERT_TRUE(good && good->type == REDIS_REPLY_ARRAY) << (good && good->type == REDIS_REPLY_ERROR ? good->str : "");
    Reply counted = call({"1", "kc", "count", "1", doubles({0, 1, 1, 0, 1, 1, 1, 1, 1})});  // and its good call
    ASSERT_TRUE(counted && counted->type == REDIS_REPLY_ARRAY && counted->elements == rl::sync_reply_len(1, true))
        << (counted && counted->type == REDIS_REPLY_ERROR ? counted->str : "");
    Reply empty = call({"0", "decide", "7", ""});  // no group: {0, now}
    ASSERT_TRUE(empty && empty->type == REDIS_REPLY_ARRAY && empty->elements == 2);
    EXPECT_EQ(empty->element[1]->integer, 7);

    // A batch whose second group is bad writes nothing, not even the first group's log.
    const std::string log_check = doubles({1, 5, 10, 1000000, 0, 1, 100000, 10, 1000000, 1, 0, -1, -1, 0});
    const std::string bad_check = doubles({1, 0, 1, 1, 0, 1, 1, 1, 1, -2, 0, -1, -1, 0});
    Reply r = call({"2", "lg", "k3", "decide", "1700000000000000", log_check + bad_check});
    ASSERT_TRUE(r);
    EXPECT_EQ(r->type, REDIS_REPLY_ERROR);
    Reply exists = rltest::command(conn_.get(), {"EXISTS", "lg", "k3"});
    EXPECT_EQ(exists->integer, 0);
    r = call({"2", "lg", "k3", "decide", "1700000000000000", log_check + ok});
    ASSERT_TRUE(r && r->type == REDIS_REPLY_ARRAY) << (r && r->type == REDIS_REPLY_ERROR ? r->str : "");
    EXPECT_EQ(r->element[0]->integer, 2);
    // Nor a lean batch whose second check is bad.
    r = call({"2", "k4", "k5", "lean", "1700000000000000", doubles({1, 1, 1, 1, 1, -1})});
    ASSERT_TRUE(r);
    EXPECT_EQ(r->type, REDIS_REPLY_ERROR);
    exists = rltest::command(conn_.get(), {"EXISTS", "k4", "k5"});
    EXPECT_EQ(exists->integer, 0);
    r = call({"2", "k4", "k5", "lean", "1700000000000000", doubles({1, 1, 1, 1, 1, 1})});
    ASSERT_TRUE(r && r->type == REDIS_REPLY_ARRAY && r->elements == 10) << (r && r->type == REDIS_REPLY_ERROR ? r->str : "");
    EXPECT_EQ(r->element[0]->integer, 2);
}

// A key left by the earlier layout (a hash {a, b, c}) is read as its state, and replaced by the
// new one at its next change.
TEST_P(RedisDiff, ReadsTheEarlierHashLayout) {
    Limit l(rltest::policy(rl::Algo::sliding, 10, kSec), "old", rl::KeyHash{5, 6});
    const int64_t now = 1700000000LL * kSec + 300000;
    l.key.s = rl::State{1700000000LL * kSec, 4, 3};  // window start, previous, current
    Reply h = rltest::command(conn_.get(), {"HSET", l.redis_key, "a", std::to_string(l.key.s.a), "b", "4", "c", "3"});
    ASSERT_TRUE(h && h->type == REDIS_REPLY_INTEGER);
    // Cost 0: reads it, writes nothing.
    Reply r = send(build(false, script_, true, now, checks_of({&l}, {0}, {})));
    ASSERT_TRUE(r && r->type == REDIS_REPLY_ARRAY && r->elements == rl::decide_reply_len(1))
        << (r && r->type == REDIS_REPLY_ERROR ? r->str : "");
    rl::Decision want = rl::decide(l.key.s, l.key.p, now, 0, nullptr);
    EXPECT_EQ(r->element[3]->integer, want.remaining);  // 10 - (4 * 0.7 + 3) = 4.2
    EXPECT_EQ(r->element[3]->integer, 4);
    EXPECT_EQ(r->element[4]->integer, want.reset_us);
    Reply type = rltest::command(conn_.get(), {"TYPE", l.redis_key});
    EXPECT_EQ(std::string(type->str), "hash");
    run_call({&l}, now, {2}, {}, "old layout, cost 2");  // the state changes: a string now
    if (HasFatalFailure()) return;
    type = rltest::command(conn_.get(), {"TYPE", l.redis_key});
    EXPECT_EQ(std::string(type->str), "string");
    EXPECT_EQ(l.key.s.c, 5);
}

// The lean form reads what run reads: the earlier hash layout, and a lease zone's 96 bytes (its
// state, then shares it ignores); it writes the 24-byte state.
TEST_P(RedisDiff, LeanReadsTheOtherLayouts) {
    const int64_t now = 1700000000LL * kSec + 300000;
    Limit h(rltest::policy(rl::Algo::gcra, 10, kSec, 2), "hash", rl::KeyHash{5, 6});
    h.key.s = rl::State{now + 150000, 0, 0};  // 1.5 tokens ahead
    Reply r = rltest::command(conn_.get(), {"HSET", h.redis_key, "a", std::to_string(h.key.s.a), "b", "0", "c", "0"});
    ASSERT_TRUE(r && r->type == REDIS_REPLY_INTEGER);
    Limit l(rltest::policy(rl::Algo::gcra, 10, kSec, 2), "lease", rl::KeyHash{7, 8});
    l.key.s = rl::State{now + 50000, 0, 0};
    r = rltest::command(conn_.get(), {"SET", l.redis_key, doubles({static_cast<double>(l.key.s.a), 0, 0}) +
                                                              doubles({9, 9, 9, 9, 9, 9, 9, 9, 9})});
    ASSERT_TRUE(r && r->type == REDIS_REPLY_STATUS);
    run_batch({{&h}, {&l}, {&h}}, {{1}, {1}, {1}}, now, "other layouts");
    if (HasFatalFailure()) return;
    EXPECT_EQ(counts_.lean_calls, 1);
    // Burst 2, 3 tokens: the hash's key 1.5 + 1 fits, + 1 more does not; the lease's 0.5 + 1 fits.
    EXPECT_EQ(counts_.groups_admitted, 2);
    for (const Limit* k : {&h, &l}) {
        Reply type = rltest::command(conn_.get(), {"STRLEN", k->redis_key});
        EXPECT_EQ(type->integer, 24);
    }
}

// After a FUNCTION FLUSH (or on a server that never loaded it), FCALL fails with "Function
// not found"; FUNCTION LOAD REPLACE loads it again, and is harmless when it is loaded already.
TEST_F(RedisLua, FunctionNotFoundAfterFlushThenLoad) {
    Limit l(rltest::policy(rl::Algo::gcra, 10, kSec, 2), "fn", rl::KeyHash{1, 2});
    const int64_t now = 1700000000LL * kSec;
    std::vector<rl::RedisCheck> checks = checks_of({&l}, {1}, {});
    flush_then_expect_error("FUNCTION", build(false, rl::CommandScript::fcall, true, now, checks),
                            "ERR Function not found");
    if (HasFatalFailure()) return;

    Reply r;
    for (int i = 0; i < 2; i++) {
        r = rltest::command(conn_.get(), {"FUNCTION", "LOAD", "REPLACE", std::string(rl::function_library_text(true))});
        ASSERT_TRUE(r && r->type == REDIS_REPLY_STRING) << (r && r->type == REDIS_REPLY_ERROR ? r->str : "");
    }
    r = send(build(false, rl::CommandScript::fcall, true, now, checks));
    ASSERT_TRUE(r && r->type == REDIS_REPLY_ARRAY) << (r && r->type == REDIS_REPLY_ERROR ? r->str : "");
    ASSERT_EQ(r->elements, rl::decide_reply_len(1));
    EXPECT_EQ(r->element[0]->integer, 1);
    EXPECT_EQ(r->element[3]->integer, 2);  // remaining: burst 2 + 1 - 1
}

std::vector<std::string> lines_of(std::string_view text) {
    std::vector<std::string> out;
    size_t from = 0;
    while (from < text.size()) {
        size_t to = text.find('\n', from);
        if (to == std::string_view::npos) to = text.size();
        out.emplace_back(text.substr(from, to - from));
        from = to + 1;
    }
    return out;
}

// What is left of two texts once the lines they start and end with alike are set aside:
// the number of lines left in each, and those lines.
struct Middles {
    size_t a_lines, b_lines;
    std::string a, b;
};

Middles middles(std::string_view a_text, std::string_view b_text) {
    std::vector<std::string> a = lines_of(a_text), b = lines_of(b_text);
    size_t head = 0, tail = 0;
    while (head < a.size() && head < b.size() && a[head] == b[head]) head++;
    while (tail < a.size() - head && tail < b.size() - head && a[a.size() - 1 - tail] == b[b.size() - 1 - tail]) tail++;
    Middles m{a.size() - head - tail, b.size() - head - tail, "", ""};
    for (size_t i = head; i < a.size() - tail; i++) m.a += a[i] + "\n";
    for (size_t i = head; i < b.size() - tail; i++) m.b += b[i] + "\n";
    return m;
}

// The library's text after its first line, its name replaced by "NAME".
std::string library_body(bool injected) {
    std::string text(rl::function_library_text(injected));
    text.erase(0, text.find('\n') + 1);
    const std::string name = rl::function_name(injected);
    for (size_t at = text.find(name); at != std::string::npos; at = text.find(name, at)) text.replace(at, name.size(), "NAME");
    return text;
}

// The two variants are the same text but for the clock.
TEST(RedisScript, VariantsDifferOnlyInTheClock) {
    for (bool library : {false, true}) {
        Middles m = library ? middles(library_body(false), library_body(true))
                            : middles(rl::script_text(false), rl::script_text(true));
        EXPECT_LE(m.a_lines, 6u) << m.a;
        EXPECT_LE(m.b_lines, 2u) << m.b;
        EXPECT_NE(m.a.find("local function clock()"), std::string::npos) << m.a;
        EXPECT_NE(m.a.find("call('TIME')"), std::string::npos) << m.a;
        EXPECT_EQ(m.a.find("argv"), std::string::npos) << m.a;
        EXPECT_NE(m.b.find("local function clock(argv) return tonum(argv[2]) end"), std::string::npos) << m.b;
    }
    EXPECT_NE(std::string_view(rl::script_sha1(false)), std::string_view(rl::script_sha1(true)));
    EXPECT_EQ(std::strlen(rl::script_sha1(false)), 40u);
}

// The script and the library are one Lua: they differ only in how a call enters it (the
// script's last lines; the library's name and its registration).
TEST(RedisScript, ScriptAndLibraryShareTheirLua) {
    for (bool injected : {false, true}) {
        const std::string name = rl::function_name(injected);
        EXPECT_EQ(name.size(), rl::kFunctionNameLen);
        EXPECT_EQ(name.rfind("ratelimit_", 0), 0u) << name;
        EXPECT_EQ(name.find_first_not_of("abcdefghijklmnopqrstuvwxyz_0123456789"), std::string::npos) << name;
        std::string_view lib = rl::function_library_text(injected);
        EXPECT_EQ(lib.substr(0, lib.find('\n')), "#!lua name=" + name);

        Middles m = middles(rl::script_text(injected), library_body(injected));
        EXPECT_LE(m.a_lines, 6u) << m.a;
        EXPECT_NE(m.a.find("return run(KEYS, ARGV)"), std::string::npos) << m.a;
        EXPECT_EQ(m.b_lines, 1u) << m.b;
        EXPECT_EQ(m.b, "redis.register_function{function_name = 'NAME', callback = run}\n");
        EXPECT_GT(lines_of(lib).size(), 400u);
    }
    EXPECT_NE(std::string(rl::function_name(false)), rl::function_name(true));
}

}  // namespace

// ---- concurrency (issue 19): slots in a sorted set -------------------------------------------
//
// The C++ core holds a concurrency key as a State (a = slots taken); the test models its sorted
// set (member -> expiry) beside it, drops what expired from both, and compares after every call
// the decisions, the live members with their scores, the rate states and the TTLs.

namespace {

std::string member(uint64_t owner, uint64_t seq) {
    std::string m(rl::concurrency_member_len(owner, seq), '?');
    m.resize(rl::concurrency_member(m.data(), owner, seq));
    return m;
}

int64_t hold_ttl_ms(const rl::Policy& p) { return rl::ceil_div(p.period_us, 1000) + 1; }

struct SlotCounts {
    int64_t admitted = 0, full = 0, never = 0, rate_rejected_with_slot_free = 0, expired = 0;
    int64_t releases = 0, releases_of_nothing = 0, mixed = 0;
};

}  // namespace

class RedisSlots : public RedisLua, public ::testing::WithParamInterface<rl::CommandScript> {
  protected:
    void SetUp() override {
        script_ = GetParam();
        RedisLua::SetUp();
    }

    static bool is_slots(const Limit& l) { return l.key.p.algo == rl::Algo::concurrency; }

    // The model drops l's slots that expired by now (score <= now), and the C++ state as many.
    void expire(Limit& l, int64_t now) {
        auto& z = zsets_[&l];
        int64_t n = 0;
        for (auto it = z.begin(); it != z.end();) {
            if (it->second <= now) {
                it = z.erase(it);
                n++;
            } else {
                ++it;
            }
        }
        if (n > 0) rl::refund(l.key.s, l.key.ring.data(), l.key.p, now, 0, n);
        sc_.expired += n;
    }

    // One call on both sides: the acquire (decide) of a request's checks, or the release (refund)
    // of its slots (its concurrency checks). *admitted: whether the C++ admitted it.
    void slot_call(const std::vector<Limit*>& lims, const std::vector<int64_t>& costs, bool release, uint64_t owner,
                   uint64_t seq, int64_t now, const std::string& where, bool* admitted = nullptr) {
        const size_t n = lims.size();
        std::vector<rl::State> before(n);
        std::vector<std::vector<int64_t>> live_before(n);
        for (size_t i = 0; i < n; i++) {
            if (is_slots(*lims[i])) expire(*lims[i], now);
            before[i] = lims[i]->key.s;
            live_before[i] = lims[i]->live();
        }
        std::vector<rl::Decision> want(n);
        bool all = true;
        if (release) {
            for (size_t i = 0; i < n; i++) {
                Key& k = lims[i]->key;
                auto& z = zsets_[lims[i]];
                int64_t held = 0;  // what it still holds: its expired slots were dropped already
                for (int64_t j = 0; j < costs[i]; j++) held += z.erase(member(owner, seq + static_cast<uint64_t>(j)));
                if (held > 0) rl::refund(k.s, k.ring.data(), k.p, now, 0, held);
                sc_.releases_of_nothing += held == 0;
                want[i] = rl::decide(k.s, k.p, now, 0, k.ring.data());
                all = all && want[i].allowed;
            }
            sc_.releases++;
        } else {
            all = reference_decide_all(lims, costs, now, want);
            for (size_t i = 0; i < n; i++) {
                if (!is_slots(*lims[i])) continue;
                if (all && costs[i] > 0) {
                    for (int64_t j = 0; j < costs[i]; j++) {
                        zsets_[lims[i]][member(owner, seq + static_cast<uint64_t>(j))] = now + lims[i]->key.p.period_us;
                    }
                }
                if (!want[i].allowed) (want[i].retry_after_us == rl::kNever ? sc_.never : sc_.full)++;
                if (!all && want[i].allowed) sc_.rate_rejected_with_slot_free++;
            }
            sc_.admitted += all;
        }
        if (admitted != nullptr) *admitted = all;
        for (Limit* l : lims) {
            if (is_slots(*l)) {
                EXPECT_EQ(l->key.s.a, static_cast<int64_t>(zsets_[l].size())) << where << ": the model";
            }
        }

        std::vector<rl::RedisCheck> checks = checks_of(lims, costs, release ? std::vector<int64_t>(n, 0) : std::vector<int64_t>{});
        for (rl::RedisCheck& c : checks) {
            c.owner = owner;
            c.seq = seq;
        }
        Observed obs;
        observe_call(build(release, script_, true, now, checks), lims, where, &obs);
        if (HasFatalFailure()) return;
        std::vector<rl::Decision> got(n);
        EXPECT_TRUE(rl::decode_decide_reply(obs.values.data(), obs.values.size(), n, got.data(), nullptr)) << where;
        EXPECT_EQ(obs.values[0], all ? 1 : 0) << where;
        const redisReply* exec = obs.exec.get();
        for (size_t i = 0; i < n; i++) {
            Limit& l = *lims[i];
            const std::string at = where + " check " + std::to_string(i) + " (" + std::string(rl::algo_name(l.key.p.algo)) +
                                   " " + std::to_string(l.key.p.requests) + "/" + std::to_string(l.key.p.period_us) +
                                   "us) cost " + std::to_string(costs[i]) + " now " + std::to_string(now) +
                                   (release ? " release" : "");
            EXPECT_EQ(got[i].allowed, want[i].allowed) << at;
            EXPECT_EQ(got[i].remaining, want[i].remaining) << at;
            EXPECT_EQ(got[i].reset_us, want[i].reset_us) << at;
            EXPECT_EQ(got[i].retry_after_us, want[i].retry_after_us) << at;
            EXPECT_EQ(got[i].delay_us, want[i].delay_us) << at;
            const redisReply* exp = exec->element[1 + 3 * i];
            const redisReply* state = exec->element[3 + 3 * i];
            if (!is_slots(l)) {
                bool written = l.is_log() ? l.live() != live_before[i] : !(l.key.s == before[i]);
                if (!release && !all) written = false;
                compare_key(l, exp, state, written, want[i].reset_us, obs.t0_ms, obs.t1_ms, at);
                if (HasFatalFailure()) return;
                continue;
            }
            // The live members and their scores; an admission also dropped the expired ones.
            ASSERT_EQ(state->type, REDIS_REPLY_ARRAY) << at;
            std::map<std::string, int64_t> stored, live;
            for (size_t j = 0; j + 1 < state->elements; j += 2) {
                int64_t score = std::atoll(state->element[j + 1]->str);
                stored[state->element[j]->str] = score;
                if (score > now) live[state->element[j]->str] = score;
            }
            EXPECT_EQ(live, zsets_[&l]) << at;
            const bool added = !release && all && costs[i] > 0;
            if (added) {
                EXPECT_EQ(stored, live) << at << ": expired slots left after an admission";
            }
            // The TTL: the hold, set on admission only (the test's PERSIST clears it after each call).
            ASSERT_EQ(exp->type, REDIS_REPLY_INTEGER) << at;
            if (added) {
                EXPECT_GE(hold_ttl_ms(l.key.p), exp->integer - obs.t1_ms) << at;
                EXPECT_LE(hold_ttl_ms(l.key.p), exp->integer - obs.t0_ms) << at;
            } else {
                EXPECT_LT(exp->integer, 0) << at << ": a TTL set without an admission";
            }
        }
    }

    // One decide (or refund) call of single checks through the injected-time Lua: its decisions.
    std::vector<rl::Decision> call(const std::vector<Limit*>& lims, const std::vector<int64_t>& costs, bool refund,
                                   uint64_t owner, uint64_t seq, int64_t now) {
        std::vector<rl::RedisCheck> checks =
            checks_of(lims, costs, refund ? std::vector<int64_t>(lims.size(), 0) : std::vector<int64_t>{});
        for (rl::RedisCheck& c : checks) {
            c.owner = owner;
            c.seq = seq;
        }
        Reply r = send(build(refund, script_, true, now, checks));
        std::vector<rl::Decision> out(lims.size());
        EXPECT_TRUE(r && r->type == REDIS_REPLY_ARRAY) << (r && r->type == REDIS_REPLY_ERROR ? r->str : "");
        if (!r || r->type != REDIS_REPLY_ARRAY) return out;
        std::vector<int64_t> values;
        for (size_t i = 0; i < r->elements; i++) values.push_back(r->element[i]->integer);
        EXPECT_TRUE(rl::decode_decide_reply(values.data(), values.size(), lims.size(), out.data(), nullptr));
        return out;
    }

    // The key's members and scores.
    std::map<std::string, int64_t> zset(const Limit& l) {
        Reply r = rltest::command(conn_.get(), {"ZRANGE", l.redis_key, "0", "-1", "WITHSCORES"});
        std::map<std::string, int64_t> out;
        EXPECT_TRUE(r && r->type == REDIS_REPLY_ARRAY);
        for (size_t j = 0; r && j + 1 < r->elements; j += 2) out[r->element[j]->str] = std::atoll(r->element[j + 1]->str);
        return out;
    }

    // The release or refresh writer's commands, sent raw; their integer replies.
    std::vector<long long> send_slots(bool refresh, const Limit& l, uint64_t owner, uint64_t seq, int64_t cost,
                                      int64_t score = 0) {
        rl::RedisCheck c;
        c.zone = l.zone;
        c.hash = l.hash;
        c.policy = &l.key.p;
        c.cost = cost;
        c.owner = owner;
        c.seq = seq;
        size_t len = refresh ? rl::refresh_command_len(kPrefix, c, score) : rl::release_command_len(kPrefix, c);
        std::string cmd(len, '\0');
        EXPECT_EQ(refresh ? rl::write_refresh_command(cmd.data(), kPrefix, c, score)
                          : rl::write_release_command(cmd.data(), kPrefix, c),
                  len);
        redisAppendFormattedCommand(conn_.get(), cmd.data(), cmd.size());
        std::vector<long long> out;
        for (int i = 0; i < (refresh ? 2 : 1); i++) {
            Reply r = rltest::next_reply(conn_.get());
            EXPECT_TRUE(r && r->type == REDIS_REPLY_INTEGER) << (r && r->type == REDIS_REPLY_ERROR ? r->str : "");
            out.push_back(r && r->type == REDIS_REPLY_INTEGER ? r->integer : -99);
        }
        return out;
    }

    std::map<const Limit*, std::map<std::string, int64_t>> zsets_;
    SlotCounts sc_;
};

INSTANTIATE_TEST_SUITE_P(Lua, RedisSlots, ::testing::Values(rl::CommandScript::fcall, rl::CommandScript::evalsha),
                         [](const ::testing::TestParamInfo<rl::CommandScript>& p) {
                             return std::string(p.param == rl::CommandScript::fcall ? "fcall" : "evalsha");
                         });

// Random timelines of requests that take slots of one or two concurrency keys, with or without
// rate checks in the same group, and give them back (refund) later, some twice, some never (they
// expire): against the C++ core and the model of the sorted sets.
TEST_P(RedisSlots, AcquireReleaseTimelines) {
    std::mt19937_64 rng(19);
    const int64_t kHolds[] = {30 * kSec, 60 * kSec, 3600 * kSec};
    const int64_t kN[] = {1, 2, 3, 5};
    const rl::Algo kRates[] = {rl::Algo::gcra, rl::Algo::token, rl::Algo::leaky, rl::Algo::fixed, rl::Algo::sliding,
                               rl::Algo::log};
    constexpr int kRounds = 60, kEvents = 120;
    uint64_t seq = 1;
    for (int round = 0; round < kRounds; round++) {
        zsets_.clear();  // keyed by address: the last round's keys are gone
        std::vector<std::unique_ptr<Limit>> conc, rates;
        for (size_t i = 0, m = 1 + rng() % 2; i < m; i++) {
            conc.push_back(std::make_unique<Limit>(rltest::policy(rl::Algo::concurrency, kN[rng() % 4], kHolds[rng() % 3]),
                                                   "c" + std::to_string(round) + "_" + std::to_string(i), random_hash(rng)));
        }
        for (size_t i = 0, m = rng() % 3; i < m; i++) {
            rl::Algo a = kRates[rng() % 6];
            rates.push_back(std::make_unique<Limit>(make_policy(a, 1 + static_cast<int64_t>(rng() % 6), 60 * kSec, rng() % 3),
                                                    "r" + std::to_string(round) + "_" + std::to_string(i), random_hash(rng)));
        }
        struct Request {
            uint64_t owner, seq;
            std::vector<Limit*> lims;
            std::vector<int64_t> costs;
        };
        std::vector<Request> running, done;
        int64_t t = 1700000000LL * kSec + static_cast<int64_t>(rng() % (1000 * kSec));
        const int64_t hold = conc[0]->key.p.period_us;
        for (int e = 0; e < kEvents; e++) {
            switch (rng() % 10) {
                case 0: case 1: case 2: break;
                case 3: t += hold - 1 + static_cast<int64_t>(rng() % 3); break;  // about an expiry
                case 4: t += static_cast<int64_t>(rng() % static_cast<uint64_t>(hold)); break;
                default: t += static_cast<int64_t>(rng() % static_cast<uint64_t>(hold / 20)); break;
            }
            const std::string where = "round " + std::to_string(round) + " event " + std::to_string(e);
            const uint64_t what = rng() % 10;
            if (what < 4 && !running.empty()) {
                size_t k = rng() % running.size();
                Request r = running[k];
                running.erase(running.begin() + static_cast<std::ptrdiff_t>(k));
                slot_call(r.lims, r.costs, true, r.owner, r.seq, t, where);
                done.push_back(r);
            } else if (what == 4 && !done.empty()) {
                const Request& r = done[rng() % done.size()];  // released already: a no-op
                slot_call(r.lims, r.costs, true, r.owner, r.seq, t, where);
            } else {
                Request r{1 + rng() % 3, seq, {}, {}};
                std::vector<Limit*> lims;
                std::vector<int64_t> costs;
                for (auto& c : conc) {
                    if (lims.empty() || rng() % 2 == 0) {
                        int64_t cost = 1;
                        if (rng() % 10 == 0) cost = static_cast<int64_t>(rng() % static_cast<uint64_t>(c->key.p.requests + 2));
                        lims.push_back(c.get());
                        costs.push_back(cost);
                    }
                }
                size_t nslots = lims.size();
                for (auto& l : rates) {
                    if (rng() % 3 != 0) {
                        lims.push_back(l.get());
                        costs.push_back(random_cost(rng, l->key.p));
                    }
                }
                for (size_t i = lims.size(); i > 1; i--) {  // any order: a rate check may come first
                    size_t j = rng() % i;
                    std::swap(lims[i - 1], lims[j]);
                    std::swap(costs[i - 1], costs[j]);
                }
                seq += 1000;
                bool admitted = false;
                slot_call(lims, costs, false, r.owner, r.seq, t, where, &admitted);
                if (admitted) {
                    for (size_t i = 0; i < lims.size(); i++) {
                        if (is_slots(*lims[i]) && costs[i] > 0) {
                            r.lims.push_back(lims[i]);
                            r.costs.push_back(costs[i]);
                        }
                    }
                    if (!r.lims.empty()) running.push_back(r);
                }
                sc_.mixed += lims.size() > nslots;
            }
            if (HasFailure()) return;
        }
    }
    std::printf("concurrency timelines (%s): %lld admitted, %lld full, %lld never, %lld rate rejections with a slot "
                "free, %lld slots expired, %lld releases (%lld of nothing), %lld mixed acquires\n",
                script_ == rl::CommandScript::fcall ? "FCALL" : "EVALSHA", (long long)sc_.admitted, (long long)sc_.full,
                (long long)sc_.never, (long long)sc_.rate_rejected_with_slot_free, (long long)sc_.expired,
                (long long)sc_.releases, (long long)sc_.releases_of_nothing, (long long)sc_.mixed);
    EXPECT_GT(sc_.admitted, 1000);
    EXPECT_GT(sc_.full, 300);
    EXPECT_GT(sc_.never, 10);
    EXPECT_GT(sc_.rate_rejected_with_slot_free, 100);
    EXPECT_GT(sc_.expired, 100);
    EXPECT_GT(sc_.releases, 1000);
    EXPECT_GT(sc_.releases_of_nothing, 100);
    EXPECT_GT(sc_.mixed, 1000);
}

// A slot counts until its hold has passed: at now + hold (score <= now) it no longer does, and
// the next admission drops it. The key expires with the hold.
TEST_P(RedisSlots, ExpiryAfterTheHold) {
    Limit l(rltest::policy(rl::Algo::concurrency, 2, 30 * kSec), "exp", rl::KeyHash{1, 2});
    const int64_t t = 1700000000LL * kSec, hold = 30 * kSec;
    ASSERT_TRUE(call({&l}, {1}, false, 7, 100, t)[0].allowed);
    const int64_t t0_ms = redis_ms();
    rl::Decision d = call({&l}, {1}, false, 7, 101, t + 10)[0];
    const int64_t t1_ms = redis_ms();
    EXPECT_TRUE(d.allowed);
    EXPECT_EQ(d.remaining, 0);
    EXPECT_EQ(zset(l), (std::map<std::string, int64_t>{{"7.100", t + hold}, {"7.101", t + 10 + hold}}));
    expect_ttl_set(l.redis_key, 30001, t0_ms, t1_ms);

    d = call({&l}, {1}, false, 8, 1, t + hold - 1)[0];  // both still count: full
    EXPECT_FALSE(d.allowed);
    EXPECT_EQ(d.retry_after_us, rl::kConcurrencyRetryUs);
    EXPECT_EQ(d.remaining, 0);
    EXPECT_EQ(d.reset_us, 0);
    d = call({&l}, {0}, false, 8, 2, t + hold)[0];  // the first expired: a report sees one slot free
    EXPECT_TRUE(d.allowed);
    EXPECT_EQ(d.remaining, 1);
    EXPECT_EQ(zset(l).size(), 2u) << "a report writes nothing";
    d = call({&l}, {1}, false, 8, 3, t + hold)[0];
    EXPECT_TRUE(d.allowed);
    EXPECT_EQ(d.remaining, 0);
    EXPECT_EQ(zset(l), (std::map<std::string, int64_t>{{"7.101", t + 10 + hold}, {"8.3", t + 2 * hold}}));
    d = call({&l}, {3}, false, 8, 4, t + 5 * hold)[0];  // more than N: never
    EXPECT_FALSE(d.allowed);
    EXPECT_EQ(d.retry_after_us, rl::kNever);
    EXPECT_EQ(d.remaining, 2);
}

// A refresh (ZADD XX + PEXPIRE) keeps a slot past its first hold; it revives nothing.
TEST_P(RedisSlots, RefreshKeepsASlot) {
    Limit l(rltest::policy(rl::Algo::concurrency, 1, 30 * kSec), "ref", rl::KeyHash{3, 4});
    const int64_t t = 1700000000LL * kSec, hold = 30 * kSec;
    ASSERT_TRUE(call({&l}, {1}, false, 5, 9, t)[0].allowed);
    rltest::command(conn_.get(), {"PEXPIRE", l.redis_key, "500000"});  // to see the refresh's TTL
    const int64_t t0_ms = redis_ms();
    EXPECT_EQ(send_slots(true, l, 5, 9, 1, t + hold / 3 + hold), (std::vector<long long>{0, 1}));
    const int64_t t1_ms = redis_ms();
    EXPECT_EQ(zset(l), (std::map<std::string, int64_t>{{"5.9", t + hold / 3 + hold}}));
    expect_ttl_set(l.redis_key, 30001, t0_ms, t1_ms);
    EXPECT_FALSE(call({&l}, {1}, false, 6, 1, t + hold + 1)[0].allowed) << "refreshed: still held";
    EXPECT_TRUE(call({&l}, {1}, false, 6, 2, t + hold / 3 + hold)[0].allowed) << "expired at its new score";

    // Another member: XX adds nothing that is not there (a slot already expired or released).
    EXPECT_EQ(send_slots(true, l, 5, 10, 1, t + 10 * hold), (std::vector<long long>{0, 1}));
    EXPECT_EQ(zset(l), (std::map<std::string, int64_t>{{"6.2", t + hold / 3 + 2 * hold}}));
    rltest::command(conn_.get(), {"DEL", l.redis_key});
    EXPECT_EQ(send_slots(true, l, 6, 2, 1, t + 10 * hold), (std::vector<long long>{0, 0}));
    EXPECT_EQ(rltest::command(conn_.get(), {"EXISTS", l.redis_key})->integer, 0);
}

// The release (ZREM) removes exactly its request's slots; then another request is admitted.
TEST_P(RedisSlots, ReleaseRemovesThatSlot) {
    Limit l(rltest::policy(rl::Algo::concurrency, 3, 60 * kSec), "rel", rl::KeyHash{5, 6});
    const int64_t t = 1700000000LL * kSec;
    ASSERT_TRUE(call({&l}, {1}, false, 1, 10, t)[0].allowed);
    ASSERT_TRUE(call({&l}, {2}, false, 2, 10, t)[0].allowed);  // 2.10 and 2.11
    EXPECT_FALSE(call({&l}, {1}, false, 3, 10, t)[0].allowed);
    EXPECT_EQ(send_slots(false, l, 2, 10, 2), (std::vector<long long>{2}));
    EXPECT_EQ(zset(l), (std::map<std::string, int64_t>{{"1.10", t + 60 * kSec}}));
    EXPECT_EQ(send_slots(false, l, 2, 10, 2), (std::vector<long long>{0}));  // twice: nothing
    rl::Decision d = call({&l}, {1}, false, 3, 10, t + 1)[0];
    EXPECT_TRUE(d.allowed);
    EXPECT_EQ(d.remaining, 1);
    // The refund mode gives back the same way, and reports as a cost-0 check.
    d = call({&l}, {1}, true, 1, 10, t + 2)[0];
    EXPECT_TRUE(d.allowed);
    EXPECT_EQ(d.remaining, 2);
    EXPECT_EQ(zset(l), (std::map<std::string, int64_t>{{"3.10", t + 1 + 60 * kSec}}));
}

// After the API's DELETE of a key (reset_command), the slots of the requests that ran before it
// are not in the key's new set: their release (ZREM) or refund frees nothing of the new life's
// (issue 30): never 2 at once against a concurrency of 1.
TEST_P(RedisSlots, AReleaseAfterAResetFreesNothingOfTheNewLife) {
    Limit l(rltest::policy(rl::Algo::concurrency, 1, 60 * kSec), "rs", rl::KeyHash{9, 10});
    const int64_t t = 1700000000LL * kSec;
    ASSERT_TRUE(call({&l}, {1}, false, 1, 10, t)[0].allowed);  // A1: 1.10
    size_t len = rl::reset_command(nullptr, script_, true, kPrefix, l.zone, l.hash, t + 1);
    std::string cmd(len, '\0');
    rl::reset_command(cmd.data(), script_, true, kPrefix, l.zone, l.hash, t + 1);
    Reply r = send(cmd);
    ASSERT_TRUE(r && r->type == REDIS_REPLY_INTEGER);
    EXPECT_EQ(r->integer, 1);                                  // the set of A1's slot
    ASSERT_TRUE(call({&l}, {1}, false, 3, 10, t + 2)[0].allowed);  // A3, the new life's
    EXPECT_EQ(send_slots(false, l, 1, 10, 1), (std::vector<long long>{0}));  // A1 ends: nothing removed
    EXPECT_FALSE(call({&l}, {1}, false, 4, 10, t + 3)[0].allowed);          // A4 waits for A3
    rl::Decision d = call({&l}, {1}, true, 1, 10, t + 4)[0];                // A1's refund: nothing either
    EXPECT_EQ(d.remaining, 0);
    EXPECT_EQ(zset(l), (std::map<std::string, int64_t>{{"3.10", t + 2 + 60 * kSec}}));
}

// In a batch each group sees the slots the earlier ones took; a group rejected by a rate check
// takes no slot, one rejected for want of a slot consumes no rate.
TEST_P(RedisSlots, BatchGroupsInOrder) {
    Limit c(rltest::policy(rl::Algo::concurrency, 2, 60 * kSec), "bc", rl::KeyHash{7, 8});
    Limit once(rltest::policy(rl::Algo::fixed, 1, 3600 * kSec), "bo", rl::KeyHash{9, 10});
    Limit many(rltest::policy(rl::Algo::fixed, 100, 3600 * kSec), "bm", rl::KeyHash{11, 12});
    const int64_t t = 1700000000LL * kSec;  // a multiple of the hour: the window starts here
    std::vector<std::vector<rl::RedisCheck>> checks = {
        checks_of({&c, &once}, {1, 1}, {}),  // admitted: slot 1.1, `once` used up
        checks_of({&c, &once}, {1, 1}, {}),  // `once` rejects: no slot
        checks_of({&many, &c}, {1, 1}, {}),  // admitted: slot 1.3
        checks_of({&many, &c}, {1, 1}, {}),  // full: `many` not consumed
        checks_of({&c}, {0}, {}),            // a report: full
    };
    for (size_t g = 0; g < checks.size(); g++) {
        for (rl::RedisCheck& k : checks[g]) {
            k.owner = 1;
            k.seq = g + 1;
        }
    }
    std::vector<rl::RedisGroup> groups;
    for (auto& g : checks) groups.push_back({g.data(), g.size()});
    std::string cmd(rl::batch_command_len(script_, true, kPrefix, groups.data(), groups.size(), t), '\0');
    rl::write_batch_command(cmd.data(), script_, true, kPrefix, groups.data(), groups.size(), t);
    Reply r = send(cmd);
    ASSERT_TRUE(r && r->type == REDIS_REPLY_ARRAY) << (r && r->type == REDIS_REPLY_ERROR ? r->str : "");
    std::vector<int64_t> values;
    for (size_t i = 0; i < r->elements; i++) values.push_back(r->element[i]->integer);
    rl::Decision d[9];
    bool admitted[5];
    ASSERT_TRUE(rl::decode_batch_reply(values.data(), values.size(), groups.data(), groups.size(), d, admitted, nullptr));
    EXPECT_EQ(std::vector<bool>(admitted, admitted + 5), (std::vector<bool>{true, false, true, false, true}));
    EXPECT_EQ(d[0].remaining, 1);
    EXPECT_TRUE(d[2].allowed);  // group 2: the slot was free, `once` was not
    EXPECT_EQ(d[2].remaining, 1);
    EXPECT_FALSE(d[3].allowed);
    EXPECT_EQ(d[5].remaining, 0);  // group 3's slot: the last
    EXPECT_TRUE(d[6].allowed);     // group 4: `many` allowed, reports what it has
    EXPECT_EQ(d[6].remaining, 99);
    EXPECT_FALSE(d[7].allowed);
    EXPECT_EQ(d[7].retry_after_us, rl::kConcurrencyRetryUs);
    EXPECT_TRUE(d[8].allowed);
    EXPECT_EQ(d[8].remaining, 0);
    EXPECT_EQ(zset(c), (std::map<std::string, int64_t>{{"1.1", t + 60 * kSec}, {"1.3", t + 60 * kSec}}));
    rl::State s;
    ASSERT_TRUE(stored_state(rltest::command(conn_.get(), {"GET", many.redis_key}).get(), s));
    EXPECT_EQ(s.b, 1);
}

// A batch whose second group has a bad check takes no slot in its first.
TEST_P(RedisSlots, BadBatchTakesNoSlot) {
    Limit c(rltest::policy(rl::Algo::concurrency, 2, 60 * kSec), "bad", rl::KeyHash{1, 1});
    std::vector<rl::RedisCheck> one = checks_of({&c}, {1}, {});
    rl::Policy wrong = rltest::policy(rl::Algo::concurrency, 2, 60 * kSec);
    wrong.requests = rl::kMaxConcurrency + 1;  // beyond what the Lua takes
    std::vector<rl::RedisCheck> two = one;
    two[0].policy = &wrong;
    std::vector<rl::RedisGroup> groups = {{one.data(), 1}, {two.data(), 1}};
    const int64_t t = 1700000000LL * kSec;
    std::string cmd(rl::batch_command_len(script_, true, kPrefix, groups.data(), 2, t), '\0');
    rl::write_batch_command(cmd.data(), script_, true, kPrefix, groups.data(), 2, t);
    Reply r = send(cmd);
    ASSERT_TRUE(r && r->type == REDIS_REPLY_ERROR);
    EXPECT_EQ(std::string(r->str), "ERR ratelimit script: bad check 2");
    EXPECT_EQ(rltest::command(conn_.get(), {"EXISTS", c.redis_key})->integer, 0);
}

// Production: the slot's score is Redis's clock plus the hold.
TEST_P(RedisSlots, ProductionScoreIsRedisTimePlusHold) {
    Limit l(rltest::policy(rl::Algo::concurrency, 4, 5 * kSec), "prod", rl::KeyHash{2, 2});
    std::vector<rl::RedisCheck> checks = checks_of({&l}, {1}, {});
    checks[0].owner = 281474976710655ULL;
    checks[0].seq = 4503599627370495ULL;
    redisContext* c = conn_.get();
    rltest::append(c, {"TIME"});
    std::string cmd = build(false, script_, false, 0, checks);
    redisAppendFormattedCommand(c, cmd.data(), cmd.size());
    rltest::append(c, {"TIME"});
    Reply t0 = rltest::next_reply(c), r = rltest::next_reply(c), t1 = rltest::next_reply(c);
    ASSERT_TRUE(r && r->type == REDIS_REPLY_ARRAY) << (r && r->type == REDIS_REPLY_ERROR ? r->str : "");
    EXPECT_EQ(r->element[0]->integer, 1);
    std::map<std::string, int64_t> z = zset(l);
    ASSERT_EQ(z.size(), 1u);
    EXPECT_EQ(z.begin()->first, "281474976710655.4503599627370495");
    EXPECT_EQ(z.begin()->second, r->element[1]->integer + 5 * kSec);
    EXPECT_GE(z.begin()->second, rltest::time_us(t0.get()) + 5 * kSec);
    EXPECT_LE(z.begin()->second, rltest::time_us(t1.get()) + 5 * kSec);
}
