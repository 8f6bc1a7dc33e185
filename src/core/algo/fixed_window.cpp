// Fixed window: a = start of the window the count was taken in, b = requests counted, c = when
// the last of them was admitted (0 in states written before: a stands for it). At most
// `requests` per window. The count applies to every window that may hold one of its requests,
// up to the one that holds the last: under another period too (a tier change), 60 requests
// counted in this hour leave 40 of 100/15m in the quarter of the last of them, 100 in the next.
// A calendar policy (calendar.h) takes its windows from p.win instead: the same count, with
// [start, end) the calendar window that holds now.
#include "core/algo/decide.h"
#include "core/algo/exact_math.h"

namespace rl {

namespace {

// The end of the window that holds t >= now's window start: the calendar's when it knows it,
// else at most the longest window after t (a clock that went back more than a window).
int64_t calendar_end(const CalendarWindow& w, int64_t t) {
    if (t < w.end) return w.end;
    if (t < w.next) return w.next;
    return t + 1 + (w.next - w.end);
}

}  // namespace

Decision decide_fixed(const State& s, const Policy& p, int64_t now, int64_t cost) {
    Decision d;
    d.limit = p.requests;
    const bool cal = p.calendar != Calendar::none;
    CalendarWindow w;
    if (cal && !calendar_now(s, p, now, w, d)) return d;
    int64_t start = cal ? w.start : window_start(now, p.period_us);
    int64_t last = s.c > s.a ? s.c : s.a;
    int64_t count = 0;
    int64_t until = now;  // the count after this request applies up to this instant's window
    if (start <= last) {
        // The same window, or the clock went back: keep counting until the window of the last
        // request counted has passed, so that nothing is admitted twice.
        count = s.b < p.requests ? s.b : p.requests;
        if (last > now) until = last;
    }
    int64_t fresh_in = (cal ? calendar_end(w, until) : window_start(until, p.period_us) + p.period_us) - now;
    if (cost > p.requests) {
        d.retry_after_us = kNever;
    } else if (count + cost <= p.requests) {
        d.allowed = true;
    } else {
        d.retry_after_us = fresh_in;  // the next window is fresh
    }
    int64_t after = d.allowed ? count + cost : count;
    d.remaining = p.requests - after;
    d.reset_us = after > 0 ? fresh_in : 0;
    if (d.allowed && cost > 0) {
        d.next.a = start;
        d.next.b = after;
        d.next.c = until;
    } else {
        d.next = s;
    }
    return d;
}

}  // namespace rl
