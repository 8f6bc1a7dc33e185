// Sliding window counter: a = when the last request counted was admitted (states written
// before kept its window's start: the same window), b = requests counted in the window before
// a's, c = in a's window. Windows are found from a under the policy's period, so the counts
// also stand under another period (a tier change), where they may overcount, never reset.
// The estimate of the trailing period is
//   prev * (period - elapsed) / period + cur
// with the weight (period - elapsed) / period taken in steps of 1 / weight_scale (exact when
// weight_scale == period). Everything is compared multiplied by weight_scale: no fractions.
// A calendar policy (calendar.h) takes its windows from p.win: the previous window is the
// previous calendar window, weighed by (end - now) / (end - start) of the current one (so its
// own length does not matter), in steps of 1 / weight_scale.
#include "core/algo/decide.h"
#include "core/algo/exact_math.h"

namespace rl {

namespace {

// floor((P - e) * Q / P): the previous window's weight at `elapsed`, in 1/Q, in a window of
// length `period` (p.period_us, or a calendar window's).
int64_t weight_at(const Policy& p, int64_t period, int64_t elapsed) {
    int64_t left = period - elapsed;
    if (p.weight_scale == period) return left;
    return left * p.weight_scale / period;
}

// The first elapsed time in [from, period) at which prev * weight + (cur + cost) * Q fits
// requests * Q, or -1 if none does in this window.
int64_t first_fit(const Policy& p, int64_t period, int64_t prev, int64_t cur, int64_t cost, int64_t from) {
    int64_t room = (p.requests - cur - cost) * p.weight_scale;  // what prev * weight may use
    if (room < 0) return -1;
    if (prev == 0) return from;
    int64_t wmax = room / prev;  // the largest weight that fits
    if (wmax >= p.weight_scale) return from;
    int64_t at;
    if (p.weight_scale == period) {
        at = period - wmax;  // left <= wmax
    } else {
        // floor(left * Q / P) <= wmax  <=>  left < (wmax + 1) * P / Q
        at = period - ceil_div((wmax + 1) * period, p.weight_scale) + 1;
    }
    if (at < from) at = from;
    return at < period ? at : -1;
}

}  // namespace

Decision decide_sliding(const State& s, const Policy& p, int64_t now, int64_t cost) {
    Decision d;
    d.limit = p.requests;
    const bool cal = p.calendar != Calendar::none;
    CalendarWindow w;
    if (cal && !calendar_now(s, p, now, w, d)) return d;
    // This window's length and the next one's.
    const int64_t period = cal ? w.end - w.start : p.period_us;
    const int64_t following = cal ? w.next - w.end : p.period_us;
    int64_t start = cal ? w.start : window_start(now, period);
    int64_t prev = s.b < p.requests ? s.b : p.requests;
    int64_t cur = s.c < p.requests ? s.c : p.requests;
    int64_t back = 0;  // how far the clock went back behind the stored window
    int64_t last = 0;  // the latest admission the counts hold, when still in this window
    if (cal) {
        if (s.a >= w.start) {
            // This window, or a later one (the clock went back): the counts stand as this
            // window's, the previous one weighed from now (overcounting, never resetting).
            last = s.a;
        } else if (s.a >= w.prev) {
            prev = cur;
            cur = 0;
        } else {
            prev = cur = 0;
        }
    } else {
        const int64_t stored = window_start(s.a, period);
        if (start <= stored) {
            // The same window, or the clock went back: count from the stored window's start,
            // where the previous window still weighs its most.
            if (now < stored) {
                back = stored - now;
                now = stored;
            }
            start = stored;
            last = s.a;
        } else if (start == stored + period) {
            prev = cur;
            cur = 0;
        } else {
            prev = cur = 0;
        }
    }
    int64_t elapsed = now - start;
    int64_t q = p.weight_scale;
    int64_t weighted = prev * weight_at(p, period, elapsed);

    if (cost == 0) {
        d.allowed = true;
    } else if (cost > p.requests) {
        d.retry_after_us = kNever;
    } else if (weighted + (cur + cost) * q <= p.requests * q) {
        d.allowed = true;
    } else {
        int64_t at = first_fit(p, period, prev, cur, cost, elapsed);
        if (at >= 0) {
            d.retry_after_us = at - elapsed;
        } else {
            at = first_fit(p, following, cur, 0, cost, 0);  // the next window: cur becomes prev
            d.retry_after_us = period - elapsed + (at >= 0 ? at : following);
        }
    }
    int64_t after = d.allowed ? cur + cost : cur;
    int64_t left = p.requests * q - weighted - after * q;
    d.remaining = left > 0 ? left / q : 0;
    d.reset_us = after > 0 ? period - elapsed + following : (prev > 0 ? period - elapsed : 0);
    if (d.reset_us > 0) d.reset_us += back;
    if (!d.allowed && d.retry_after_us != kNever) d.retry_after_us += back;
    if (d.allowed && cost > 0) {
        d.next.a = now > last ? now : last;
        d.next.b = prev;
        d.next.c = after;
    } else {
        d.next = s;
    }
    return d;
}

}  // namespace rl
