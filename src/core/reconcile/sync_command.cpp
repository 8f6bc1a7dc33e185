#include "core/reconcile/sync_command.h"

#include "core/algo/decide.h"
#include "core/wire/redis_keys.h"
#include "core/wire/resp_writer.h"
#include "core/wire/sha1.h"

namespace rl {

namespace {

int64_t clamp(int64_t v, int64_t lo, int64_t hi) { return v < lo ? lo : (v > hi ? hi : v); }
int64_t count_of(int64_t v) { return clamp(v, 0, kExact); }
int64_t signed_of(int64_t v) { return clamp(v, -kExact, kExact); }

size_t sync_command(char* buf, CommandScript script, bool injected_time, std::string_view prefix,
                    const SyncItem* items, size_t n, int64_t now_us, std::string_view call_id) {
    Resp r(buf);
    script_call_head(r, script, injected_time, n, kArgvCount + 1);
    for (size_t i = 0; i < n; i++) r.bulk_key(prefix, items[i].zone, items[i].hash, items[i].policy->algo);
    r.bulk("sync");
    r.bulk_int(injected_time ? now_us : 0);
    r.bulk_head(kSyncItemBytes * n);
    for (size_t i = 0; i < n; i++) {
        const SyncItem& it = items[i];
        const Policy& p = *it.policy;
        const ShareAsk& sh = it.share;
        const int64_t values[28] = {static_cast<int64_t>(p.algo), p.requests, p.period_us, p.burst, p.refill,
                                    p.token, p.depth, p.weight_scale, signed_of(it.delta.units),
                                    signed_of(it.delta.prev), signed_of(it.delta.at), count_of(it.want),
                                    count_of(it.need), clamp(it.hosts, 1, kExact), count_of(it.give_back),
                                    signed_of(it.give_back_at), signed_of(it.give_back_top),
                                    count_of(sh.epoch_us), count_of(sh.demand), count_of(sh.rate[0]),
                                    count_of(sh.rate[1]), count_of(sh.burst[0]), count_of(sh.burst[1]),
                                    count_of(sh.back_at), count_of(sh.back_rate[0]), count_of(sh.back_rate[1]),
                                    count_of(sh.back_burst[0]), count_of(sh.back_burst[1])};
        for (int64_t v : values) r.le_double(v);
    }
    r.end_bulk();
    r.bulk(call_id.substr(0, kSyncCallIdMax));
    return r.size();
}

// The count form (sync_command.h): every item a count ask of the first item's gcra policy. The
// fields it does not send are those that decide nothing for such an item.
bool count_call(const SyncItem* items, size_t n) {
    if (n == 0 || items[0].policy->algo != Algo::gcra) return false;
    const Policy& p = *items[0].policy;
    for (size_t i = 0; i < n; i++) {
        const SyncItem& it = items[i];
        const Policy& q = *it.policy;
        if (&q != &p && (q.algo != p.algo || q.requests != p.requests || q.period_us != p.period_us ||
                         q.burst != p.burst || q.refill != p.refill || q.token != p.token || q.depth != p.depth ||
                         q.weight_scale != p.weight_scale)) {
            return false;
        }
        // What the general form would send of these is 0 (signed_of: 0 only for 0; count_of: for
        // anything <= 0), and want is need (as count_of sends them).
        const ShareAsk& sh = it.share;
        if (it.delta.units != 0 || it.delta.prev != 0 || it.give_back > 0 || sh.epoch_us > 0 || sh.demand > 0 ||
            sh.rate[0] > 0 || sh.rate[1] > 0 || sh.burst[0] > 0 || sh.burst[1] > 0 || sh.back_at > 0 ||
            sh.back_rate[0] > 0 || sh.back_rate[1] > 0 || sh.back_burst[0] > 0 || sh.back_burst[1] > 0 ||
            count_of(it.want) != count_of(it.need)) {
            return false;
        }
    }
    return true;
}

size_t count_command(char* buf, CommandScript script, bool injected_time, std::string_view prefix,
                     const SyncItem* items, size_t n, int64_t now_us, std::string_view call_id) {
    const Policy& p = *items[0].policy;
    Resp r(buf);
    script_call_head(r, script, injected_time, n, kArgvCount + 1);
    for (size_t i = 0; i < n; i++) r.bulk_key(prefix, items[i].zone, items[i].hash, p.algo);
    r.bulk("count");
    r.bulk_int(injected_time ? now_us : 0);
    r.bulk_head(kCountPolicyBytes + kCountItemBytes * n);
    const int64_t policy[8] = {static_cast<int64_t>(p.algo), p.requests, p.period_us, p.burst, p.refill,
                               p.token, p.depth, p.weight_scale};
    for (int64_t v : policy) r.le_double(v);
    for (size_t i = 0; i < n; i++) r.le_double(count_of(items[i].need));
    r.end_bulk();
    r.bulk(call_id.substr(0, kSyncCallIdMax));
    return r.size();
}

size_t hosts_command(char* buf, CommandScript script, bool injected_time, std::string_view prefix,
                     std::string_view zone, std::string_view host_id, int64_t window_us, int64_t now_us) {
    Resp r(buf);
    script_call_head(r, script, injected_time, 1, 4);
    r.bulk_written(hosts_key_len(prefix, zone), [&](char* at) { hosts_key(at, prefix, zone); });
    r.bulk("hosts");
    r.bulk_int(injected_time ? now_us : 0);
    r.bulk_int(clamp(window_us, 1, kExact));
    r.bulk(host_id);
    return r.size();
}

}  // namespace

namespace {

// The shares' way (sync_key): a bucket key with a book, or an item asking shares.
SyncResult share_key(const State& s, const SyncItem& it, int64_t now, Decision* decision, ShareBook& b) {
    const Policy& p = *it.policy;
    const int64_t t = b.empty() || now > b.settled_at ? now : b.settled_at;
    State st = share_settle(s, b, p, t);
    share_give_back(b, it.share);
    // Poured now: what a host admitted while Redis was away counts no earlier than this; the
    // units a host gives back with its shares leave it (within C - B: the floor below).
    const int64_t units = signed_of(it.delta.units) - count_of(it.give_back);
    if (units != 0) {
        st = apply_delta(st, p, t, Delta{units, 0, t});
        if (!b.empty() && bucket_level(st, p, t) < b.burst[0] * p.token) st = bucket_at_level(st, p, t, b.burst[0] * p.token);
    }
    const int64_t need = count_of(it.need);
    int64_t admitted = 0, moved = 0;
    SyncResult out;
    out.share = share_grant(st, b, p, t, it.share, need, count_of(it.want), it.hosts, &admitted, &moved);
    out.global = st;
    out.granted = admitted + moved;  // the need's units first, then those moved into its bucket
    Policy unshaped = p;
    unshaped.delay_level = unshaped.max_delay_units = kNoDelay;
    if (need > 0 && admitted == 0) out.retry_after_us = decide(st, unshaped, now, need).retry_after_us;
    if (decision != nullptr) {
        *decision = decide(st, unshaped, now, 0);
        if (!b.empty()) decision->reset_us += share_book_end(b) - now;
    }
    return out;
}

}  // namespace

SyncResult sync_key(const State& s, const SyncItem& it, int64_t now, Decision* decision, ShareBook* book) noexcept {
    const Policy& p = *it.policy;
    ShareBook none;
    ShareBook& b = book != nullptr ? *book : none;
    if (is_bucket(p.algo) && (!b.empty() || it.share.epoch_us > 0)) return share_key(s, it, now, decision, b);
    State st = give_back(s, p, now, count_of(it.give_back), it.give_back_at, it.give_back_top);
    st = apply_delta(st, p, now, clamp_delta(it.delta, p, now));
    const int64_t need = count_of(it.need);
    Grant g = grant(st, p, now, count_of(it.want), need, it.hosts);
    SyncResult out;
    out.granted = g.granted;
    out.global = g.granted > 0 ? g.decision.next : st;
    out.retry_after_us = g.granted == 0 && need > 0 ? g.decision.retry_after_us : 0;
    if (decision != nullptr) *decision = g.decision;
    return out;
}

bool sync_count_form(const SyncItem* items, size_t n) noexcept { return count_call(items, n); }

size_t sync_command_len(CommandScript script, bool injected_time, std::string_view prefix, const SyncItem* items,
                        size_t n, int64_t now_us, std::string_view call_id, SyncForm form) noexcept {
    return write_sync_command(nullptr, script, injected_time, prefix, items, n, now_us, call_id, form);
}

size_t write_sync_command(char* buf, CommandScript script, bool injected_time, std::string_view prefix,
                          const SyncItem* items, size_t n, int64_t now_us, std::string_view call_id,
                          SyncForm form) noexcept {
    if (form == SyncForm::count || (form == SyncForm::best && count_call(items, n))) {
        return count_command(buf, script, injected_time, prefix, items, n, now_us, call_id);
    }
    return sync_command(buf, script, injected_time, prefix, items, n, now_us, call_id);
}

size_t sync_command_bound(std::string_view prefix, const SyncItem*, size_t n) noexcept {
    // As batch_command_bound: the head (EVALSHA's, the longer), then per item its key's bulk
    // string for the longest zone name and its 224 bytes (the count form's "count", one byte
    // more than "sync", and its 64 + 8 n bytes are within it).
    constexpr size_t kBulkFrame = 1 + 20 + 2 + 2;  // "$<len>\r\n...\r\n"
    size_t key = kBulkFrame + redis_key_max_len(prefix, std::string_view()) + kMaxZoneLen;
    return 5 * kBulkFrame + 1 + 20 + 2 + 7 + kSha1HexLen + 20 + 4 + 20 + kBulkFrame + kSyncCallIdMax +
           n * (key + kSyncItemBytes);
}

size_t sync_reply_len(size_t n, bool counted) noexcept {
    return 1 + (counted ? kSyncCountReplyPerItem : kSyncReplyPerItem) * n;
}

bool decode_sync_reply(const int64_t* values, size_t nvalues, size_t nitems, SyncResult* out, int64_t* redis_now,
                       bool counted) noexcept {
    if (values == nullptr || nvalues != sync_reply_len(nitems, counted) || (out == nullptr && nitems > 0)) return false;
    const size_t per = counted ? kSyncCountReplyPerItem : kSyncReplyPerItem;
    // Redis's clock and a retry stay below kExact, as every time here: sums of two never overflow.
    if (values[0] < 0 || values[0] > kExact) return false;
    for (size_t i = 0; i < nitems; i++) {
        const int64_t* v = values + 1 + per * i;
        for (size_t j = 0; j < 3; j++) {
            if (v[j] < -kExact || v[j] > kExact) return false;
        }
        if (v[3] < 0 || v[3] > kExact || v[4] < kNever || v[4] > kExact) return false;
        for (size_t j = 5; j < per; j++) {
            if (v[j] < 0 || v[j] > kExact) return false;
        }
    }
    for (size_t i = 0; i < nitems; i++) {
        const int64_t* v = values + 1 + per * i;
        out[i].global = State{v[0], v[1], v[2]};
        out[i].granted = v[3];
        out[i].retry_after_us = v[4];
        out[i].share = counted ? ShareGrant{} : ShareGrant{v[5], {v[6], v[7]}, {v[8], v[9]}};
    }
    if (redis_now != nullptr) *redis_now = values[0];
    return true;
}

size_t hosts_command_len(CommandScript script, bool injected_time, std::string_view prefix, std::string_view zone,
                         std::string_view host_id, int64_t window_us, int64_t now_us) noexcept {
    return hosts_command(nullptr, script, injected_time, prefix, zone, host_id, window_us, now_us);
}

size_t write_hosts_command(char* buf, CommandScript script, bool injected_time, std::string_view prefix,
                           std::string_view zone, std::string_view host_id, int64_t window_us,
                           int64_t now_us) noexcept {
    return hosts_command(buf, script, injected_time, prefix, zone, host_id, window_us, now_us);
}

}  // namespace rl
