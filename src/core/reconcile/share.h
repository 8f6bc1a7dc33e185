// sync_mode=lease on a bucket (gcra, token, leaky): leases as shares of the rate and of the
// burst (issue 22; README "Bucket leases are shares"). A host holds, per epoch (Q long, aligned
// on Redis's clock), a share (rate, burst): it admits through a bucket of its own of that rate
// and depth, with no Redis call until the share must be renewed.
//
// Redis's side (ShareBook, in the key's value after its state, and the Lua's mirror): the key's
// bucket state is the pool, what no share holds. For the current and the next epoch the book
// sums the shares granted, R (parts of the rate) and B (units); the pool refills at r - R and
// holds at most C - B (share_settle, epoch by epoch). Tokens, counted in the pool and in every
// host's bucket, never sum above C and are refilled at most at r: one exact limiter fed the same
// admissions always holds at least as many, so it allows every one (tests/sync_sim_test.cpp).
//
// The host's side (HostShare): its bucket, refilled at its share's rate, never above its
// share's burst; within `guard` of an epoch boundary (the uncertainty of its clock against
// Redis's) at the smaller of the two epochs' shares.
#pragma once
#include <cstdint>
#include "core/algo/policy.h"
#include "core/algo/state.h"

namespace rl {
struct SyncItem;
struct SyncResult;
}  // namespace rl

