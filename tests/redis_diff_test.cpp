// Differential test of the Redis script against the C++ core: the same timelines, replayed
// through rl::decide / rl::refund and through the script (its test variant, with the same
// injected time) on a private redis-server, must give identical decisions and states after
// every event, single checks and multi-check calls alike. Also checked after every event:
// each key the script wrote carries a TTL just beyond the decision's reset. Seeds are fixed.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <map>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "algo_test_util.h"
#include "core/exact_math.h"
#include "core/redis_command.h"
#include "core/redis_keys.h"
#include "core/redis_script.h"
#include "core/refund.h"
#include "redis_test_server.h"

namespace {

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
rl::Policy random_policy(std::mt19937_64& rng, rl::Algo algo) {
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

// The shared-memory path's all-or-nothing (rl_decide_all in src/ngx/zone.cpp): decide all at
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
               std::to_string(d.reset_us) + " retry " + std::to_string(d.retry_after_us) + "} ";
    }
    return out;
}

std::string describe_input(const std::vector<Limit*>& lims, const std::vector<rl::State>& before, int64_t now,
                           const std::vector<int64_t>& costs) {
    std::string out = " now " + std::to_string(now);
    for (size_t i = 0; i < lims.size(); i++) {
        const rl::Policy& p = lims[i]->key.p;
        out += "; " + std::string(rl::algo_name(p.algo)) + " " + std::to_string(p.requests) + "/" +
               std::to_string(p.period_us) + "us burst " + std::to_string(p.burst) + " state {" +
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
};

class RedisDiff : public ::testing::Test {
  protected:
    void SetUp() override {
        server_ = std::make_unique<rltest::RedisServer>();
        ASSERT_TRUE(server_->ready()) << server_->error();
        conn_ = server_->connect();
        ASSERT_TRUE(conn_ && conn_->err == 0);
        for (bool injected : {false, true}) {
            Reply r = rltest::command(conn_.get(), {"SCRIPT", "LOAD", std::string(rl::script_text(injected))});
            ASSERT_TRUE(r && r->type == REDIS_REPLY_STRING) << (r ? r->str : "no reply");
            ASSERT_EQ(std::string(r->str), rl::script_sha1(injected)) << "script_sha1 differs from SCRIPT LOAD";
        }
    }

    void TearDown() override {
        conn_.reset();
        server_.reset();
    }

    // The RESP of one call, through the two-pass API.
    static std::string build(bool refund, rl::CommandScript script, bool injected, int64_t now,
                             const std::vector<rl::RedisCheck>& checks) {
        const rl::RedisCheck* c = checks.data();
        size_t n = checks.size();
        size_t len = refund ? rl::refund_command_len(script, injected, kPrefix, c, n, now)
                            : rl::decide_command_len(script, injected, kPrefix, c, n, now);
        std::string buf(len + 16, '\xee');
        size_t wrote = refund ? rl::write_refund_command(buf.data(), script, injected, kPrefix, c, n, now)
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
        }
        return checks;
    }

    // One call on both sides, then every comparison. `ats` empty: a decide call; else a refund.
    void run_call(const std::vector<Limit*>& lims, int64_t now, const std::vector<int64_t>& costs,
                  const std::vector<int64_t>& ats, const std::string& where) {
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
                rl::refund(k.s, k.ring.data(), k.p, now, ats[i], costs[i]);
                want[i] = rl::decide(k.s, k.p, now, 0, k.ring.data());
                all = all && want[i].allowed;
            }
        } else {
            all = reference_decide_all(lims, costs, now, want);
        }

        // The Redis side, in one pipeline: TIME, then in one transaction the script and, per key,
        // its expiry time, PERSIST and its state, then TIME. PERSIST keeps real time from
        // expiring the keys of this simulated timeline later; the transaction keeps Redis from
        // expiring them before PERSIST, unless the machine stalls it (see below).
        std::string cmd = build(refund, rl::CommandScript::evalsha, true, now, checks_of(lims, costs, ats));
        redisContext* c = conn_.get();
        rltest::append(c, {"TIME"});
        rltest::append(c, {"MULTI"});
        redisAppendFormattedCommand(c, cmd.data(), cmd.size());
        for (Limit* l : lims) {
            rltest::append(c, {"PEXPIRETIME", l->redis_key});
            rltest::append(c, {"PERSIST", l->redis_key});
            if (l->is_log()) {
                rltest::append(c, {"LRANGE", l->redis_key, "0", "-1"});
            } else {
                rltest::append(c, {"HMGET", l->redis_key, "a", "b", "c"});
            }
        }
        rltest::append(c, {"EXEC"});
        rltest::append(c, {"TIME"});
        Reply t0 = rltest::next_reply(c);
        for (size_t i = 0; i < 2 + 3 * n; i++) {
            Reply queued = rltest::next_reply(c);  // OK, then QUEUED for each command
            ASSERT_TRUE(queued && queued->type == REDIS_REPLY_STATUS) << where << ": " << c->errstr;
        }
        Reply exec = rltest::next_reply(c), t1 = rltest::next_reply(c);
        ASSERT_TRUE(exec && exec->type == REDIS_REPLY_ARRAY && exec->elements == 1 + 3 * n) << where << ": " << c->errstr;
        const redisReply* reply = exec->element[0];
        ASSERT_EQ(reply->type, REDIS_REPLY_ARRAY) << where << ": " << (reply->type == REDIS_REPLY_ERROR ? reply->str : "");
        std::vector<int64_t> values;
        for (size_t i = 0; i < reply->elements; i++) {
            ASSERT_EQ(reply->element[i]->type, REDIS_REPLY_INTEGER) << where;
            values.push_back(reply->element[i]->integer);
        }
        std::vector<rl::Decision> got(n);
        int64_t redis_now = -1;
        ASSERT_TRUE(rl::decode_decide_reply(values.data(), values.size(), n, got.data(), &redis_now))
            << where << ": reply " << ::testing::PrintToString(values) << ", C++: " << describe(want)
            << describe_input(lims, before, now, costs);
        EXPECT_EQ(redis_now, now) << where;
        EXPECT_EQ(values[0], all ? 1 : 0) << where;
        const int64_t t0_ms = rltest::time_us(t0.get()) / 1000, t1_ms = rltest::time_us(t1.get()) / 1000;
        ASSERT_GT(t0_ms, 0);

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

            // A key given 1 or 2 ms can expire in real time before PERSIST reaches it when the
            // machine stalls Redis (the transaction does not freeze every clock). Redis then
            // holds a fresh key, as it would in production once that time had passed: the C++
            // side follows, and the timeline goes on from identical states.
            const bool cpp_fresh = l.is_log() ? live_after.empty() : l.key.s == rl::State{};
            if (exp->integer == -2 && !cpp_fresh) {
                int64_t ttl_ms = rl::ceil_div(want[i].reset_us, 1000) + 1;
                // Set at or after t0, gone by t1: at least its TTL must have passed.
                ASSERT_TRUE(written && t1_ms - t0_ms >= ttl_ms)
                    << at << ": key missing, TTL " << ttl_ms << " ms, the call took " << t1_ms - t0_ms << " ms";
                l.key.s = rl::State{};
                counts_.expired_in_real_time++;
                continue;
            }

            // The state, read back.
            if (l.is_log()) {
                ASSERT_EQ(state->type, REDIS_REPLY_ARRAY) << at;
                std::vector<int64_t> list;
                for (size_t j = 0; j < state->elements; j++) list.push_back(std::atoll(state->element[j]->str));
                ASSERT_EQ(list, live_after) << at;
            } else {
                ASSERT_TRUE(state->type == REDIS_REPLY_ARRAY && state->elements == 3) << at;
                int64_t f[3];
                for (size_t j = 0; j < 3; j++) {
                    f[j] = state->element[j]->type == REDIS_REPLY_STRING ? std::atoll(state->element[j]->str) : 0;
                }
                ASSERT_EQ(f[0], l.key.s.a) << at;
                ASSERT_EQ(f[1], l.key.s.b) << at;
                ASSERT_EQ(f[2], l.key.s.c) << at;
            }

            // The TTL: set on what was written, to ceil(reset / 1 ms) + 1 ms, i.e. in
            // (reset, reset + 2 ms]; the script ran between t0 and t1, so the expiry time it set
            // minus the TTL lies in [t0, t1] (ms).
            if (written && exp->integer != -2) {
                ASSERT_GE(exp->integer, 0) << at << ": a written key without a TTL";
                int64_t ttl_ms = rl::ceil_div(want[i].reset_us, 1000) + 1;
                ASSERT_GT(ttl_ms * 1000, want[i].reset_us);
                ASSERT_LE(ttl_ms * 1000, want[i].reset_us + 2000);
                ASSERT_GE(ttl_ms, exp->integer - t1_ms) << at << ": TTL shorter than the reset";
                ASSERT_LE(ttl_ms, exp->integer - t0_ms) << at << ": TTL longer than reset + 2 ms";
                counts_.ttl_checked++;
            } else if (written) {
                ASSERT_TRUE(l.is_log() && live_after.empty()) << at << ": a written key is missing";
            } else {
                ASSERT_LT(exp->integer, 0) << at << ": a TTL set on a key that was not written";
            }
        }
        if (!refund && !all && some_allowed) counts_.partial_rejections++;
        if (refund) counts_.refunds++;

        // History for later refunds.
        if (!refund && all) {
            for (size_t i = 0; i < n; i++) {
                if (costs[i] > 0) lims[i]->admitted.emplace_back(now, costs[i]);
            }
        }
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
        std::string line = std::string("redis differential, ") + what + ":";
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
        if (counts_.expired_in_real_time > 0) {
            line += "; " + std::to_string(counts_.expired_in_real_time) + " keys expired in real time";
        }
        if (counts_.partial_rejections > 0) {
            line += ", " + std::to_string(counts_.partial_rejections) + " calls rejected by some checks only";
        }
        std::printf("%s)\n", line.c_str());
    }

    std::unique_ptr<rltest::RedisServer> server_;
    Context conn_;
    Counts counts_;
};

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
}

