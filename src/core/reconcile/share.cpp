#include "core/reconcile/share.h"

#include "core/algo/bucket.h"
#include "core/algo/decide.h"
#include "core/algo/exact_math.h"
#include "core/reconcile/sync.h"
#include "core/reconcile/sync_command.h"

namespace rl {

namespace {

int64_t min64(int64_t a, int64_t b) { return a < b ? a : b; }
int64_t max64(int64_t a, int64_t b) { return a > b ? a : b; }
int64_t clamp(int64_t v, int64_t lo, int64_t hi) { return v < lo ? lo : (v > hi ? hi : v); }

// A level after `dt` (at most an epoch: share_fits) of draining at the rate not shared, r - R.
// Rounded down: the pool drains less than it could, never more.
int64_t drain_shared(int64_t level, int64_t dt, const Policy& p, int64_t shared) {
    if (dt <= 0) return level;
    int64_t drained = dt * p.refill * (kShareParts - clamp(shared, 0, kShareParts)) / kShareParts;
    return level > drained ? level - drained : 0;
}

}  // namespace

bool share_fits(const Policy& p, int64_t epoch_us) {
    return is_bucket(p.algo) && epoch_us >= 1 && p.refill <= (int64_t{1} << 36) / epoch_us;
}

State share_settle(const State& s, ShareBook& b, const Policy& p, int64_t now) {
    if (b.empty()) return s;
    if (now < b.settled_at) now = b.settled_at;  // Redis's clock went back: the book does not
    int64_t level = bucket_level(s, p, b.settled_at);
    int64_t t = b.settled_at;
    for (int k = 0; k < 2 && t < now; k++) {
        int64_t end = b.epoch_at + (k + 1) * b.epoch_us;
        if (t >= end) continue;
        int64_t until = min64(now, end);
        level = max64(drain_shared(level, until - t, p, b.rate[k]), b.burst[k] * p.token);
        t = until;
    }
    if (t < now) level = bucket_drain(level, now - t, p);
    int64_t w = window_start(now, b.epoch_us);
    if (w >= b.epoch_at + 2 * b.epoch_us) {
        b = ShareBook{};  // every share is over
    } else if (w == b.epoch_at + b.epoch_us) {
        b.epoch_at = w;
        b.rate[0] = b.rate[1];
        b.burst[0] = b.burst[1];
        b.demand[0] = b.demand[1];
        b.rate[1] = b.burst[1] = b.demand[1] = 0;
    }
    if (b.rate[0] == 0 && b.rate[1] == 0 && b.burst[0] == 0 && b.burst[1] == 0 && b.demand[0] == 0 && b.demand[1] == 0)
        b = ShareBook{};  // nothing held, nothing recorded
    if (!b.empty()) {
        b.settled_at = now;
        level = max64(level, b.burst[0] * p.token);
    }
    return bucket_at_level(s, p, now, level);
}

void share_give_back(ShareBook& b, const ShareAsk& ask) {
    if (b.empty() || ask.back_at <= 0 || ask.epoch_us != b.epoch_us) return;
    for (int j = 0; j < 2; j++) {
        int64_t e = ask.back_at + j * b.epoch_us;
        int k = e == b.epoch_at ? 0 : (e == b.epoch_at + b.epoch_us ? 1 : -1);
        if (k < 0) continue;
        b.rate[k] -= clamp(ask.back_rate[j], 0, b.rate[k]);
        b.burst[k] -= clamp(ask.back_burst[j], 0, b.burst[k]);
    }
}

ShareGrant share_grant(State& s, ShareBook& b, const Policy& p, int64_t now, const ShareAsk& ask, int64_t need,
                       int64_t tokens, int64_t hosts, int64_t* admitted, int64_t* moved) {
    ShareGrant g;
    *admitted = *moved = 0;
    if (ask.epoch_us <= 0 && need > 0) {
        // A count ask (a cold key's requests, sync.h warmth_hot; or a key whose policy keeps
        // count leases): its need from the pool, as a draw's, nothing else. The pool is floored
        // at the bursts the book holds, so the units come from what no share holds.
        int64_t level = bucket_level(s, p, now);
        if (level < p.depth) {
            *admitted = min64(min64(need, p.capacity()), (p.depth - level) / p.token);
            if (*admitted > 0) s = bucket_at_level(s, p, now, level + *admitted * p.token);
        }
        return g;
    }
    if (ask.epoch_us <= 0 || !share_fits(p, ask.epoch_us)) return g;
    if (b.empty()) {
        b = ShareBook{};
        b.epoch_at = window_start(now, ask.epoch_us);
        b.epoch_us = ask.epoch_us;
        b.settled_at = now;
    }
    if (b.epoch_us != ask.epoch_us) return g;  // another interval's book: nothing until it is over
    g.epoch_at = b.epoch_at;
    const int64_t cap = p.capacity();
    int64_t level = bucket_level(s, p, now);
    // The requests waiting: admitted by Redis now, from the pool (as many as it holds), before the
    // new shares take it.
    if (need > 0 && level < p.depth) {
        *admitted = min64(min64(need, cap), (p.depth - level) / p.token);
        level += *admitted * p.token;
    }
    const int64_t d = clamp(ask.demand, 0, kShareDemandMax);
    bool asked[2];
    for (int k = 0; k < 2; k++) asked[k] = ask.rate[k] > 0 || ask.burst[k] > 0;
    // A demand is recorded by a round's ask for the next epoch: the host's measured demand, once
    // per epoch. A key not used lately (a request waiting) counts its guess for its own part only.
    if (asked[1] && need == 0) b.demand[1] = min64(b.demand[1] + d, kExact);
    int64_t total = max64(max64(b.demand[0], b.demand[1]), max64(d, 1));
    if (b.demand[0] == 0) total = max64(total, min64(d * clamp(hosts, 1, 1 << 20), kExact));
    // The host's part of the demands reported, in parts (at most all of it): of the burst always,
    // of the rate once the demands (with headroom) exceed it. The demands of the current epoch
    // (reported during the one before) count for the next one too: every host's part is fair
    // from its second epoch on.
    const int64_t part = ceil_div(kShareParts * d, total);
    // While the demands with half as much again fit the rate, a host may take what it wants.
    const int64_t rate_cap = 2 * kShareParts >= 3 * total ? kShareParts : part;
    const int64_t burst_cap = (cap / kShareParts) * part + ceil_div((cap % kShareParts) * part, kShareParts);
    for (int k = 0; k < 2; k++) {
        if (!asked[k]) continue;
        int64_t q = min64(min64(clamp(ask.rate[k], 0, kShareParts), kShareParts - b.rate[k]), rate_cap);
        int64_t u = min64(min64(clamp(ask.burst[k], 0, cap), cap - b.burst[k]), burst_cap);
        q = max64(q, 0);
        // No more of the burst than of the rate: the pool, refilled at the rate no share holds,
        // keeps room for what it refills, or the requests it is there for find it full.
        const int64_t rate = b.rate[k] + q;
        u = min64(u, (cap / kShareParts) * rate + ceil_div((cap % kShareParts) * rate, kShareParts) - b.burst[k]);
        u = max64(u, 0);
        b.rate[k] += q;
        b.burst[k] += u;
        g.rate[k] = q;
        g.burst[k] = u;
    }
    // A share of the current epoch granted now (a first one, or more of one held) starts with
    // units of the pool, up to the burst granted, if the requests waiting got all they needed:
    // the host's bucket with them stays within the burst counted for it, even while they travel
    // (until the reply it holds at most its earlier burst).
    if (tokens > 0 && g.burst[0] > 0 && *admitted == need && level < p.depth) {
        *moved = min64(min64(tokens, g.burst[0]), (p.depth - level) / p.token);
        level += *moved * p.token;
    }
    level = max64(level, b.burst[0] * p.token);
    s = bucket_at_level(s, p, now, level);
    return g;
}

// ---- the host's side ---------------------------------------------------------------------

namespace {

// The epochs held first, oldest first, then the empty ones.
void sort_held(HostShare& h) {
    for (int i = 1; i < kSharesHeld; i++) {
        for (int j = i; j > 0; j--) {
            const Share& a = h.held[j - 1];
            const Share& b = h.held[j];
            if (b.at == 0 || (a.at != 0 && a.at <= b.at)) break;
            Share x = h.held[j - 1];
            h.held[j - 1] = h.held[j];
            h.held[j] = x;
        }
    }
}

Share held_at(const HostShare& h, int64_t epoch_at) {
    for (const Share& s : h.held) {
        if (s.at != 0 && s.at == epoch_at) return s;
    }
    return Share{};
}

}  // namespace

bool share_holds(const HostShare& h, int64_t epoch_at) { return held_at(h, epoch_at).at != 0; }

Share share_effective(const HostShare& h, int64_t t, int64_t guard) {
    if (h.epoch_us <= 0) return Share{};
    int64_t g = clamp(guard, 0, (h.epoch_us - 1) / 2);
    int64_t e1 = window_start(t - g, h.epoch_us), e2 = window_start(t + g, h.epoch_us);
    Share a = held_at(h, e1);
    if (e1 == e2) return a;
    Share b = held_at(h, e2);
    return Share{e1, min64(a.rate, b.rate), min64(a.burst, b.burst)};
}

void share_advance(HostShare& h, const Policy& p, int64_t now, int64_t guard) {
    if (h.epoch_us <= 0 || now <= h.at) return;
    int64_t last = 0;  // the end of the last epoch held: nothing refills beyond it
    for (const Share& s : h.held) last = max64(last, s.at == 0 ? 0 : s.at + h.epoch_us);
    if (last == 0) {
        // No epoch held (a cold key's, on every request): what the walk below comes to, as
        // every share in force is none.
        h.tokens = h.frac = 0;
        h.at = now;
        return;
    }
    int64_t g = clamp(guard, 0, (h.epoch_us - 1) / 2);
    int64_t t = h.at;
    while (t < now) {
        if (t >= last + g) {
            h.tokens = h.frac = 0;
            break;
        }
        Share e = share_effective(h, t, g);
        // The next point where the share in force changes: a boundary's guard begins or ends.
        int64_t b0 = window_start(t + g, h.epoch_us);
        int64_t next = t < b0 + g ? b0 + g : b0 + h.epoch_us - g;
        if (next <= t) next = t + 1;
        int64_t until = min64(now, next);
        int64_t cap = e.burst * p.token;
        if (h.tokens >= cap) {
            h.tokens = cap;
            h.frac = 0;
        } else {
            __int128 add = static_cast<__int128>(until - t) * p.refill * e.rate + h.frac;
            __int128 whole = add / kShareParts;
            if (whole >= cap - h.tokens) {
                h.tokens = cap;
                h.frac = 0;
            } else {
                h.tokens += static_cast<int64_t>(whole);
                h.frac = static_cast<int64_t>(add % kShareParts);
            }
        }
        t = until;
    }
    h.at = now;
    // The cap in force now (a boundary's smaller share), and the epochs over are dropped.
    Share e = share_effective(h, now, g);
    if (h.tokens > e.burst * p.token) {
        h.tokens = e.burst * p.token;
        h.frac = 0;
    }
    for (Share& s : h.held) {
        if (s.at != 0 && s.at + h.epoch_us + g <= now) s = Share{};
    }
    sort_held(h);
}

int64_t share_available(const HostShare& h, const Policy& p) { return h.tokens / p.token; }

bool share_take(HostShare& h, const Policy& p, int64_t now, int64_t guard, int64_t cost) {
    share_advance(h, p, now, guard);
    if (cost <= 0) return true;
    if (h.tokens < cost * p.token) return false;
    h.tokens -= cost * p.token;
    return true;
}

void share_add(HostShare& h, const Policy& p, int64_t now, int64_t guard, const ShareAsk& asked, const ShareGrant& g,
               int64_t tokens) {
    const int64_t epoch_us = asked.epoch_us;
    if (g.epoch_at <= 0 || epoch_us <= 0) return;
    if (h.epoch_us != epoch_us) h = HostShare{};  // another interval: start afresh
    h.epoch_us = epoch_us;
    if (h.at == 0) h.at = now;
    share_advance(h, p, now, guard);
    for (int k = 0; k < 2; k++) {
        if (asked.rate[k] == 0 && asked.burst[k] == 0) continue;
        int64_t at = g.epoch_at + k * epoch_us;
        if (at + epoch_us <= now) continue;  // over (a reply that came late)
        Share* slot = nullptr;
        for (Share& s : h.held) {
            if (s.at == at) slot = &s;
        }
        for (Share& s : h.held) {
            if (slot == nullptr && s.at == 0) slot = &s;
        }
        if (slot == nullptr) {  // all held are other epochs: the oldest goes, if older (over by now)
            slot = &h.held[0];
            if (slot->at > at) continue;
            *slot = Share{};
        }
        slot->at = at;
        slot->rate += g.rate[k];
        slot->burst += g.burst[k];
        sort_held(h);
    }
    // Units moved from the pool into its bucket: never above the share in force now. A reply that
    // may land once its epoch is over on Redis's clock (later than it, or within the guard of its
    // end: a replay after a lost reply, a reply crossing the boundary) brings none: the next
    // epoch's book does not count them, and the pool has refilled meanwhile.
    if (tokens > 0 && now + clamp(guard, 0, (epoch_us - 1) / 2) < g.epoch_at + epoch_us) {
        Share e = share_effective(h, now, guard);
        __int128 t = static_cast<__int128>(h.tokens) + static_cast<__int128>(tokens) * p.token;
        h.tokens = t > e.burst * p.token ? e.burst * p.token : static_cast<int64_t>(t);
    }
}

int64_t share_demand(const Policy& p, int64_t units, int64_t span_us) {
    if (units <= 0 || span_us <= 0) return 0;
    // units / span against requests / period, in parts.
    __int128 num = static_cast<__int128>(units) * p.period_us * kShareParts;
    __int128 den = static_cast<__int128>(p.requests) * span_us;
    __int128 d = (num + den - 1) / den;
    return d > kShareDemandMax ? kShareDemandMax : static_cast<int64_t>(d);
}

int64_t share_demand_span(int64_t span_us, int64_t since, int64_t now, int64_t floor_us) {
    int64_t span = since > 0 && now - since < span_us ? now - since : span_us;
    return span > floor_us ? span : floor_us;
}

ShareAsk share_cold_ask(const Policy& p, int64_t epoch_us, int64_t hosts, int64_t now) {
    ShareAsk a;
    a.epoch_us = epoch_us;
    hosts = clamp(hosts, 1, kShareParts);
    a.demand = ceil_div(kShareParts, hosts);
    a.rate[0] = a.demand;
    a.burst[0] = ceil_div(p.capacity(), hosts);
    if (epoch_us > 0 && now - window_start(now, epoch_us) >= epoch_us / 2) {
        // Late in the epoch: the next one too, or the share would end (and, within the guard of
        // the boundary, hold nothing) before the next round asks it.
        a.rate[1] = a.rate[0];
        a.burst[1] = a.burst[0];
    }
    return a;  // (the units wanted in its bucket, sent as the item's `want`: its burst)
}

ShareAsk share_round_ask(const HostShare& h, ShareAsks& a, const Policy& p, int64_t epoch_us, int64_t now,
                         int64_t demand) {
    ShareAsk ask;
    if (epoch_us <= 0 || demand <= 0) return ask;
    const int64_t cur = window_start(now, epoch_us), next = cur + epoch_us;
    const int64_t want = min64(kShareParts, demand + demand / 2 + 1);
    // A burst of what its demand brings in half an epoch (one interval), and one: the rest of the
    // burst stays in the pool, for the requests of any host that its bucket cannot admit.
    const __int128 per_half = static_cast<__int128>(demand) * p.requests * (epoch_us / 2) /
                              (static_cast<__int128>(kShareParts) * p.period_us);
    const int64_t cap = per_half + 1 < p.capacity() ? static_cast<int64_t>(per_half) + 1 : p.capacity();
    Share have[2];
    for (const Share& s : h.held) {
        if (s.at != 0 && s.at == cur) have[0] = s;
        if (s.at != 0 && s.at == next) have[1] = s;
    }
    ask.epoch_us = epoch_us;
    ask.demand = demand;
    bool asked = false;
    if (a.asked_next != next) {
        // At least the units its bucket holds: they carry into the next epoch, not lost at its start.
        const int64_t keep = min64(share_available(h, p), p.capacity());
        ask.rate[1] = max64(want - have[1].rate, 0);
        ask.burst[1] = max64(max64(cap, keep) - have[1].burst, 0);
        if (ask.rate[1] == 0 && ask.burst[1] == 0) ask.rate[1] = 1;  // its demand recorded all the same
        a.asked_next = next;
        asked = true;
    }
    if (have[0].rate < demand && have[0].rate < want && a.capped == 0 && a.asked_more != cur) {
        ask.rate[0] = want - have[0].rate;
        ask.burst[0] = max64(cap - have[0].burst, 0);
        a.asked_more = cur;
        asked = true;
    }
    if (!asked) ask.epoch_us = 0;
    return ask;
}

ShareAsk share_give_back_ask(HostShare& h, const Policy& p, int64_t now, int64_t guard, int64_t* units) {
    ShareAsk ask;
    *units = 0;
    if (h.epoch_us <= 0) return ask;
    share_advance(h, p, now, guard);  // the units it holds now, not at its last request
    *units = share_available(h, p);
    ask.epoch_us = h.epoch_us;
    // The latest epoch held and the one before it (held or not: an epoch between two held may
    // be missing, its ask lost).
    int64_t latest = 0;
    for (const Share& s : h.held) latest = max64(latest, s.at);
    ask.back_at = latest != 0 ? latest - h.epoch_us : 0;
    for (const Share& s : h.held) {
        if (s.at == 0 || ask.back_at == 0) continue;
        int j = s.at == ask.back_at ? 0 : (s.at == ask.back_at + h.epoch_us ? 1 : -1);
        if (j < 0) continue;
        ask.back_rate[j] = s.rate;
        ask.back_burst[j] = s.burst;
    }
    const int64_t epoch_us = h.epoch_us;
    h = HostShare{};
    h.epoch_us = epoch_us;
    if (ask.back_at == 0) {
        ask.epoch_us = 0;
        *units = 0;
    }
    return ask;
}

bool share_may_draw(const ShareAsks& a, int64_t epoch_us, int64_t now) {
    return epoch_us > 0 && a.dry != window_start(now, epoch_us);
}

ShareAsk share_draw_ask(int64_t epoch_us) {
    ShareAsk ask;
    ask.epoch_us = epoch_us;
    return ask;
}

void share_asks_reply(ShareAsks& a, const SyncItem& sent, const SyncResult& r, int64_t redis_at) {
    if (sent.share.rate[1] > 0) a.capped = r.share.rate[1] < sent.share.rate[1] ? 1 : 0;
    if (sent.need > 0 && r.granted < sent.need && sent.share.epoch_us > 0) {
        a.dry = window_start(redis_at, sent.share.epoch_us);
    }
}

}  // namespace rl
