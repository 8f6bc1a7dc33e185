// Simulation of sync zones: H hosts deciding locally against one limit, reconciled with a
// Redis modelled by the core's own functions (sync_key: give_back, apply_delta, grant), over
// random arrival processes. Each host handles a reply with the engine's own function
// (sync_reply.h, take_key_reply), so the bounds below hold for the code that ships; every
// reply is within the rule of what a reply may say (none refused). Time is simulated: the
// whole run takes about a second.
//
// optimistic: each host decides on its view (the global state of its last reply plus what it
//   admitted since its send), sends its delta every T; Redis applies it L/2 later, the reply
//   (the global state then) arrives L/2 after that. The worst overshoot over all scenarios is
//   printed against the bound of sync.h, and the test fails if any exceeds it.
// lease: each host admits only usable lease units (lease_take); a request finding none waits
//   for one ask (need = 1, want adaptive: what the host admitted in the last 2 T), admitted at
//   Redis's grant; every T a round asks ahead when the lease runs low and gives back units
//   unspent for 2 T. All the cluster's admissions, replayed through decide() on one state at
//   their times, must be allowed (zero overshoot); under-admission against one exact limiter
//   over the same arrivals is printed and bounded.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <queue>
#include <random>
#include <string>
#include <vector>

#include "algo_test_util.h"
#include "core/algo/exact_math.h"
#include "core/reconcile/sync_command.h"
#include "core/reconcile/sync_reply.h"

namespace {

using rltest::kSec;
constexpr int64_t kMs = 1000;
constexpr int64_t kStart = 1763900000LL * kSec;

enum class Arrivals { poisson, bursts, hot_host, all_at_once };
const char* arrivals_name(Arrivals a) {
    switch (a) {
        case Arrivals::poisson: return "poisson";
        case Arrivals::bursts: return "bursts";
        case Arrivals::hot_host: return "hot host";
        case Arrivals::all_at_once: return "all at once";
    }
    return "";
}

struct Scenario {
    rl::Policy p;
    int hosts;
    int64_t T, L;  // sync interval, round trip
    Arrivals arrivals;
    double load;   // offered load / the limit's rate
    int64_t duration;
    uint64_t seed;