TEST_F(RedisDiff, Gcra) {
    single_algorithm(rl::Algo::gcra, 101, kTimelines, kEvents);
    summary("gcra");
    expect_coverage(counts_, rl::Algo::gcra);
}

TEST_F(RedisDiff, Token) {
    single_algorithm(rl::Algo::token, 102, kTimelines, kEvents);
    summary("token");
    expect_coverage(counts_, rl::Algo::token);
}

TEST_F(RedisDiff, Leaky) {
    single_algorithm(rl::Algo::leaky, 103, kTimelines, kEvents);
    summary("leaky");
    expect_coverage(counts_, rl::Algo::leaky);
}

TEST_F(RedisDiff, Fixed) {
    single_algorithm(rl::Algo::fixed, 104, kTimelines, kEvents);
    summary("fixed");
    expect_coverage(counts_, rl::Algo::fixed);
}

TEST_F(RedisDiff, Sliding) {
    single_algorithm(rl::Algo::sliding, 105, kTimelines, kEvents);
    summary("sliding");
    expect_coverage(counts_, rl::Algo::sliding);
}

TEST_F(RedisDiff, Log) {
    single_algorithm(rl::Algo::log, 106, kTimelines, kEvents);
    summary("log");
    expect_coverage(counts_, rl::Algo::log);
}

