#include "core/wire/redis_command.h"

#include <cstring>
#include <limits>

#include "core/algo/block.h"
#include "core/algo/concurrency.h"
#include "core/wire/redis_keys.h"
#include "core/wire/redis_script.h"
#include "core/wire/resp_writer.h"
#include "core/algo/settle.h"
#include "core/wire/sha1.h"

namespace rl {

void script_call_head(Resp& r, CommandScript script, bool injected_time, size_t nkeys, size_t nargv) {
    r.array(3 + nkeys + nargv);
    switch (script) {
        case CommandScript::eval:
            r.bulk("EVAL");
            r.bulk(script_text(injected_time));
            break;
        case CommandScript::fcall:
            r.bulk("FCALL");
            r.bulk(std::string_view(function_name(injected_time), kFunctionNameLen));
            break;
        case CommandScript::evalsha:
            r.bulk("EVALSHA");
            r.bulk(std::string_view(script_sha1(injected_time), kSha1HexLen));
            break;
    }
    r.bulk_int(static_cast<int64_t>(nkeys));
}

namespace {

int64_t clamp_cost(int64_t cost) {
    if (cost == kNeedOne) return cost;
    return cost < 0 ? 0 : (cost > kExact ? kExact : cost);
}

size_t total_checks(const RedisGroup* groups, size_t ngroups) {
    size_t n = 0;
    for (size_t g = 0; g < ngroups; g++) n += groups[g].n;
    return n;
}

// The lean form (redis_command.h): every group one check, every check gcra without delay or
// block, of the first check's numbers, its cost not kNeedOne.
bool lean_batch(const RedisGroup* groups, size_t ngroups) {
    if (ngroups == 0 || groups[0].n != 1) return false;
    const Policy& p = *groups[0].checks[0].policy;
    if (p.algo != Algo::gcra || p.delay_level != kNoDelay || p.max_delay_units != kNoDelay || p.block_us != 0) {
        return false;
    }
    for (size_t g = 0; g < ngroups; g++) {
        if (groups[g].n != 1 || groups[g].checks[0].cost == kNeedOne) return false;
        const Policy& q = *groups[g].checks[0].policy;
        if (&q != &p && (q.algo != p.algo || q.burst != p.burst || q.refill != p.refill || q.token != p.token ||
                         q.depth != p.depth || q.delay_level != p.delay_level ||
                         q.max_delay_units != p.max_delay_units || q.block_us != p.block_us)) {
            return false;
        }
    }
    return true;
}

size_t lean_command(char* buf, CommandScript script, bool injected_time, std::string_view prefix,
                    const RedisGroup* groups, size_t ngroups, int64_t now_us) {
    const Policy& p = *groups[0].checks[0].policy;
    Resp r(buf);
    script_call_head(r, script, injected_time, ngroups, kArgvCount);
    for (size_t g = 0; g < ngroups; g++) {
        const RedisCheck& c = groups[g].checks[0];
        r.bulk_key(prefix, c.zone, c.hash, Algo::gcra);
    }
    r.bulk("lean");
    r.bulk_int(injected_time ? now_us : 0);
    r.bulk_head(kLeanPolicyBytes + kLeanCheckBytes * ngroups);
    r.le_double(p.burst);
    r.le_double(p.refill);
    r.le_double(p.token);
    r.le_double(p.depth);
    for (size_t g = 0; g < ngroups; g++) r.le_double(clamp_cost(groups[g].checks[0].cost));
    r.end_bulk();
    return r.size();
}

size_t script_command(char* buf, std::string_view mode, CommandScript script, bool injected_time,
                      std::string_view prefix, const RedisGroup* groups, size_t ngroups, int64_t now_us,
                      std::string_view call_id = {}) {
    const size_t nkeys = total_checks(groups, ngroups);
    call_id = call_id.substr(0, kCallIdMax);
    Resp r(buf);
    script_call_head(r, script, injected_time, nkeys, kArgvCount + !call_id.empty());
    for (size_t g = 0; g < ngroups; g++) {
        for (size_t i = 0; i < groups[g].n; i++) r.bulk_key(prefix, groups[g].checks[i].zone, groups[g].checks[i].hash, groups[g].checks[i].policy->algo);
    }
    r.bulk(mode);
    r.bulk_int(injected_time ? now_us : 0);
    r.bulk_head(kGroupBytes * ngroups + kCheckBytes * nkeys);
    for (size_t g = 0; g < ngroups; g++) {
        r.le_double(static_cast<int64_t>(groups[g].n));
        for (size_t i = 0; i < groups[g].n; i++) {
            const RedisCheck& c = groups[g].checks[i];
            const Policy& p = *c.policy;
            const bool slots = p.algo == Algo::concurrency;  // no burst, no at: owner and seq instead
            r.le_double(static_cast<int64_t>(p.algo));
            r.le_double(p.requests);
            r.le_double(p.period_us);
            // A calendar window carries its bounds where windows have no use for bucket fields.
            const bool cal = p.calendar != Calendar::none && (p.algo == Algo::fixed || p.algo == Algo::sliding);
            r.le_double(slots ? static_cast<int64_t>(c.owner & kOwnerMask) : cal ? 1 : is_bucket(p.algo) ? p.burst : 0);
            r.le_double(cal ? p.win.prev : p.refill);
            r.le_double(cal ? p.win.start : p.token);
            r.le_double(cal ? p.win.end : p.depth);
            r.le_double(p.weight_scale);
            r.le_double(clamp_cost(c.cost));
            r.le_double(slots ? static_cast<int64_t>(c.seq & kSeqMask) : c.at);
            r.le_double(cal ? p.win.next : p.delay_level);
            r.le_double(p.max_delay_units);
            r.le_double(mode == "decide" ? p.block_us : c.admitted_at);
        }
    }
    r.end_bulk();
    if (!call_id.empty()) r.bulk(call_id);
    return r.size();
}

// The slots of a check held in Redis (redis_command.h).
int64_t slot_count(const RedisCheck& c) {
    return c.cost < 1 ? 1 : (c.cost > kMaxConcurrency ? kMaxConcurrency : c.cost);
}

void bulk_member(Resp& r, const RedisCheck& c, int64_t i) {
    const auto slot = static_cast<uint64_t>(i);
    r.bulk_written(concurrency_member_len(c.owner, c.seq, slot),
                   [&](char* at) { concurrency_member(at, c.owner, c.seq, slot); });
}

// Checks of one key (the first's zone and hash), every slot of each.
size_t release_command(char* buf, std::string_view prefix, const RedisCheck* cs, size_t n) {
    size_t members = 0;
    for (size_t k = 0; k < n; k++) members += static_cast<size_t>(slot_count(cs[k]));
    Resp r(buf);
    r.array(2 + members);
    r.bulk("ZREM");
    r.bulk_key(prefix, cs[0].zone, cs[0].hash, Algo::concurrency);
    for (size_t k = 0; k < n; k++) {
        for (int64_t i = 0; i < slot_count(cs[k]); i++) bulk_member(r, cs[k], i);
    }
    return r.size();
}

size_t refresh_command(char* buf, std::string_view prefix, const RedisCheck* cs, size_t n, int64_t score_us) {
    size_t members = 0;
    int64_t hold = 0;
    for (size_t k = 0; k < n; k++) {
        members += static_cast<size_t>(slot_count(cs[k]));
        if (cs[k].policy != nullptr && cs[k].policy->period_us > hold) hold = cs[k].policy->period_us;
    }
    Resp r(buf);
    r.array(3 + 2 * members);
    r.bulk("ZADD");
    r.bulk_key(prefix, cs[0].zone, cs[0].hash, Algo::concurrency);
    r.bulk("XX");
    for (size_t k = 0; k < n; k++) {
        for (int64_t i = 0; i < slot_count(cs[k]); i++) {
            r.bulk_int(score_us);
            bulk_member(r, cs[k], i);
        }
    }
    r.array(3);
    r.bulk("PEXPIRE");
    r.bulk_key(prefix, cs[0].zone, cs[0].hash, Algo::concurrency);
    r.bulk_int((hold + 999) / 1000 + 1);  // the Lua's ttl_ms
    return r.size();
}

}  // namespace

size_t release_command_len(std::string_view prefix, const RedisCheck& c) noexcept {
    return release_command(nullptr, prefix, &c, 1);
}

size_t write_release_command(char* buf, std::string_view prefix, const RedisCheck& c) noexcept {
    return release_command(buf, prefix, &c, 1);
}

size_t release_command_len(std::string_view prefix, const RedisCheck* checks, size_t n) noexcept {
    return n > 0 ? release_command(nullptr, prefix, checks, n) : 0;
}

size_t write_release_command(char* buf, std::string_view prefix, const RedisCheck* checks, size_t n) noexcept {
    return n > 0 ? release_command(buf, prefix, checks, n) : 0;
}

size_t refresh_command_len(std::string_view prefix, const RedisCheck& c, int64_t score_us) noexcept {
    return refresh_command(nullptr, prefix, &c, 1, score_us);
}

size_t write_refresh_command(char* buf, std::string_view prefix, const RedisCheck& c, int64_t score_us) noexcept {
    return refresh_command(buf, prefix, &c, 1, score_us);
}

size_t refresh_command_len(std::string_view prefix, const RedisCheck* checks, size_t n, int64_t score_us) noexcept {
    return n > 0 ? refresh_command(nullptr, prefix, checks, n, score_us) : 0;
}

size_t write_refresh_command(char* buf, std::string_view prefix, const RedisCheck* checks, size_t n,
                             int64_t score_us) noexcept {
    return n > 0 ? refresh_command(buf, prefix, checks, n, score_us) : 0;
}

size_t reset_command(char* buf, CommandScript script, bool injected_time, std::string_view prefix,
                     std::string_view zone, const KeyHash& hash, int64_t now_us) noexcept {
    static constexpr std::string_view kBlock = ":block", kReset = "reset";
    constexpr int kAlgos = static_cast<int>(Algo::concurrency) + 1;
    Resp r(buf);
    script_call_head(r, script, injected_time, 2 * kAlgos + 1, 3);
    for (int a = 0; a < kAlgos; a++) {
        auto algo = static_cast<Algo>(a);
        r.bulk_key(prefix, zone, hash, algo);
        size_t len = redis_key_len(prefix, zone, algo);
        r.bulk_written(len + kBlock.size(), [&](char* at) {
            redis_key(at, prefix, zone, hash, algo);
            std::memcpy(at + len, kBlock.data(), kBlock.size());
        });
    }
    // The marker: the log's key (its name "log" is shorter than "reset"), written in place and
    // its name after the hash tag's "}:" replaced.
    const size_t base = redis_key_len(prefix, zone, Algo::log) - algo_name(Algo::log).size();
    r.bulk_written(base + kReset.size(), [&](char* at) {
        redis_key(at, prefix, zone, hash, Algo::log);
        std::memcpy(at + base, kReset.data(), kReset.size());
    });
    r.bulk("reset");
    r.bulk_int(injected_time ? now_us : 0);
    r.bulk_int(kResetMemoryMs);
    return r.size();
}

size_t batch_command_len(CommandScript script, bool injected_time, std::string_view prefix, const RedisGroup* groups,
                         size_t ngroups, int64_t now_us, BatchForm form) noexcept {
    return write_batch_command(nullptr, script, injected_time, prefix, groups, ngroups, now_us, form);
}

size_t write_batch_command(char* buf, CommandScript script, bool injected_time, std::string_view prefix,
                           const RedisGroup* groups, size_t ngroups, int64_t now_us, BatchForm form) noexcept {
    if (form == BatchForm::best && lean_batch(groups, ngroups)) {
        return lean_command(buf, script, injected_time, prefix, groups, ngroups, now_us);
    }
    return script_command(buf, "decide", script, injected_time, prefix, groups, ngroups, now_us);
}

size_t decide_command_len(CommandScript script, bool injected_time, std::string_view prefix, const RedisCheck* checks,
                          size_t n, int64_t now_us) noexcept {
    const RedisGroup g{checks, n};
    return script_command(nullptr, "decide", script, injected_time, prefix, &g, 1, now_us);
}

size_t write_decide_command(char* buf, CommandScript script, bool injected_time, std::string_view prefix,
                            const RedisCheck* checks, size_t n, int64_t now_us) noexcept {
    const RedisGroup g{checks, n};
    return script_command(buf, "decide", script, injected_time, prefix, &g, 1, now_us);
}

size_t refund_command_len(CommandScript script, bool injected_time, std::string_view prefix, const RedisCheck* checks,
                          size_t n, int64_t now_us, std::string_view call_id) noexcept {
    const RedisGroup g{checks, n};
    return script_command(nullptr, "refund", script, injected_time, prefix, &g, 1, now_us, call_id);
}

size_t write_refund_command(char* buf, CommandScript script, bool injected_time, std::string_view prefix,
                            const RedisCheck* checks, size_t n, int64_t now_us, std::string_view call_id) noexcept {
    const RedisGroup g{checks, n};
    return script_command(buf, "refund", script, injected_time, prefix, &g, 1, now_us, call_id);
}

size_t charge_command(char* buf, CommandScript script, bool injected_time, std::string_view prefix,
                      const RedisCheck* checks, size_t n, int64_t now_us, std::string_view call_id) noexcept {
    RedisGroup groups[kMaxChargeChecks];
    if (n > kMaxChargeChecks) n = kMaxChargeChecks;
    for (size_t i = 0; i < n; i++) groups[i] = RedisGroup{checks + i, 1};
    return script_command(buf, "charge", script, injected_time, prefix, groups, n, now_us, call_id);
}

size_t refund_command_len(std::string_view prefix, const RedisCheck* checks, size_t n, CommandScript script,
                          std::string_view call_id) noexcept {
    return refund_command_len(script, false, prefix, checks, n, 0, call_id);
}

size_t write_refund_command(char* buf, std::string_view prefix, const RedisCheck* checks, size_t n,
                            CommandScript script, std::string_view call_id) noexcept {
    return write_refund_command(buf, script, false, prefix, checks, n, 0, call_id);
}

size_t batch_command_bound(std::string_view prefix, const RedisGroup* groups, size_t ngroups) noexcept {
    // Per check: its key's bulk string, at most redis_key_max_len for the longest zone name
    // (a zone name is at most kMaxZoneLen), and its kCheckBytes; per group its count; then the
    // head: the array, EVALSHA and the sha (or the shorter FCALL and function name), the key
    // count, the mode, now and the blob's head.
    constexpr size_t kBulkFrame = 1 + 20 + 2 + 2;  // "$<len>\r\n...\r\n"
    static_assert(5 + kFunctionNameLen <= 7 + kSha1HexLen, "FCALL's head fits EVALSHA's bound");
    size_t nkeys = total_checks(groups, ngroups);
    size_t key = kBulkFrame + redis_key_max_len(prefix, std::string_view()) + kMaxZoneLen;
    return 4 * kBulkFrame + 1 + 20 + 2 + 7 + kSha1HexLen + 20 + 6 + 20 + kBulkFrame +
           nkeys * (key + kCheckBytes) + ngroups * kGroupBytes;
}

size_t batch_reply_len(const RedisGroup* groups, size_t ngroups) noexcept {
    return decide_reply_len(total_checks(groups, ngroups));
}

bool decode_batch_reply(const int64_t* values, size_t n, const RedisGroup* groups, size_t ngroups, Decision* out,
                        bool* admitted, int64_t* redis_now) noexcept {
    if (values == nullptr || (groups == nullptr && ngroups > 0) || n != batch_reply_len(groups, ngroups)) return false;
    if (out == nullptr && n > kReplyHead) return false;
    // Check everything before writing anything.
    size_t count = 0;
    const int64_t* v = values + kReplyHead;
    for (size_t g = 0; g < ngroups; g++) {
        bool all = true;
        for (size_t i = 0; i < groups[g].n; i++, v += kReplyPerCheck) {
            // v[0]: 0 rejected, 1 allowed, 2 rejected by a live block, 3 rejected, starting a block.
            // v[3]: a rejected check's retry (kNever or > 0), an allowed one's delay (>= 0).
            if (v[0] < 0 || v[0] > 3 || v[1] < 0 || v[2] < 0 || v[3] < (v[0] == 1 ? 0 : kNever)) return false;
            if (v[0] == 2 && v[3] <= 0) return false;
            all = all && v[0] == 1;
        }
        count += all;
    }
    // The script's verdict must agree with its parts.
    if (values[0] < 0 || static_cast<uint64_t>(values[0]) != count || values[1] < 0 || values[1] > kExact) return false;
    v = values + kReplyHead;
    for (size_t g = 0; g < ngroups; g++) {
        bool all = true;
        for (size_t i = 0; i < groups[g].n; i++, v += kReplyPerCheck, out++) {
            out->allowed = v[0] == 1;
            out->remaining = v[1];
            out->reset_us = v[2];
            out->retry_after_us = out->allowed ? 0 : v[3];
            out->delay_us = out->allowed ? v[3] : 0;
            out->block = v[0] == 2 ? kBlockLive : v[0] == 3 ? kBlockStarted : kBlockNone;
            all = all && out->allowed;
        }
        if (admitted != nullptr) admitted[g] = all;
    }
    if (redis_now != nullptr) *redis_now = values[1];
    return true;
}

bool decode_decide_reply(const int64_t* values, size_t n, size_t nchecks, Decision* out, int64_t* redis_now) noexcept {
    const RedisGroup g{nullptr, nchecks};
    return decode_batch_reply(values, n, &g, 1, out, nullptr, redis_now);
}

}  // namespace rl