    std::string name() const {
        char buf[200];
        std::snprintf(buf, sizeof buf, "%s %lld/%lldms burst %lld, H=%d, T=%lldms, L=%lldms, %s x%.1f",
                      std::string(rl::algo_name(p.algo)).c_str(), static_cast<long long>(p.requests),
                      static_cast<long long>(p.period_us / kMs), static_cast<long long>(p.burst), hosts,
                      static_cast<long long>(T / kMs), static_cast<long long>(L / kMs), arrivals_name(arrivals), load);
        return buf;
    }
};

// Per host, the sorted times of its requests (cost 1 each).
std::vector<std::vector<int64_t>> make_arrivals(const Scenario& sc) {
    std::mt19937_64 rng(sc.seed);
    std::vector<std::vector<int64_t>> out(static_cast<size_t>(sc.hosts));
    const double rate = sc.load * static_cast<double>(sc.p.requests) / static_cast<double>(sc.p.period_us);  // per us
    const int64_t end = kStart + sc.duration;
    auto poisson = [&](std::vector<int64_t>& v, double r) {
        std::exponential_distribution<double> gap(r);
        for (double t = static_cast<double>(kStart) + gap(rng); t < static_cast<double>(end); t += gap(rng)) {
            v.push_back(static_cast<int64_t>(t));
        }
    };
    const int64_t cap = sc.p.capacity();
    switch (sc.arrivals) {
        case Arrivals::poisson:
            for (auto& v : out) poisson(v, rate / sc.hosts);
            break;
        case Arrivals::hot_host:
            poisson(out[0], rate * 0.8);
            for (size_t h = 1; h < out.size(); h++) poisson(out[h], rate * 0.2 / (sc.hosts - 1));
            break;
        case Arrivals::bursts: {
            // Bursts of up to twice the capacity at one host, at random instants, on a thin background.
            std::exponential_distribution<double> gap(rate / static_cast<double>(cap));
            for (double t = static_cast<double>(kStart); t < static_cast<double>(end); t += gap(rng)) {
                auto& v = out[rng() % out.size()];
                for (int64_t k = 1 + static_cast<int64_t>(rng() % static_cast<uint64_t>(2 * cap)); k > 0; k--) {
                    v.push_back(static_cast<int64_t>(t));
                }
            }
            for (auto& v : out) poisson(v, rate * 0.1 / sc.hosts);
            break;
        }
        case Arrivals::all_at_once: {
            // Every host bursts the whole capacity at the same instants (the window starts, for windows).
            int64_t every = std::max<int64_t>(sc.p.period_us / 2, 1);
            if (!rl::is_bucket(sc.p.algo)) every = sc.p.period_us;
            for (int64_t t = rl::window_start(kStart, sc.p.period_us) + sc.p.period_us; t < end; t += every) {
                for (auto& v : out) {
                    for (int64_t k = 0; k < cap + 2; k++) v.push_back(t);
                }
            }
            for (auto& v : out) poisson(v, rate / sc.hosts);
            break;
        }
    }
    for (auto& v : out) std::sort(v.begin(), v.end());
    return out;
}

// ---- measures --------------------------------------------------------------------------------

// The most admitted beyond what one exact limiter allows, in units: buckets, over any span
// [t1, t2]: count - C - r (t2 - t1); windows: per aligned window, count - R.
double overshoot(const rl::Policy& p, std::vector<int64_t> admitted) {
    std::sort(admitted.begin(), admitted.end());
    if (admitted.empty()) return 0;
    if (!rl::is_bucket(p.algo)) {
        int64_t worst = 0, w = INT64_MIN, n = 0;
        for (int64_t t : admitted) {
            int64_t ws = rl::window_start(t, p.period_us);
            n = ws == w ? n + 1 : 1;
            w = ws;
            worst = std::max(worst, n - p.requests);
        }
        return static_cast<double>(worst);
    }
    // count * P - R * span, maximised over spans: at each admission i (cumulative count A_i),
    // A_i P - R t_i - min over j <= i of ((A_j - 1) P - R t_j).
    __int128 best = 0, low = 0;
    bool first = true;
    for (size_t i = 0; i < admitted.size(); i++) {
        __int128 t = admitted[i] - kStart;
        __int128 before = static_cast<__int128>(i) * p.period_us - static_cast<__int128>(p.requests) * t;
        if (first || before < low) low = before;
        first = false;
        __int128 at = static_cast<__int128>(i + 1) * p.period_us - static_cast<__int128>(p.requests) * t;
        best = std::max(best, at - low);
    }
    return static_cast<double>(best) / static_cast<double>(p.period_us) - static_cast<double>(p.capacity());
}

// The optimistic bound (sync.h): buckets (H - 1) (C + r (2T + L)); windows (H - 1) R per window.
double optimistic_bound(const Scenario& sc) {
    const rl::Policy& p = sc.p;
    if (!rl::is_bucket(p.algo)) return static_cast<double>((sc.hosts - 1) * p.requests);
    double r = static_cast<double>(p.requests) / static_cast<double>(p.period_us);
    return (sc.hosts - 1) * (static_cast<double>(p.capacity()) + r * static_cast<double>(2 * sc.T + sc.L));
}

// One exact limiter over all the arrivals: what it admits.
int64_t reference_admitted(const rl::Policy& p, const std::vector<std::vector<int64_t>>& arrivals) {
    std::vector<int64_t> all;
    for (const auto& v : arrivals) all.insert(all.end(), v.begin(), v.end());
    std::sort(all.begin(), all.end());
    rltest::Key k(p);
    int64_t n = 0;
    for (int64_t t : all) n += k.allowed(t);
    return n;
}

// ---- the event loop --------------------------------------------------------------------------

struct Event {
    int64_t t;
    uint64_t seq;
    int kind;  // 0 arrival, 1 round (send), 2 at Redis, 3 reply, 4 lease ask
    int host;
    size_t msg;  // index into the messages (kinds 2, 3)
    bool operator>(const Event& o) const { return t != o.t ? t > o.t : seq > o.seq; }
};

struct Message {
    rl::SyncItem item;
    rl::SyncResult result;
    int64_t redis_at = 0;
    int64_t first_sent = 0;
    bool ran = false;  // Redis ran it: a resend (the same call id) gets its reply and changes nothing
};

enum class Mode { optimistic, lease, shares };

// Shares: what can go wrong besides the arrivals.
struct Faults {
    double loss = 0;        // each reply lost with this probability (sent again with its id every T, 5 s at most)
    int64_t skew = 0;       // each host's reading of Redis's clock is off by up to this (within its guard)
    int64_t guard = -1;     // the hosts' guard (-1: skew + 1 ms, as the engine's)
    bool cold = false;      // leases and shares: a cold key's requests are asked for one by one
                            // (count asks, want = need), as the engine does (sync.h, warmth_hot)
};

class Sim {
  public:
    explicit Sim(const Scenario& sc, bool lease) : Sim(sc, lease ? Mode::lease : Mode::optimistic) {}
    Sim(const Scenario& sc, Mode mode, Faults f = Faults{})
        : sc_(sc), lease_(mode == Mode::lease), shares_(mode == Mode::shares), faults_(f),
          hosts_(static_cast<size_t>(sc.hosts)) {
        bounds_.hosts = sc.hosts;
        bounds_.interval_us = sc.T;
        bounds_.round_trip_us = sc.L;
        epoch_ = 2 * sc.T;
        guard_ = f.guard >= 0 ? f.guard : f.skew + 1000;
        std::mt19937_64 rng(sc.seed * 13 + 5);
        for (Host& h : hosts_) {
            h.skew = f.skew > 0 ? static_cast<int64_t>(rng() % static_cast<uint64_t>(2 * f.skew + 1)) - f.skew : 0;
        }
    }

    std::vector<int64_t> run(const std::vector<std::vector<int64_t>>& arrivals) {
        std::mt19937_64 rng(sc_.seed * 7 + 1);
        for (int h = 0; h < sc_.hosts; h++) {
            for (int64_t t : arrivals[static_cast<size_t>(h)]) push(t, 0, h, 0);
            push(kStart + static_cast<int64_t>(rng() % static_cast<uint64_t>(sc_.T)), 1, h, 0);  // its phase
        }
        const int64_t end = kStart + sc_.duration;
        while (!q_.empty()) {
            Event e = q_.top();
            q_.pop();
            if (e.kind == 1 && e.t > end) continue;
            Host& h = hosts_[static_cast<size_t>(e.host)];
            if (shares_) {
                switch (e.kind) {
                    case 0: share_arrival(h, e.host, e.t); break;
                    case 1: share_round(h, e.host, e.t); break;
                    case 2: at_redis(e.host, e.msg, e.t); break;
                    case 3: share_reply(h, e.host, e.msg, e.t); break;
                    case 4: share_ask(h, e.host, e.t); break;
                }
                continue;
            }
            switch (e.kind) {
                case 0: arrival(h, e.host, e.t); break;
                case 1: round(h, e.host, e.t); break;
                case 2: at_redis(e.host, e.msg, e.t); break;
                case 3: reply(h, e.msg, e.t); break;
                case 4: ask(h, e.host, e.t); break;
            }
        }
        return admitted_;
    }