// 2 to 4 checks of mixed algorithms per call: one rejection leaves every state untouched.
TEST_F(RedisDiff, MultiCheckAllOrNothing) {
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

// After a SCRIPT FLUSH, EVALSHA fails with NOSCRIPT (the client then sends EVAL), EVAL works,
// and loads the script again for EVALSHA.
TEST_F(RedisDiff, NoscriptAfterFlushThenEval) {
    Limit l(rltest::policy(rl::Algo::gcra, 10, kSec, 2), "ns", rl::KeyHash{1, 2});
    const int64_t now = 1700000000LL * kSec;
    Reply flushed = rltest::command(conn_.get(), {"SCRIPT", "FLUSH"});
    ASSERT_TRUE(flushed && flushed->type == REDIS_REPLY_STATUS);

    auto send = [&](const std::string& cmd) {
        redisAppendFormattedCommand(conn_.get(), cmd.data(), cmd.size());
        return rltest::next_reply(conn_.get());
    };
    std::vector<rl::RedisCheck> checks = checks_of({&l}, {1}, {});
    Reply r = send(build(false, rl::CommandScript::evalsha, true, now, checks));
    ASSERT_TRUE(r);
    ASSERT_EQ(r->type, REDIS_REPLY_ERROR);
    EXPECT_EQ(std::string(r->str).rfind("NOSCRIPT", 0), 0u) << r->str;

    r = send(build(false, rl::CommandScript::eval, true, now, checks));
    ASSERT_TRUE(r && r->type == REDIS_REPLY_ARRAY) << (r && r->type == REDIS_REPLY_ERROR ? r->str : "");
    ASSERT_EQ(r->elements, rl::decide_reply_len(1));
    EXPECT_EQ(r->element[0]->integer, 1);
    EXPECT_EQ(r->element[3]->integer, 2);  // remaining: burst 2 + 1 - 1

    r = send(build(false, rl::CommandScript::evalsha, true, now, checks));
    ASSERT_TRUE(r && r->type == REDIS_REPLY_ARRAY) << "EVAL should have cached the script for EVALSHA";
    EXPECT_EQ(r->element[3]->integer, 1);
}

// The production variant reads Redis's clock: its now lies between the TIME before and after.
// The ARGV now is ignored. Its key then expires by itself once idle.
TEST_F(RedisDiff, ProductionVariantUsesRedisTime) {
    Limit l(rltest::policy(rl::Algo::gcra, 20, kSec), "prod", rl::KeyHash{3, 4});
    // Production: EVALSHA of script_text(false); the now passed is not sent.
    std::string cmd = build(false, rl::CommandScript::evalsha, false, 12345, checks_of({&l}, {1}, {}));
    EXPECT_EQ(cmd.find("12345"), std::string::npos);
    redisContext* c = conn_.get();
    rltest::append(c, {"TIME"});
    redisAppendFormattedCommand(c, cmd.data(), cmd.size());
    rltest::append(c, {"TIME"});
    rltest::append(c, {"PTTL", l.redis_key});
    Reply t0 = rltest::next_reply(c), r = rltest::next_reply(c), t1 = rltest::next_reply(c), ttl = rltest::next_reply(c);
    ASSERT_TRUE(r && r->type == REDIS_REPLY_ARRAY) << (r && r->type == REDIS_REPLY_ERROR ? r->str : "");
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
    EXPECT_GT(ttl->integer, 0);  // 51 ms set, a little spent
    EXPECT_LE(ttl->integer, 51);

    std::this_thread::sleep_for(std::chrono::milliseconds(120));
    Reply exists = rltest::command(c, {"EXISTS", l.redis_key});
    EXPECT_EQ(exists->integer, 0) << "an idle key must expire once its state is worth a fresh one";
}

// Malformed calls are error replies, never decisions.
TEST_F(RedisDiff, BadArgumentsAreErrors) {
    const std::string sha = rl::script_sha1(true);
    const std::vector<std::vector<std::string>> bad = {
        {"EVALSHA", sha, "1", "k", "decide", "1"},                                                  // too few ARGV
        {"EVALSHA", sha, "1", "k", "judge", "1", "0", "1", "1", "0", "1", "1", "1", "1", "1", "0"},  // mode
        {"EVALSHA", sha, "1", "k", "decide", "x", "0", "1", "1", "0", "1", "1", "1", "1", "1", "0"}, // now
        {"EVALSHA", sha, "1", "k", "decide", "1", "9", "1", "1", "0", "1", "1", "1", "1", "1", "0"}, // algo
        {"EVALSHA", sha, "1", "k", "decide", "1", "0", "0", "1", "0", "1", "1", "1", "1", "1", "0"}, // requests
        {"EVALSHA", sha, "1", "k", "decide", "1", "0", "1", "1", "0", "1", "1", "1", "1", "-1", "0"}, // cost
    };
    for (const auto& args : bad) {
        Reply r = rltest::command(conn_.get(), args);
        ASSERT_TRUE(r);
        EXPECT_EQ(r->type, REDIS_REPLY_ERROR) << args[4] << " " << args[5] << " " << args[6];
    }
    Reply ok = rltest::command(conn_.get(),
                               {"EVALSHA", sha, "1", "k", "decide", "1", "0", "1", "1", "0", "1", "1", "1", "1", "1", "0"});
    ASSERT_TRUE(ok && ok->type == REDIS_REPLY_ARRAY);
}

// The two variants are the same text but for the lines that set now.
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

TEST(RedisScript, VariantsDifferOnlyInHowNowIsRead) {
    std::vector<std::string> prod = lines_of(rl::script_text(false)), test = lines_of(rl::script_text(true));
    size_t head = 0, tail = 0;
    while (head < prod.size() && head < test.size() && prod[head] == test[head]) head++;
    while (tail < prod.size() - head && tail < test.size() - head &&
           prod[prod.size() - 1 - tail] == test[test.size() - 1 - tail]) {
        tail++;
    }
    std::string pm, tm;
    for (size_t i = head; i < prod.size() - tail; i++) pm += prod[i] + "\n";
    for (size_t i = head; i < test.size() - tail; i++) tm += test[i] + "\n";
    EXPECT_LE(prod.size() - tail - head, 5u) << pm;
    EXPECT_LE(test.size() - tail - head, 2u) << tm;
    EXPECT_NE(pm.find("local now = tonumber(t[1]) * 1000000 + tonumber(t[2])"), std::string::npos) << pm;
    EXPECT_NE(pm.find("redis.call('TIME')"), std::string::npos) << pm;
    EXPECT_EQ(pm.find("ARGV"), std::string::npos) << pm;
    EXPECT_NE(tm.find("local now = tonumber(ARGV[2])"), std::string::npos) << tm;
    EXPECT_NE(std::string_view(rl::script_sha1(false)), std::string_view(rl::script_sha1(true)));
    EXPECT_EQ(std::strlen(rl::script_sha1(false)), 40u);
}

}  // namespace
