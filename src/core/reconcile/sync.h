// Zones with sync=TIME: every request is decided in the host's shared memory; every TIME one
// worker of the host reconciles the keys used since with Redis. Pure functions of the core:
// what a host records per key, how Redis merges it into the global state, and how a lease
// of units is granted (sync_mode=lease). The Lua's "sync" mode mirrors them (wire/lua/13-sync.lua).
//
// optimistic: a host admits against its view (the global state Redis last returned, plus
//   what the host admitted since). It sends its delta, Redis adds it (never overwrites), and
//   the global state it returns becomes the host's view again.
// lease: a host admits only units Redis granted it (already consumed in the global state),
//   so the hosts together never admit more than the limit.
//
// The optimistic bound, per key (H hosts, interval T, round trip L): a unit one host admits is
// unseen by the others for at most V = 2T + L (its next send, then their next reply). Each
// host's view holds at least its own admissions, so in any span t the cluster admits at most
//   buckets: C + r t + (H - 1)(C + r V)     (C = burst + 1, r = rate), the excess a debt that
//            the following requests pay (deltas are added uncapped), so the long-run rate is r;
//   windows: H R per aligned window (each host at most R on its view).
// Checked by tests/sync_sim_test.cpp.
#pragma once
#include <cstdint>
#include "core/algo/decision.h"
#include "core/algo/policy.h"
#include "core/algo/state.h"