  private:
    struct Host {
        rl::SyncKeyState k;             // view, unsent, lease: as the engine keeps them
        int64_t asking = 0;             // lease asks in flight
        int64_t pending = 0;            // requests of this instant waiting for an ask to be sent
        int64_t waiting = 0;            // requests waiting for the ask in flight
        std::vector<int64_t> recent;    // lease: admission times in the last 2 T
        rl::HostShare share;            // shares: the host's bucket and the epochs it holds
        std::vector<int64_t> seen;      // shares: arrival times in the last epoch (its demand)
        int64_t skew = 0;               // shares: its reading of Redis's clock, minus the truth
        rl::ShareAsks asks;             // shares: what it asked lately
        int64_t last_seen = 0;
        int64_t first_seen = 0;
        rl::Warmth warmth;              // its requests' arrivals (Faults::cold)
    };

    // Whether the key's requests are asked for one by one (Faults::cold).
    bool cold(const Host& h, int64_t t) const { return faults_.cold && !rl::warmth_hot(h.warmth, t, sc_.T); }

    void push(int64_t t, int kind, int host, size_t msg) { q_.push(Event{t, seq_++, kind, host, msg}); }

    void admit(Host& h, int64_t t) {
        admitted_.push_back(t);
        h.recent.push_back(t);
    }

    int64_t want_of(Host& h, int64_t t) {
        auto old = std::find_if(h.recent.begin(), h.recent.end(), [&](int64_t x) { return x > t - 2 * sc_.T; });
        h.recent.erase(h.recent.begin(), old);
        return static_cast<int64_t>(h.recent.size()) + 1;
    }

    size_t send(int host, const rl::SyncItem& item, int64_t t) {
        msgs_.push_back(Message{item, rl::SyncResult{}, 0, t, false});
        push(t + sc_.L / 2, 2, host, msgs_.size() - 1);
        calls_++;
        return msgs_.size() - 1;
    }

    rl::SyncItem item() const {
        rl::SyncItem it;
        it.zone = "sim";
        it.policy = &sc_.p;
        it.hosts = sc_.hosts;
        return it;
    }

    void arrival(Host& h, int host, int64_t t) {
        if (!lease_) {
            rl::Decision d = rl::decide(h.k.view, sc_.p, t, 1);
            if (!d.allowed) return;
            h.k.view = d.next;
            rl::delta_add(h.k.unsent, sc_.p, rl::is_bucket(sc_.p.algo) ? t : std::max(t, h.k.view.a), 1);
            admit(h, t);
            return;
        }
        rl::warmth_arrival(h.warmth, t, sc_.T);
        if (rl::lease_take(h.k.lease, sc_.p, t, 1)) {
            admit(h, t);
            return;
        }
        if (h.pending > 0) {
            h.pending++;  // the same loop turn: one ask for all
        } else if (h.asking > 0) {
            h.waiting++;  // served by the surplus of the ask in flight, if any
        } else {
            h.pending = 1;
            push(t, 4, host, 0);  // sent at the end of this instant's arrivals
        }
    }

    // A lease ask for the requests waiting since this instant: need them all, want more ahead.
    void ask(Host& h, int host, int64_t t) {
        rl::SyncItem it = item();
        // More than the capacity never fits: those beyond it wait for the surplus with the next.
        it.need = std::min(h.pending, sc_.p.capacity());
        it.want = h.pending + want_of(h, t);
        if (cold(h, t)) {
            it.want = it.need;  // a count ask: exactly what the requests cost
            cold_asks_++;
        }
        send_ask(h, host, it, t);
    }

    // An ask for the requests of this instant: those beyond its need wait for the surplus.
    void send_ask(Host& h, int host, const rl::SyncItem& it, int64_t t) {
        h.waiting += h.pending - it.need;
        h.pending = 0;
        h.asking++;
        send(host, it, t);
    }

    void round(Host& h, int host, int64_t t) {
        push(t + sc_.T, 1, host, 0);
        rl::SyncItem it = item();
        if (!lease_) {
            it.delta = h.k.unsent;
            h.k.unsent = rl::Delta{};
            send(host, it, t);
            return;
        }
        if (h.k.lease.units > 0 && t - h.k.used_at >= 2 * sc_.T) {
            it.give_back = h.k.lease.units;  // unspent for two intervals: others may need them
            it.give_back_at = h.k.lease.at;
            it.give_back_top = h.k.lease.top;
            h.k.lease = rl::Lease{};
        }
        int64_t want = want_of(h, t);
        bool ahead = !faults_.cold || h.k.lease.units > 0 || rl::warmth_hot(h.warmth, t, sc_.T);
        if (ahead && rl::lease_usable(h.k.lease, sc_.p, t) * 2 < want && h.recent.size() > 0) it.want = want;
        if (it.want > 0 || it.give_back > 0) send(host, it, t);
    }

    void at_redis(int host, size_t m, int64_t t) {
        Message& msg = msgs_[m];
        if (msg.ran) {  // sent again with its id: the reply of its run, nothing applied
            push(t + sc_.L - sc_.L / 2, 3, host, m);
            return;
        }
        msg.ran = true;
        if (msg.item.need > 0 && msg.item.share.epoch_us == 0 && !book_.empty()) cold_under_book_++;
        msg.result = rl::sync_key(global_, msg.item, t, nullptr, &book_);
        global_ = msg.result.global;
        msg.redis_at = t;
        push(t + sc_.L - sc_.L / 2, 3, host, m);
    }