namespace rl {

constexpr int64_t kShareParts = int64_t{1} << 16;         // a rate share: parts of the policy's rate
constexpr int64_t kShareDemandMax = int64_t{1} << 24;     // a demand (parts) is counted up to 256 rates

// Whether a policy's buckets can be shared with epochs of `epoch_us`: exact in the Lua's doubles
// (refill * epoch * parts below 2^52). Else the key keeps count leases.
bool share_fits(const Policy& p, int64_t epoch_us);

// ---- Redis's side ------------------------------------------------------------------------

struct ShareBook {
    int64_t epoch_at = 0;    // start of the current epoch (Redis's clock); 0: no book
    int64_t epoch_us = 0;    // Q
    int64_t rate[2] = {0, 0};    // parts held in the current and the next epoch
    int64_t burst[2] = {0, 0};   // units held
    int64_t demand[2] = {0, 0};  // the demand (parts) hosts reported for each
    int64_t settled_at = 0;  // the pool (the key's state) is as of then
    bool empty() const { return epoch_at == 0; }
};
constexpr size_t kShareBookFields = 9;  // doubles after the state's 3 in the key's value

// What a host asks of one key (in its SyncItem; epoch_us == 0: nothing), and what it gives back.
struct ShareAsk {
    int64_t epoch_us = 0;
    int64_t demand = 0;              // parts: its measured demand
    int64_t rate[2] = {0, 0};        // parts wanted, current and next epoch (0, 0: not asked)
    int64_t burst[2] = {0, 0};       // units wanted
    int64_t back_at = 0;             // give-back: the epoch of back_*[0] (back_*[1]: the one after)
    int64_t back_rate[2] = {0, 0};
    int64_t back_burst[2] = {0, 0};
};

struct ShareGrant {
    int64_t epoch_at = 0;            // the current epoch of Redis's clock (0: no book, nothing granted)
    int64_t rate[2] = {0, 0};        // parts granted for it and the next
    int64_t burst[2] = {0, 0};
};

// The pool at `now` (at least the book's settled_at): refilled epoch by epoch at r - R, never
// above C - B; the book rolled to the epoch of `now` (emptied once every share is over).
State share_settle(const State& s, ShareBook& book, const Policy& p, int64_t now);

// Subtracts what a host gives back (never below 0), at `now` (after share_settle).
void share_give_back(ShareBook& book, const ShareAsk& ask);

// The grant at `now` (after share_settle): of `need` units (requests waiting: no share held, or
// its bucket empty), as many as the pool holds are admitted from it (*admitted); then each epoch asked gets at most what
// is free, at most the part of the burst that the book's rate is of the rate (the pool keeps
// room for what it refills), at most the host's part of the burst, d / D (D: the larger of the demands recorded
// for the two epochs and d; a demand is recorded by an ask for the next epoch without a need), and of the
// rate once 1.5 D exceeds it; the pool is floored at the new B. A new share's bucket starts empty:
// no token is ever in flight. `s` is updated.
// While no demand is recorded for the current epoch (the first one of a key), D is taken as at
// least `hosts` times d.
// Then, if the need was all admitted and the current epoch is asked (the host holds none of it),
// up to `tokens` more units, at most its burst, move from the pool into its bucket (*moved).
ShareGrant share_grant(State& s, ShareBook& book, const Policy& p, int64_t now, const ShareAsk& ask, int64_t need,
                       int64_t tokens, int64_t hosts, int64_t* admitted, int64_t* moved);

// A count ask (ask.epoch_us == 0: a cold key's requests, or a count lease's) gets its `need`
// from the pool as far as it holds it, and nothing else.
// When nothing of the book is in force any more: the key's TTL must reach at least that far.
inline int64_t share_book_end(const ShareBook& b) { return b.empty() ? 0 : b.epoch_at + 2 * b.epoch_us; }

// ---- the host's side ---------------------------------------------------------------------

struct Share {
    int64_t at = 0;     // its epoch [at, at + Q) on Redis's clock; 0: none
    int64_t rate = 0;   // parts
    int64_t burst = 0;  // units
};

// Around a boundary three epochs count: the one ending (in force until the guard is past), the
// one beginning, and the next, whose share a round may ask as soon as the boundary is crossed.
constexpr int kSharesHeld = 3;

struct HostShare {
    Share held[kSharesHeld];  // the epochs held, the oldest first (then the empty ones)
    int64_t epoch_us = 0;
    int64_t tokens = 0;   // scaled units in the host's bucket
    int64_t frac = 0;     // and parts of kShareParts of one
    int64_t at = 0;       // as of (Redis's clock as the host reads it)
};
static_assert(sizeof(HostShare) == 104, "kept in shared-memory slots");

// The share that bounds the host at `t`: the smaller (rate and burst apart) of the epochs
// within `guard` of t; none where it holds none.
Share share_effective(const HostShare& h, int64_t t, int64_t guard);

// Refills the host's bucket up to `now`, segment by segment; drops the epochs over.
void share_advance(HostShare& h, const Policy& p, int64_t now, int64_t guard);

// Whole units the host's bucket holds at `now` (after share_advance).
int64_t share_available(const HostShare& h, const Policy& p);

// Spends `cost` units at `now` if the bucket holds them.
bool share_take(HostShare& h, const Policy& p, int64_t now, int64_t guard, int64_t cost);

// A grant's reply at `now`: the shares add to those held of the same epoch (the bucket refilled
// up to now first, at what it held). An epoch asked is held from then on, even with nothing
// granted: the host rejects on it until it ends instead of asking again.
// `tokens` units moved from the pool fill its bucket, never above the share in force now.
void share_add(HostShare& h, const Policy& p, int64_t now, int64_t guard, const ShareAsk& asked, const ShareGrant& g,
               int64_t tokens);

// Whether the host holds a share for the epoch `epoch_at`; for any epoch.
bool share_holds(const HostShare& h, int64_t epoch_at);
inline bool share_holds_any(const HostShare& h) { return h.held[0].at != 0; }

// A demand in parts of the rate: `units` arrived over `span_us`.
int64_t share_demand(const Policy& p, int64_t units, int64_t span_us);

// The span a demand is measured over at `now`: the last `span_us`, or since the key's run began
// (`since`) if later, never less than `floor_us` (a few requests just before a round are not a
// rate: overstated, they would shrink the other hosts' parts).
int64_t share_demand_span(int64_t span_us, int64_t since, int64_t now, int64_t floor_us);

// What a host asks, per key.
struct ShareAsks {
    int64_t asked_next = 0;  // the epoch whose share it last asked ahead
    int64_t asked_more = 0;  // the epoch it last asked more of
    int64_t capped = 0;      // 1: its last ask ahead got less than it wanted (the rate is all taken)
    int64_t dry = 0;         // the epoch in which the pool last had nothing for a request that waited
    int64_t since = 0;       // its first arrival after two epochs without any: its demand is measured from then
};

// A request its bucket cannot admit (a share held): whether it waits for units from the pool
// (Redis's tokens no share holds) rather than being rejected: not once the pool had nothing
// this epoch (at most one call in vain per epoch).
bool share_may_draw(const ShareAsks& a, int64_t epoch_us, int64_t now);

// A draw: the requests' units from the pool, nothing else.
ShareAsk share_draw_ask(int64_t epoch_us);

// The units a host asks to move from the pool into its bucket with `a` (the item's `want`): the
// burst it asks of the current epoch, a first share's or more of one held. Redis moves what the
// pool holds of it, once the requests waiting got all they needed.
inline int64_t share_units_wanted(const ShareAsk& a) { return a.burst[0] > 0 ? a.burst[0] : 0; }

// A key without a share for the current epoch (a request waits): an equal part (1 / hosts) of
// the rate and of the burst, for the current epoch (the next is asked at the next round, on the
// demand measured meanwhile; also now in the second half of the epoch).
ShareAsk share_cold_ask(const Policy& p, int64_t epoch_us, int64_t hosts, int64_t now);

// At a round at `now` (Redis's clock as read by the host), `demand` (parts) measured over the
// last epoch: the next epoch's share (once per epoch: its demand and half as much again, and a
// burst of what that demand brings in half an epoch, or of the units its bucket holds if more;
// the rest of the burst stays in the pool), and, when its share of the current one falls short
// of its demand and the rate was not all taken, more of it (once per epoch). epoch_us == 0:
// nothing.
ShareAsk share_round_ask(const HostShare& h, ShareAsks& a, const Policy& p, int64_t epoch_us, int64_t now,
                         int64_t demand);

// Unused shares given back at `now` (the host uses them no more: h is emptied), with the units
// its bucket holds then (refilled up to now, its epochs over dropped: *units, sent as the item's
// give_back; Redis puts them back in the pool, within C - B). The two latest epochs are named:
// Redis's book holds no other.
ShareAsk share_give_back_ask(HostShare& h, const Policy& p, int64_t now, int64_t guard, int64_t* units);

// After a reply decided at `redis_at` (Redis's clock): whether the rate is all taken, and the
// pool dry in the epoch of that decision. (Not the epoch the reply came back in: a draw found
// dry at the end of an epoch, where this host's ending share may hold all of the burst, says
// nothing of the next; marking the next dry rejected its requests for all of it.)
void share_asks_reply(ShareAsks& a, const SyncItem& sent, const SyncResult& r, int64_t redis_at);

}  // namespace rl
