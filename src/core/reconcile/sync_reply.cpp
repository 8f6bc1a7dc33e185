#include "core/reconcile/sync_reply.h"

#include "core/algo/decide.h"
#include "core/algo/exact_math.h"

namespace rl {

namespace {

int64_t max64(int64_t a, int64_t b) { return a > b ? a : b; }

bool in(int64_t v, int64_t lo, int64_t hi) { return v >= lo && v <= hi; }

// The highest level (scaled) the rule allows a bucket.
int64_t max_level(const Policy& p, const ReplyBounds& b) {
    int64_t debt = reply_max_debt(p, b);
    if (debt > (kMaxDebt - p.depth) / p.token) return kMaxDebt;
    return p.depth + debt * p.token;
}

ReplyFault check_state(const Policy& p, const State& s, int64_t now, const ReplyBounds& b) {
    const int64_t late = now + kMaxClockStep;  // the latest time a state may carry
    switch (p.algo) {
        case Algo::gcra:
            if (!in(s.b, 0, p.refill - 1)) return ReplyFault::level;
            break;
        case Algo::token:
            if (s.a > p.depth || !in(s.c, 0, 1) || !in(s.b, 0, late)) return ReplyFault::level;
            break;
        case Algo::leaky:
            if (s.a < 0 || !in(s.b, 0, late)) return ReplyFault::level;
            break;
        case Algo::fixed:
        case Algo::sliding: {
            const int64_t most = p.requests * (max64(b.hosts, 1) + 1);
            if (p.algo == Algo::fixed) {
                if (!in(s.a, 0, window_start(late, p.period_us)) || s.a % p.period_us != 0 || !in(s.c, 0, late))
                    return ReplyFault::window;
                if (!in(s.b, 0, most)) return ReplyFault::window;
            } else {
                if (!in(s.a, 0, late) || !in(s.b, 0, most) || !in(s.c, 0, most)) return ReplyFault::window;
            }
            return ReplyFault::none;
        }
        default: return ReplyFault::level;  // log: never synced
    }
    if (bucket_level(s, p, now) > max_level(p, b)) return ReplyFault::level;
    return ReplyFault::none;
}

}  // namespace

int64_t reply_max_debt(const Policy& p, const ReplyBounds& b) {
    // H (C + r (3T + L)) units, r (3T + L) rounded up.
    const __int128 span = static_cast<__int128>(3) * max64(b.interval_us, 0) + max64(b.round_trip_us, 0);
    __int128 refilled = (static_cast<__int128>(p.requests) * span + p.period_us - 1) / p.period_us;
    __int128 debt = static_cast<__int128>(max64(b.hosts, 1)) * (p.capacity() + refilled);
    return debt > kMaxDebt ? kMaxDebt : static_cast<int64_t>(debt);
}

int64_t reply_max_retry(const Policy& p, const ReplyBounds& b) {
    if (!is_bucket(p.algo)) return 2 * p.period_us;  // sliding: the previous window's weight is gone after one more
    return ceil_div(max_level(p, b), p.refill);
}

const char* reply_fault_text(ReplyFault f) {
    switch (f) {
        case ReplyFault::none: return "none";
        case ReplyFault::granted: return "granted more than asked";
        case ReplyFault::retry: return "a retry longer than the policy can require";
        case ReplyFault::level: return "a bucket state outside the bound";
        case ReplyFault::window: return "a window state outside the bound";
        case ReplyFault::time: return "Redis's clock stepped";
    }
    return "?";
}

ReplyFault check_key_reply(const Policy& p, const SyncItem& sent, const SyncResult& r, int64_t redis_now,
                           const ReplyBounds& b) {
    const int64_t most = sent.share.epoch_us > 0 ? sent.want + sent.need : max64(sent.want, sent.need);
    if (!in(r.granted, 0, most) || r.granted > (sent.share.epoch_us > 0 ? 2 : 1) * p.capacity())
        return ReplyFault::granted;
    // Shares: at most what was asked, in an epoch of the grid that has begun by Redis's clock.
    const ShareAsk& a = sent.share;
    const ShareGrant& g = r.share;
    for (int k = 0; k < 2; k++) {
        if (!in(g.rate[k], 0, a.rate[k]) || g.rate[k] > kShareParts || !in(g.burst[k], 0, a.burst[k]) ||
            g.burst[k] > p.capacity())
            return ReplyFault::granted;
    }
    if (g.epoch_at != 0 && (a.epoch_us <= 0 || g.epoch_at % a.epoch_us != 0 || g.epoch_at > redis_now + kMaxClockStep))
        return ReplyFault::time;
    if (sent.need > r.granted && !in(r.retry_after_us, 0, reply_max_retry(p, b))) return ReplyFault::retry;
    return check_state(p, r.global, redis_now, b);
}

bool accept_clock(SyncClock& c, int64_t redis_now, int64_t local) {
    const int64_t off = redis_now - local;
    if (in(off - c.offset, -kMaxClockStep, kMaxClockStep)) {
        c.offset = off;
        c.seen = 0;
        return true;
    }
    if (c.seen > 0 && in(off - c.candidate, -kMaxClockStep, kMaxClockStep)) {
        c.seen++;
    } else {
        c.candidate = off;
        c.seen = 1;
    }
    if (c.seen < kClockConfirm) return false;
    c.offset = off;
    c.seen = 0;
    return true;
}

bool give_back_refused(const SyncItem& si, const State& global, int64_t now) {
    const Policy& p = *si.policy;
    if (!is_bucket(p.algo)) return false;  // windows always take them back
    // The state after tells only if nothing else of the item moved the level since the give-back
    // (Redis applies the delta and the grant after it): else the units count as given back and
    // are dropped (they drain), never kept twice. (The simulation found the overshoot.)
    if (!si.delta.empty() || si.want > 0 || si.need > 0) return false;
    // Told from `remaining` (whole units), so a doubt counts as given back: the units are then
    // dropped, which can only leave them to drain. Whole units below their top now: what a
    // lease as high as the top could still use.
    int64_t top_units = lease_usable(Lease{kExact, si.give_back_top, si.give_back_at}, p, now);
    // The level after is above depth - (remaining + 1) units: refused if that reaches the top.
    int64_t remaining = decide(global, p, now, 0).remaining;
    return p.burst - remaining >= top_units + 1;
}

KeyReply take_key_reply(SyncKeyState& k, const SyncItem& sent, const SyncResult& r, int64_t redis_now, bool lease,
                        const ReplyBounds& b) {
    const Policy& p = *sent.policy;
    KeyReply out;
    out.fault = check_key_reply(p, sent, r, redis_now, b);
    if (out.fault != ReplyFault::none) {
        // Nothing of it is stored: the view that cannot be wrong in the host's favour is a full
        // one (rejecting for at most the policy's longest wait), refreshed from Redis soon.
        out.refused = true;
        State full = decide(State{}, p, redis_now, p.capacity()).next;
        k.view = k.unsent.empty() ? full : apply_delta(full, p, redis_now, k.unsent);
        if (lease && sent.need > 0) k.retry_at = redis_now + max64(b.interval_us, 1);  // asks again soon
        out.keep = lease && k.lease.units > 0;
        return out;
    }
    // The view: the global state plus what this host admitted since the send.
    k.view = k.unsent.empty() ? r.global : apply_delta(r.global, p, redis_now, k.unsent);
    if (!lease) return out;
    if (sent.give_back > 0 && k.lease.units == 0 && give_back_refused(sent, r.global, redis_now)) {
        // Redis granted above these units since (another host): they stay this host's, usable
        // as they drain, and are given back again once they are on top.
        k.lease = Lease{sent.give_back, sent.give_back_top, sent.give_back_at};
    }
    // The requests that waited for `need` are admitted as of the grant: the lease keeps the rest.
    out.need_granted = sent.need > 0 && r.granted >= sent.need;
    int64_t rest = out.need_granted ? r.granted - sent.need : r.granted;
    if (r.granted > 0 && k.lease.units > 0 && redis_now < k.lease.at) {
        // Granted before the units this host already holds (another worker's ask, answered
        // later): they lie below those, whose top stays the lease's.
        k.lease.units += rest;
    } else if (r.granted > 0) {
        // All of it stacks on the lease, then the need is spent at the grant: the lowest units,
        // so the rest keeps the grant's top.
        lease_add(k.lease, p, redis_now, r.granted, r.global);
        if (out.need_granted) lease_take(k.lease, p, redis_now, sent.need);
        k.used_at = redis_now;  // a fresh grant is not idle
    }
    k.retry_at = sent.need > r.granted ? redis_now + r.retry_after_us : 0;
    out.keep = k.lease.units > 0;
    return out;
}

int64_t take_share_reply(HostShare& h, const SyncItem& sent, const SyncResult& r, int64_t now, int64_t guard) {
    const Policy& p = *sent.policy;
    int64_t got = r.granted < sent.need ? r.granted : sent.need;
    share_add(h, p, now, guard, sent.share, r.share, r.granted - got);
    return got;
}

bool refresh_due(int64_t& refresh_at, int64_t now, int64_t interval_us) {
    const int64_t every = kRefreshIntervals * max64(interval_us, 1);
    if (now < refresh_at && refresh_at - now <= every) return false;  // (far ahead: a clock that went back)
    refresh_at = now + every;
    return true;
}

}  // namespace rl
