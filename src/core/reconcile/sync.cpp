#include "core/reconcile/sync.h"

#include "core/algo/bucket.h"
#include "core/algo/decide.h"
#include "core/algo/exact_math.h"
#include "core/algo/refund.h"

namespace rl {

namespace {

int64_t min64(int64_t a, int64_t b) { return a < b ? a : b; }

// A bucket's level at `t` (scaled units, at most kMaxDebt), however far over full.
int64_t level_at(const State& s, const Policy& p, int64_t t) {
    switch (p.algo) {
        case Algo::gcra: {
            int64_t ahead = s.a - t;
            if (ahead < 0) return 0;
            if (ahead > kMaxDebt / p.refill) return kMaxDebt;
            return min64(ahead * p.refill + s.b, kMaxDebt);
        }
        case Algo::token: {
            if (s.c == 0) return 0;  // a fresh key's bucket is full
            int64_t tokens = s.a < p.depth ? s.a : p.depth;
            int64_t level = p.depth - tokens > kMaxDebt ? kMaxDebt : p.depth - tokens;
            return bucket_drain(level, t - s.b, p);
        }
        default: return bucket_drain(s.a > kMaxDebt ? kMaxDebt : s.a, t - s.b, p);
    }
}

// The state of a bucket at `level` at time t (never moving a refill or leak time back).
State with_level(const State& s, const Policy& p, int64_t t, int64_t level) {
    State n = s;
    switch (p.algo) {
        case Algo::gcra:
            n.a = t + level / p.refill;
            n.b = level % p.refill;
            break;
        case Algo::token:
            n.a = p.depth - level;
            n.b = s.c != 0 && s.b > t ? s.b : t;
            n.c = 1;
            break;
        default:
            n.a = level;
            n.b = s.b > t ? s.b : t;
            break;
    }
    return n;
}

// level + units * token (units < 0: minus, never below empty), at most kMaxDebt.
int64_t pour(int64_t level, int64_t units, const Policy& p) {
    if (units >= 0) return units > (kMaxDebt - level) / p.token ? kMaxDebt : level + units * p.token;
    int64_t out = -units > level / p.token ? level : -units * p.token;
    return level - out;
}

// Counts of the newest of two windows and of the one before it, from two (at, cur, prev)
// triples: counts of older windows are over and dropped.
struct Windows {
    int64_t at, cur, prev;
};

int64_t cap_count(int64_t v) { return v < 0 ? 0 : (v > kMaxDebt ? kMaxDebt : v); }

Windows add_windows(const Windows& x, const Windows& y, int64_t period) {
    int64_t at = x.at > y.at ? x.at : y.at;
    auto cur_of = [at](const Windows& w) { return w.at == at ? w.cur : 0; };
    auto prev_of = [at, period](const Windows& w) {
        return w.at == at ? w.prev : (w.at == at - period ? w.cur : 0);
    };
    return Windows{at, cur_of(x) + cur_of(y), prev_of(x) + prev_of(y)};
}

// The sliding and fixed states as windows: a fixed state has no previous count; a sliding
// state's a is a time in its window.
Windows windows_of(const State& s, const Policy& p) {
    return p.algo == Algo::sliding ? Windows{window_start(s.a, p.period_us), s.c, s.b} : Windows{s.a, s.b, 0};
}

}  // namespace

int64_t bucket_level(const State& s, const Policy& p, int64_t t) { return level_at(s, p, t); }
State bucket_at_level(const State& s, const Policy& p, int64_t t, int64_t level) { return with_level(s, p, t, level); }

Delta clamp_delta(const Delta& d, const Policy& p, int64_t now) {
    if (d.empty()) return d;
    Delta c = d;
    if (is_bucket(p.algo)) {
        if (c.at > now) c.at = now;
        if (c.at < now - p.period_us) c.at = now - p.period_us;
        return c;
    }
    int64_t w = window_start(now, p.period_us);
    if (c.at > w) return Delta{c.units + c.prev, 0, w};  // ahead of Redis's clock: counted now
    if (c.at < w - p.period_us) return Delta{};          // windows over
    return c;
}

void delta_add(Delta& d, const Policy& p, int64_t now, int64_t cost) {
    if (cost == 0) return;
    if (is_bucket(p.algo)) {
        if (d.empty() || now > d.at) d.at = now;
        d.units += cost;
        return;
    }
    int64_t w = window_start(now, p.period_us);
    if (d.empty()) {
        d = Delta{cost, 0, w};
    } else if (w <= d.at) {
        if (cost < 0 && w == d.at - p.period_us) {
            d.prev += cost;  // a refund in the window before
        } else if (cost > 0 || w == d.at) {
            d.units += cost;
        }
    } else if (cost < 0) {
        return;  // a refund of an admission in a window not yet begun: nothing to take back
    } else if (w == d.at + p.period_us) {
        d = Delta{cost, d.units, w};
    } else {
        d = Delta{cost, 0, w};
    }
}

void delta_merge(Delta& d, const Delta& more, const Policy& p) {
    if (more.empty()) return;
    if (d.empty()) {
        d = more;
        return;
    }
    if (is_bucket(p.algo)) {
        d.units += more.units;
        if (more.at > d.at) d.at = more.at;
        return;
    }
    Windows w = add_windows(Windows{d.at, d.units, d.prev}, Windows{more.at, more.units, more.prev}, p.period_us);
    d = Delta{w.cur, w.prev, w.at};
}

State apply_delta(const State& s, const Policy& p, int64_t now, const Delta& d) {
    if (d.empty()) return s;
    if (is_bucket(p.algo)) {
        if (d.units == 0) return s;
        int64_t t = d.at < now ? d.at : now;  // poured at the last admission (never in the future)
        int64_t level = level_at(s, p, t);
        int64_t after = pour(level, d.units, p);
        return after == level ? s : with_level(s, p, t, after);
    }
    Windows w = add_windows(windows_of(s, p), Windows{d.at, d.units, d.prev}, p.period_us);
    State n;
    n.a = w.at;
    if (p.algo == Algo::sliding) {
        n.b = cap_count(w.prev);
        n.c = cap_count(w.cur);
    } else {
        n.b = cap_count(w.cur);
    }
    return n;
}

Grant grant(const State& s, const Policy& policy, int64_t now, int64_t want, int64_t need, int64_t hosts) {
    // A grant counts units: shaping (delay.h) applies where the requests are decided.
    Policy p = policy;
    p.delay_level = p.max_delay_units = kNoDelay;
    Grant g;
    g.decision = decide(s, p, now, 0);
    const int64_t remaining = g.decision.remaining;
    if (need > remaining) {
        g.decision = decide(s, p, now, need);  // rejected: says when it would fit
        return g;
    }
    if (want < need) want = need;
    if (hosts < 1) hosts = 1;
    int64_t n = min64(min64(want, remaining), ceil_div(remaining, hosts));
    if (n < need) n = need;
    if (n <= 0) return g;
    g.decision = decide(s, p, now, n);  // allowed: n <= remaining
    g.granted = n;
    return g;
}

int64_t lease_usable(const Lease& l, const Policy& p, int64_t now) {
    if (l.units <= 0) return 0;
    if (!is_bucket(p.algo)) return window_start(now, p.period_us) == l.at ? l.units : 0;
    int64_t level = bucket_drain(l.top, now - l.at, p);  // what is left of the global level up to the top
    return min64(l.units, level / p.token);
}

void lease_add(Lease& l, const Policy& p, int64_t now, int64_t granted, const State& global) {
    if (granted <= 0) return;
    if (!is_bucket(p.algo)) {
        int64_t w = window_start(now, p.period_us);
        if (l.at == w && l.units > 0) {
            l.units += granted;
        } else {
            l = Lease{granted, 0, w};
        }
        return;
    }
    int64_t top = level_at(global, p, now);
    int64_t kept = lease_usable(l, p, now);
    if (kept > 0) {
        // Counted just above the unspent units: the new ones are at least that high.
        int64_t stacked = bucket_drain(l.top, now - l.at, p) + granted * p.token;
        if (stacked < top) top = stacked;
    }
    l = Lease{kept + granted, top, now};
}

bool lease_take(Lease& l, const Policy& p, int64_t now, int64_t cost) {
    if (cost <= 0) return true;
    int64_t usable = lease_usable(l, p, now);
    if (usable < cost) return false;
    // The units below the usable ones have drained (or their window is over): gone. Of the
    // usable, the lowest go first: the unspent ones stay at the top.
    l.units = usable - cost;
    return true;
}

void warmth_arrival(Warmth& w, int64_t now, int64_t interval_us) {
    // A clock that went back (another worker's reading, an offset's step) counts as close.
    if (w.arrived_at != 0 && now - w.arrived_at < interval_us) w.warm_at = now;
    if (now > w.arrived_at) w.arrived_at = now;
}

bool warmth_hot(const Warmth& w, int64_t now, int64_t interval_us) {
    return w.warm_at != 0 && now - w.warm_at < interval_us;
}

State give_back(const State& s, const Policy& p, int64_t now, int64_t units, int64_t at, int64_t top) {
    if (units <= 0) return s;
    State n = s;
    if (!is_bucket(p.algo)) {
        refund(n, nullptr, p, now, at, units);
        return n;
    }
    int64_t level = level_at(s, p, now);
    int64_t mine = bucket_drain(top, now - at, p);
    if (level > mine) return s;  // granted above them since: they drain instead
    int64_t back = min64(units, mine / p.token);
    int64_t after = pour(level, -back, p);
    return after == level ? s : with_level(s, p, now, after);
}

}  // namespace rl