    // The engine's handling of the reply (take_key_reply), at Redis's time of the call.
    void reply(Host& h, size_t m, int64_t t) {
        const Message& msg = msgs_[m];
        rl::KeyReply kr = rl::take_key_reply(h.k, msg.item, msg.result, msg.redis_at, lease_, bounds_);
        if (kr.refused) {
            refused_replies_++;
            if (first_fault_.empty()) first_fault_ = rl::reply_fault_text(kr.fault);
        }
        if (!lease_ || msg.item.need == 0) return;
        h.asking--;
        for (int64_t k = 0; kr.need_granted && k < msg.item.need; k++) admit(h, msg.redis_at);  // admitted at the grant
        // Requests that waited on this ask: the surplus serves them now, else they are refused.
        for (; h.waiting > 0; h.waiting--) {
            if (rl::lease_take(h.k.lease, sc_.p, t, 1)) {
                admit(h, t);
            } else {
                refused_waiting_++;
            }
        }
    }


    // ---- shares (share.h): the engine's rules for bucket leases as shares --------------------

    int64_t demand_of(Host& h, int64_t t) {
        auto old = std::find_if(h.seen.begin(), h.seen.end(), [&](int64_t x) { return x > t - epoch_; });
        h.seen.erase(h.seen.begin(), old);
        // Over the last epoch, or since the key was first seen if that is later (as the engine).
        return rl::share_demand(sc_.p, static_cast<int64_t>(h.seen.size()),
                                rl::share_demand_span(epoch_, h.first_seen, t, sc_.T / 2));
    }

    static bool asks(const rl::SyncItem& it) {
        return it.need > 0 || (it.share.epoch_us > 0 && it.share.back_at == 0);
    }

    void share_arrival(Host& h, int host, int64_t t) {
        const int64_t ht = t + h.skew;
        h.seen.push_back(t);
        rl::warmth_arrival(h.warmth, ht, sc_.T);
        if (h.last_seen <= t - 2 * epoch_) h.first_seen = t;  // a key new, or idle since its shares went back
        h.last_seen = t;
        if (rl::share_take(h.share, sc_.p, ht, guard_, 1)) {
            admit(h, t);
            return;
        }
        if (rl::share_holds(h.share, rl::window_start(ht, epoch_)) &&
            (h.asking > 0 || !rl::share_may_draw(h.asks, epoch_, ht))) {
            share_refused_++;  // over its share: rejected here, no Redis call
            return;
        }
        if (h.pending > 0) {
            h.pending++;
        } else if (h.asking > 0) {
            h.waiting++;
        } else {
            h.pending = 1;
            push(t, 4, host, 0);
        }
    }

    // A host without a share for the current epoch: one ask for it and the next, the requests
    // of this instant waiting (need: admitted by Redis from the pool if they fit).
    void share_ask(Host& h, int host, int64_t t) {
        rl::SyncItem it = item();
        it.need = std::min(h.pending, sc_.p.capacity());
        const int64_t ht = t + h.skew;
        bool cold = !rl::share_holds(h.share, rl::window_start(ht, epoch_));
        if (cold && this->cold(h, ht)) {
            it.want = it.need;  // a count ask: from the pool, no share asked
            cold_asks_++;
            send_ask(h, host, it, t);
            return;
        }
        it.share = cold ? rl::share_cold_ask(sc_.p, epoch_, sc_.hosts, ht) : rl::share_draw_ask(epoch_);
        it.want = rl::share_units_wanted(it.share);  // units wanted in its new bucket
        if (cold) h.asks.asked_more = rl::window_start(ht, epoch_);
        send_ask(h, host, it, t);
    }

    void share_round(Host& h, int host, int64_t t) {
        push(t + sc_.T, 1, host, 0);
        const int64_t ht = t + h.skew;
        rl::SyncItem it = item();
        bool idle = h.last_seen <= t - 2 * epoch_;
        if (idle && rl::share_holds_any(h.share)) {
            it.share = rl::share_give_back_ask(h.share, sc_.p, ht, guard_, &it.give_back);  // unused for two epochs: used no more from now
            if (it.share.epoch_us > 0) send(host, it, t);
            return;
        }
        if (idle || h.asking > 0) return;
        if (faults_.cold && !rl::share_holds_any(h.share) && !rl::warmth_hot(h.warmth, ht, sc_.T)) return;
        it.share = rl::share_round_ask(h.share, h.asks, sc_.p, epoch_, ht, demand_of(h, t));
        it.want = rl::share_units_wanted(it.share);
        if (it.share.epoch_us == 0) return;
        h.asking++;
        send(host, it, t);
    }

    void share_reply(Host& h, int host, size_t m, int64_t t) {
        Message& msg = msgs_[m];
        if (faults_.loss > 0 && uniform_(loss_rng_) < faults_.loss) {
            lost_++;
            // A count call has no id (sync_command.h: sync_count_form): given up at once.
            const bool counted = rl::sync_count_form(&msg.item, 1);
            count_lost_ += counted;
            if (!counted && t - msg.first_sent < 5 * kSec) {
                push(t + sc_.T, 2, host, m);  // sent again with its id after an interval
                calls_++;
                return;
            }
            // Given up: the asks go again as new calls (a give-back is not sent again).
            if (asks(msg.item)) h.asking--;
            h.asks.asked_next = 0;
            refused_waiting_ += h.waiting + (msg.item.need > 0 ? msg.item.need : 0);
            h.waiting = 0;
            return;
        }
        const int64_t ht = t + h.skew;
        rl::KeyReply kr;
        rl::ReplyFault f = rl::check_key_reply(sc_.p, msg.item, msg.result, msg.redis_at, bounds_);
        if (f != rl::ReplyFault::none) {
            refused_replies_++;
            if (first_fault_.empty()) first_fault_ = rl::reply_fault_text(f);
        }
        int64_t got = rl::take_share_reply(h.share, msg.item, msg.result, ht, guard_);
        rl::share_asks_reply(h.asks, msg.item, msg.result, msg.redis_at);
        if (asks(msg.item)) h.asking--;
        // The requests that waited: admitted by Redis if their need fitted (at the grant, as a
        // lease's), unless they gave up waiting (a reply later than a second: replayed after a loss).
        bool in_time = t - msg.first_sent < kSec;
        for (int64_t k = 0; msg.item.need > 0 && k < msg.item.need; k++) {
            if (k < got && in_time) {
                admit(h, msg.redis_at);
            } else {
                refused_waiting_++;
            }
        }
        for (; h.waiting > 0; h.waiting--) {
            if (rl::share_take(h.share, sc_.p, ht, guard_, 1)) {
                admit(h, t);
            } else {
                refused_waiting_++;
            }
        }
    }