namespace rl {

// What one host admitted on one key since it last sent it.
struct Delta {
    int64_t units = 0;  // buckets: units admitted (sum of costs); windows: admitted in window `at`
    int64_t prev = 0;   // windows: admitted in the window before `at` (an interval is at most a
                        // period, so it touches two windows at most)
    int64_t at = 0;     // buckets: time of the last admission; windows: start of window `at`
    bool empty() const { return units == 0 && prev == 0; }
};
static_assert(sizeof(Delta) == 24, "kept in shared-memory slots");

// Records an admission of `cost` at `now`, which decide() allowed. A negative cost takes back
// an admission refunded before it was sent (units may then go below 0: apply_delta subtracts,
// never below empty). Windows count it in window_start(now), or in d.at if that is newer (a
// clock that went back), as decide does; a view whose window is ahead of `now` (another
// host's clock) counted it there: pass max(now, view.a) for windows.
void delta_add(Delta& d, const Policy& p, int64_t now, int64_t cost);

// d += more: a delta whose sending failed goes back to what is unsent.
void delta_merge(Delta& d, const Delta& more, const Policy& p);

// The state after adding d to s (Redis: the global state; a host: its view, the global state
// plus what it admitted since sending). Adds, never overwrites: buckets pour units * token
// at d.at (drained from s as decide does, with no cap: an overshoot is a debt the following
// requests pay); windows add per window, dropping counts of windows already over.
State apply_delta(const State& s, const Policy& p, int64_t now, const Delta& d);

// sync_mode=lease: what Redis grants a host on one key at `now`. The host asks for `want`
// units and needs at least `need` (a request waiting for them; 0 when asking ahead). Redis
// grants at most what the global state still admits, and at most a fair share of it,
// ceil(remaining / hosts), but `need` whenever it fits. The granted units are consumed in the
// global state (decide with cost = granted, unshaped: a policy's delay= and max_delay= apply
// where requests are decided, not to grants). granted == 0 when `need` does not fit; then
// decision says when it would (retry_after_us).
struct Grant {
    int64_t granted = 0;
    Decision decision;  // of the global state; decision.next is the state after the grant
};
Grant grant(const State& s, const Policy& p, int64_t now, int64_t want, int64_t need, int64_t hosts);

// A bucket's debt (an over-full level, in scaled units) never grows beyond this: every value
// stays exact in a double, however long a host decided alone.
constexpr int64_t kMaxDebt = kExact / 8;

// A bucket's level at `t` (scaled units, at most kMaxDebt), however far over full.
int64_t bucket_level(const State& s, const Policy& p, int64_t t);
// The state of a bucket at `level` at time t (never moving a refill or leak time back).
State bucket_at_level(const State& s, const Policy& p, int64_t t, int64_t level);

// Redis's side of a delta (sync_key, and the Lua): its time is bounded by Redis's clock, so
// that no host's clock spoils the shared state. Buckets: poured within [now - period, now].
// Windows: a delta of a window after Redis's current one counts all its units in the current
// window; one whose window is over before the previous window is dropped (its counts no
// longer decide anything).
Delta clamp_delta(const Delta& d, const Policy& p, int64_t now);

// sync_mode=lease: the units a host holds on one key, as Redis granted them. Spending them
// later than Redis consumed them must not admit more than one limiter would, so a lease is
// worth what the global state still holds of it at `now`:
//  - windows (fixed, sliding): the units count in the window of their grant: usable while
//    `now` is in that window (then worth nothing);
//  - buckets: the units sit at the top of the global level as it was after the grant (`top`,
//    scaled units at time `at`) and drain with it: usable are those still above empty,
//    min(units, (top - (now - at) * refill) / token), so a lease decays at the limit's rate
//    once the units below it have drained. Units granted later are counted just above the
//    unspent ones (never higher than they really are).
// Admitting only usable units, the admissions of all hosts, replayed through decide() on
// one state at their times, are all allowed (tests/sync_sim_test.cpp).
struct Lease {
    int64_t units = 0;  // granted, not yet spent
    int64_t top = 0;    // buckets: the global level (scaled) just above the units at `at`
    int64_t at = 0;     // buckets: when granted (Redis's clock); windows: start of their window
};
static_assert(sizeof(Lease) == 24, "kept in shared-memory slots");

int64_t lease_usable(const Lease& l, const Policy& p, int64_t now);

// Adds `granted` units that Redis granted at `now` (its clock), `global` being the state it
// returned (after the grant). Requests that waited for the grant spend the units they needed
// at the grant (they are admitted as of `now`, even though the reply arrives later): add only
// the rest, granted - need. (A need beyond the capacity never fits: ask at most capacity().)
void lease_add(Lease& l, const Policy& p, int64_t now, int64_t granted, const State& global);

// Spends `cost` usable units; false (nothing spent) if fewer are usable.
bool lease_take(Lease& l, const Policy& p, int64_t now, int64_t cost);

// sync_mode=lease: whether a lease pays for a key. A key asked once costs Redis a grant and a
// give-back, about three per-request checks; one seen twice within an interval or more often,
// less than one (tests/bench/README.md, "Lease zones with many keys"). So a key is *cold* (its
// requests are asked for exactly what they cost, as a per-request check: no lease ahead,
// nothing to give back) until a request comes within one interval of the one before it; it is
// then *hot* for one interval from that request.
struct Warmth {
    int64_t arrived_at = 0;  // the key's last request (the zone's clock); 0: none yet
    int64_t warm_at = 0;     // the last request that came within one interval of the one before it
};
static_assert(sizeof(Warmth) == 16, "kept in shared-memory slots");

// Counts a request arriving at `now` (once per request).
void warmth_arrival(Warmth& w, int64_t now, int64_t interval_us);
// Whether the key is hot at `now`: a request within one interval of the one before it, in the
// last interval.
bool warmth_hot(const Warmth& w, int64_t now, int64_t interval_us);

// Redis's side of a give-back: the state after returning `units` unspent units of a lease
// (at, top as in Lease). Windows: rl::refund at `at` (the window they count in). Buckets: the
// level drops by the units still usable at `now`, only when nothing was granted above them
// since (the level at `now` is at most their top): removing units from the middle would move
// other hosts' leases down under them. Otherwise nothing is returned and the units drain.
State give_back(const State& s, const Policy& p, int64_t now, int64_t units, int64_t at, int64_t top);

}  // namespace rl