  public:
    int64_t share_refused_ = 0;  // shares: rejected by the host's own share
    int64_t calls_ = 0;          // script calls sent (resends included)
    int64_t lost_ = 0;
    int64_t cold_asks_ = 0;        // count asks of cold keys (Faults::cold)
    int64_t count_lost_ = 0;       // ... whose reply was lost (not sent again: no id)
    int64_t cold_under_book_ = 0;  // ... that Redis took from the pool of a key whose book held shares

    int64_t refused_waiting_ = 0;  // lease: requests that waited for an ask in flight, in vain
    int64_t refused_replies_ = 0;  // replies outside the rule of sync_reply.h: none may be
    std::string first_fault_;

  private:
    const Scenario& sc_;
    bool lease_;
    bool shares_ = false;
    Faults faults_;
    int64_t epoch_ = 0, guard_ = 0;
    rl::ShareBook book_;
    std::mt19937_64 loss_rng_{99};
    std::uniform_real_distribution<double> uniform_{0.0, 1.0};
    rl::ReplyBounds bounds_;
    std::vector<Host> hosts_;
    rl::State global_;
    std::vector<Message> msgs_;
    std::vector<int64_t> admitted_;
    std::priority_queue<Event, std::vector<Event>, std::greater<Event>> q_;
    uint64_t seq_ = 0;
};

// Zero overshoot: the admissions (sorted here) that one exact limiter of `p`, given them at
// their times, would refuse.
size_t beyond_one_limiter(const rl::Policy& p, std::vector<int64_t>& adm) {
    std::sort(adm.begin(), adm.end());
    rltest::Key one(p);
    size_t refused = 0;
    for (int64_t t : adm) refused += !one.allowed(t);
    return refused;
}

std::vector<Scenario> scenarios(uint64_t first_seed = 1) {
    std::vector<Scenario> out;
    struct Limit {
        int64_t requests, period, burst;
    };
    const Limit limits[] = {{100, kSec, 20}, {1000, kSec, 0}, {10, kSec, 4}};
    const int64_t intervals[][2] = {{10 * kMs, 1 * kMs}, {100 * kMs, 2 * kMs}, {1000 * kMs, 20 * kMs}};
    const rl::Algo algos[] = {rl::Algo::gcra, rl::Algo::token, rl::Algo::leaky, rl::Algo::fixed, rl::Algo::sliding};
    const Arrivals kinds[] = {Arrivals::poisson, Arrivals::bursts, Arrivals::hot_host, Arrivals::all_at_once};
    uint64_t seed = first_seed;
    for (rl::Algo a : algos) {
        for (int hosts : {2, 4, 8}) {
            for (const auto& iv : intervals) {
                for (Arrivals k : kinds) {
                  for (int rep = 0; rep < 3; rep++) {
                    const Limit& l = limits[seed % 3];
                    Scenario sc;
                    sc.p = rltest::policy(a, l.requests, l.period, rl::is_bucket(a) ? l.burst : 0);
                    sc.hosts = hosts;
                    sc.T = iv[0];
                    sc.L = iv[1];
                    sc.arrivals = k;
                    sc.load = seed % 2 ? 3.0 : 1.2;
                    sc.duration = std::max<int64_t>(8 * sc.T, 3 * l.period);
                    sc.seed = seed++;
                    out.push_back(sc);
                  }
                }
            }
        }
    }
    return out;
}

TEST(SyncSim, OptimisticWithinItsBound) {
    double worst_ratio[2] = {0, 0};  // buckets, windows
    std::string worst[2];
    int exceeded = 0, runs = 0;
    for (const Scenario& sc : scenarios()) {
        auto arrivals = make_arrivals(sc);
        Sim sim(sc, false);
        std::vector<int64_t> adm = sim.run(arrivals);
        EXPECT_EQ(sim.refused_replies_, 0) << sc.name() << ": a genuine reply refused (" << sim.first_fault_ << ")";
        double over = overshoot(sc.p, adm), bound = optimistic_bound(sc);
        runs++;
        if (over > bound) {
            exceeded++;
            ADD_FAILURE() << sc.name() << ": overshoot " << over << " beyond the bound " << bound;
        }
        size_t f = rl::is_bucket(sc.p.algo) ? 0 : 1;
        if (over / bound > worst_ratio[f]) {
            worst_ratio[f] = over / bound;
            char buf[64];
            std::snprintf(buf, sizeof buf, ": %.1f of %.1f", over, bound);
            worst[f] = sc.name() + buf;
        }
    }
    std::printf("optimistic: %d runs, worst overshoot against the bound:\n  buckets %.0f%% (%s)\n  windows %.0f%% (%s)\n",
                runs, 100 * worst_ratio[0], worst[0].c_str(), 100 * worst_ratio[1], worst[1].c_str());
    EXPECT_EQ(exceeded, 0);
    EXPECT_GT(worst_ratio[0], 0.2) << "the scenarios never come near the bound: they test little";
    EXPECT_GT(worst_ratio[1], 0.2) << "the scenarios never come near the bound: they test little";
}

TEST(SyncSim, LeaseNeverOvershoots) {
    int runs = 0;
    double worst_under[4] = {0, 0, 0, 0}, sum_under[4] = {0, 0, 0, 0};
    int count[4] = {0, 0, 0, 0};
    std::string worst[4];
    int roomy_runs = 0;
    double roomy_sum = 0, roomy_worst = 0;
    for (const Scenario& sc : scenarios()) {
        auto arrivals = make_arrivals(sc);
        Sim sim(sc, true);
        std::vector<int64_t> adm = sim.run(arrivals);
        EXPECT_EQ(sim.refused_replies_, 0) << sc.name() << ": a genuine reply refused (" << sim.first_fault_ << ")";
        // Zero overshoot: one limiter, given the cluster's admissions at their times, allows each.
        size_t refused = beyond_one_limiter(sc.p, adm);
        ASSERT_EQ(refused, 0u) << sc.name() << ": " << refused << " of " << adm.size() << " admissions beyond one limiter";
        ASSERT_LE(overshoot(sc.p, adm), 0) << sc.name();
        int64_t ref = reference_admitted(sc.p, arrivals);
        double under = ref > 0 ? 1.0 - static_cast<double>(adm.size()) / static_cast<double>(ref) : 0;
        // What a lease can lose: per host and per give-back period (2 T), one stranded lease
        // (a grant never exceeds the capacity), and the requests that waited for an ask in flight.
        int64_t stranded = sc.hosts * sc.p.capacity() * (sc.duration / (2 * sc.T) + 1);
        int64_t shortfall = ref - static_cast<int64_t>(adm.size());
        EXPECT_LE(shortfall, stranded + sim.refused_waiting_) << sc.name() << ": stranded bound " << stranded
                                                              << ", refused while waiting " << sim.refused_waiting_;
        size_t k = static_cast<size_t>(sc.arrivals);
        // A grant drains while it travels: the lease wants a capacity of at least a round trip's rate.
        if (sc.p.capacity() * sc.p.period_us >= sc.p.requests * sc.L) {
            roomy_runs++;
            roomy_sum += under;
            roomy_worst = std::max(roomy_worst, under);
        }
        runs++;
        count[k]++;
        sum_under[k] += under;
        if (under > worst_under[k]) {
            worst_under[k] = under;
            worst[k] = sc.name() + ": " + std::to_string(adm.size()) + " of " + std::to_string(ref);
        }
    }
    std::printf("lease: %d runs, zero overshoot; under-admission against one limiter over the same arrivals:\n", runs);
    for (size_t k = 0; k < 4; k++) {
        std::printf("  %-12s mean %5.1f%%, worst %5.1f%% (%s)\n", arrivals_name(static_cast<Arrivals>(k)),
                    100 * sum_under[k] / count[k], 100 * worst_under[k], worst[k].c_str());
    }
    std::printf("  where burst + 1 >= rate x round trip (%d runs): mean %.1f%%, worst %.1f%%\n", roomy_runs,
                100 * roomy_sum / roomy_runs, 100 * roomy_worst);
}

// Bucket leases as shares (share.h): all the cluster's admissions, replayed through one exact
// limiter at their times, are allowed, with replies lost (and replayed with their call id) and
// hosts' clocks off Redis's by up to their guard; the under-admission is printed.
TEST(SyncSim, SharesNeverOvershoot) {
    int runs = 0;
    double sum_under[4] = {0, 0, 0, 0}, worst_under[4] = {0, 0, 0, 0};
    int count[4] = {0, 0, 0, 0};
    int64_t share_rejects = 0, lost = 0;
    int fast_runs = 0, roomy_runs = 0;
    double fast_sum = 0, fast_worst = 0, roomy_sum = 0, roomy_worst = 0;
    for (const Scenario& sc : scenarios()) {
        if (!rl::is_bucket(sc.p.algo)) continue;
        auto arrivals = make_arrivals(sc);
        Faults f;
        if (sc.seed % 3 == 0) f.loss = 0.2;
        if (sc.seed % 4 == 1) f.skew = sc.L / 2 + 500;
        Sim sim(sc, Mode::shares, f);
        std::vector<int64_t> adm = sim.run(arrivals);
        EXPECT_EQ(sim.refused_replies_, 0) << sc.name() << ": a genuine reply refused (" << sim.first_fault_ << ")";
        size_t refused = beyond_one_limiter(sc.p, adm);
        ASSERT_EQ(refused, 0u) << sc.name() << " loss " << f.loss << " skew " << f.skew << ": " << refused << " of "
                               << adm.size() << " admissions beyond one limiter";
        int64_t ref = reference_admitted(sc.p, arrivals);
        double under = ref > 0 ? 1.0 - static_cast<double>(adm.size()) / static_cast<double>(ref) : 0;
        size_t k = static_cast<size_t>(sc.arrivals);
        runs++;
        count[k]++;
        sum_under[k] += under;
        worst_under[k] = std::max(worst_under[k], under);
        share_rejects += sim.share_refused_;
        lost += sim.lost_;
        // Where the engine uses shares (the rate refills the bucket within an epoch, 2 T).
        if (static_cast<__int128>(sc.p.requests) * 2 * sc.T >= static_cast<__int128>(sc.p.capacity()) * sc.p.period_us) {
            fast_runs++;
            fast_sum += under;
            fast_worst = std::max(fast_worst, under);
            if (sc.p.capacity() >= 4 * sc.hosts) {  // ... with a burst of 4 units a host at least
                roomy_runs++;
                roomy_sum += under;
                roomy_worst = std::max(roomy_worst, under);
            }
        }
    }
    std::printf("shares: %d runs, zero overshoot (%lld replies lost); under-admission against one limiter:\n", runs,
                static_cast<long long>(lost));
    for (size_t k = 0; k < 4; k++) {
        std::printf("  %-12s mean %5.1f%%, worst %5.1f%%\n", arrivals_name(static_cast<Arrivals>(k)),
                    100 * sum_under[k] / count[k], 100 * worst_under[k]);
    }
    std::printf("  where r 2T >= C, as nginx shares (%d runs): mean %.1f%%, worst %.1f%%\n", fast_runs,
                100 * fast_sum / std::max(fast_runs, 1), 100 * fast_worst);
    std::printf("  ... and burst + 1 >= 4 hosts (%d runs): mean %.1f%%, worst %.1f%%\n", roomy_runs,
                100 * roomy_sum / std::max(roomy_runs, 1), 100 * roomy_worst);
    EXPECT_GT(lost, 100) << "replies were lost: the replay path ran";
    EXPECT_GT(share_rejects, 0) << "hosts rejected on their own share";
}

// Cold keys asked per request (Faults::cold: count asks, want = need, no share asked, nothing
// ahead until two requests come within an interval), mixed with hosts that hold leases and
// shares of the same key: still no admission beyond one limiter. A count ask on a key whose
// book holds other hosts' shares takes only from the pool. A count call whose reply is lost is
// not sent again (no id): Redis may have counted what its requests, refused, never got.
TEST(SyncSim, ColdKeysNeverOvershoot) {
    int64_t cold_asks = 0, under_book = 0, count_lost = 0;
    int runs = 0;
    for (const Scenario& sc : scenarios(500)) {
        if (sc.seed % 2 != 0) continue;
        auto arrivals = make_arrivals(sc);
        for (Mode mode : {Mode::lease, Mode::shares}) {
            if (mode == Mode::shares && !rl::is_bucket(sc.p.algo)) continue;
            Faults f;
            f.cold = true;
            if (mode == Mode::shares && sc.seed % 3 == 0) f.loss = 0.2;
            if (mode == Mode::shares && sc.seed % 4 == 1) f.skew = sc.L / 2 + 500;
            Sim sim(sc, mode, f);
            std::vector<int64_t> adm = sim.run(arrivals);
            const char* m = mode == Mode::lease ? "lease" : "shares";
            EXPECT_EQ(sim.refused_replies_, 0) << sc.name() << " " << m << ": a genuine reply refused (" << sim.first_fault_ << ")";
            size_t refused = beyond_one_limiter(sc.p, adm);
            ASSERT_EQ(refused, 0u) << sc.name() << " " << m << ": " << refused << " of " << adm.size()
                                   << " admissions beyond one limiter";
            cold_asks += sim.cold_asks_;
            under_book += sim.cold_under_book_;
            count_lost += sim.count_lost_;
            runs++;
        }
    }
    std::printf("cold keys: %d runs, zero overshoot; %lld count asks, %lld of them on a key whose book held shares, "
                "%lld count calls' replies lost\n", runs, static_cast<long long>(cold_asks),
                static_cast<long long>(under_book), static_cast<long long>(count_lost));
    EXPECT_GT(cold_asks, 1000) << "keys were cold";
    EXPECT_GT(under_book, 100) << "count asks met other hosts' shares";
    EXPECT_GT(count_lost, 50) << "count calls' replies were lost: given up, not replayed";
}

// Replies lost more often (3 in 10): a round's "more of the current epoch" moves units of the
// pool into the host's bucket; replayed after an interval (sent again with its id), its reply
// can land in the next epoch, whose book does not count them. Scenarios found by running
// SharesNeverOvershoot's grid from other first seeds (31000, 33100) with that loss.
TEST(SyncSim, SharesLateRepliesNeverOvershoot) {
    const uint64_t found[][2] = {{31000, 31134}, {33100, 33131}, {33100, 33358}};
    for (const auto& f : found) {
        for (const Scenario& sc : scenarios(f[0])) {
            if (sc.seed != f[1]) continue;
            auto arrivals = make_arrivals(sc);
            Faults faults;
            faults.loss = 0.3;
            Sim sim(sc, Mode::shares, faults);
            std::vector<int64_t> adm = sim.run(arrivals);
            size_t refused = beyond_one_limiter(sc.p, adm);
            EXPECT_EQ(refused, 0u) << "seed " << sc.seed << " " << sc.name() << ": " << refused << " of " << adm.size()
                                   << " admissions beyond one limiter";
        }
    }
}

// A host idle for two epochs gives its shares back with "the units its bucket held": read as of
// its last request (collect does not advance it), after its epochs ended and its bucket was
// emptied. Redis pours them into the pool: units that exist nowhere. Host 0 takes a share at
// +10 ms and stops; the key idles (the exact limiter fills up); host 1 drains it all just before
// host 0's give-back round; host 2 then draws the give-back's units from the pool.
TEST(SyncSim, SharesGiveBackOnlyUnitsHeld) {
    Scenario sc;
    sc.p = rltest::policy(rl::Algo::gcra, 10, kSec, 9);  // C = 10, r 2T = 20 >= C: shares
    sc.hosts = 3;
    sc.T = 1000 * kMs;
    sc.L = 2 * kMs;
    sc.arrivals = Arrivals::poisson;
    sc.load = 1;
    sc.duration = 8 * kSec;
    sc.seed = 5;
    std::mt19937_64 rng(sc.seed * 7 + 1);  // the hosts' round phases, as Sim::run draws them
    const int64_t phase0 = static_cast<int64_t>(rng() % static_cast<uint64_t>(sc.T));
    int64_t give_back = kStart + phase0;
    while (give_back - (kStart + 10 * kMs) < 4 * sc.T) give_back += sc.T;  // idle two epochs (2 Q)
    std::vector<std::vector<int64_t>> arrivals(3);
    arrivals[0] = {kStart + 10 * kMs};
    for (int k = 0; k < 15; k++) arrivals[1].push_back(give_back - 1 * kMs);
    for (int k = 0; k < 15; k++) arrivals[2].push_back(give_back + 3 * kMs);
    Sim sim(sc, Mode::shares);
    std::vector<int64_t> adm = sim.run(arrivals);
    size_t refused = beyond_one_limiter(sc.p, adm);
    EXPECT_EQ(refused, 0u) << refused << " of " << adm.size() << " admissions beyond one limiter (give-back round at +"
                           << (give_back - kStart) / kMs << " ms)";
}

// A host whose clock is off Redis's by more than its guard can overshoot: the guard is what
// keeps the shares of two epochs apart (checked so that the test above can fail).
TEST(SyncSim, SharesNeedTheirGuard) {
    int overshot = 0, runs = 0;
    for (uint64_t seed = 1; seed <= 6; seed++) {
      for (int64_t requests : {1000, 10000}) {
        for (int64_t burst : {0, 10}) {
        Scenario sc;
        sc.p = rltest::policy(rl::Algo::gcra, requests, kSec, burst);
        sc.hosts = 2;
        sc.T = 10 * kMs;
        sc.L = 1 * kMs;
        sc.arrivals = Arrivals::poisson;
        sc.load = 3.0;
        sc.duration = 2 * kSec;
        sc.seed = seed;
        // Demand moves from host to host every epoch (2 T): each host asks its next share early in
        // an epoch on the demand of the one before, so its share is large exactly in the epochs
        // it is busy, and at every boundary a clock ahead uses the next epoch's share early while
        // one behind uses the last epoch's late.
        std::vector<std::vector<int64_t>> arrivals(static_cast<size_t>(sc.hosts));
        std::mt19937_64 rng(seed);
        std::exponential_distribution<double> gap(3.0 * static_cast<double>(requests) / kSec);
        for (double t = kStart; t < kStart + sc.duration; t += gap(rng)) {
            auto at = static_cast<int64_t>(t);
            arrivals[static_cast<size_t>(((at - kStart) / (2 * sc.T)) % sc.hosts)].push_back(at);
        }
        for (int64_t guard : {int64_t{0}, int64_t{-1}}) {
            Faults f;
            f.skew = 4 * kMs;
            f.guard = guard;  // none, then the engine's (skew + 1 ms)
            Sim sim(sc, Mode::shares, f);
            std::vector<int64_t> adm = sim.run(arrivals);
            size_t over = beyond_one_limiter(sc.p, adm);
            if (guard == 0) {
                overshot += over > 0;
                runs++;
            } else {
                EXPECT_EQ(over, 0u) << "seed " << seed << ": with its guard";
            }
        }
        }
      }
    }
    std::printf("shares with clocks off by 4 ms and no guard: %d of %d runs overshoot\n", overshot, runs);
    EXPECT_GT(overshot, 0) << "clocks off by more than the guard never overshoot: the test above tests little";
}

// The table of the README: one hot key, today's count leases beside the shares, under-admission
// against one exact limiter over the same arrivals, and script calls per 1000 requests.
TEST(SyncSim, SharesTable) {
    struct Row {
        const char* name;
        int64_t requests, burst;
        double per_host;  // offered requests per second per host (0: load x the rate)
    };
    const Row rows[] = {{"rate=100000000r/s burst=1000000", 100000000, 1000000, 50000},
                        {"rate=100000r/s burst=1000", 100000, 1000, 0},
                        {"rate=1000r/s burst=100", 1000, 100, 0}};
    const Arrivals kinds[] = {Arrivals::poisson, Arrivals::hot_host, Arrivals::bursts};
    std::printf("| limit | arrivals | hosts | lease today: under-admission, calls/1000 | shares: under-admission, calls/1000 |\n");
    std::printf("| --- | --- | --- | --- | --- |\n");
    for (const Row& r : rows) {
        for (Arrivals k : kinds) {
            for (int hosts : {1, 4}) {
                if (hosts == 1 && k != Arrivals::poisson) continue;
                Scenario sc;
                sc.p = rltest::policy(rl::Algo::gcra, r.requests, kSec, r.burst);
                sc.hosts = hosts;
                sc.T = 100 * kMs;
                sc.L = 1 * kMs;
                sc.arrivals = k;
                sc.load = r.per_host > 0 ? r.per_host * hosts / static_cast<double>(r.requests) : 1.5;
                sc.duration = 2 * kSec;
                sc.seed = 7;
                auto arrivals = make_arrivals(sc);
                int64_t offered = 0;
                for (const auto& v : arrivals) offered += static_cast<int64_t>(v.size());
                int64_t ref = reference_admitted(sc.p, arrivals);
                double under[2], calls[2];
                for (int m = 0; m < 2; m++) {
                    Sim sim(sc, m == 0 ? Mode::lease : Mode::shares);
                    std::vector<int64_t> adm = sim.run(arrivals);
                    size_t over = beyond_one_limiter(sc.p, adm);
                    EXPECT_EQ(over, 0u) << r.name << " " << arrivals_name(k) << (m ? " shares" : " lease");
                    under[m] = 100.0 * (1.0 - static_cast<double>(adm.size()) / static_cast<double>(ref));
                    calls[m] = 1000.0 * static_cast<double>(sim.calls_) / static_cast<double>(offered);
                }
                std::printf("| %s | %s x%.2f | %d | %.1f%%, %.2f | %.1f%%, %.2f |\n", r.name, arrivals_name(k), sc.load,
                            hosts, under[0], calls[0], under[1], calls[1]);
            }
        }
    }
}

}  // namespace
