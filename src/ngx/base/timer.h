// The worker's background timers (the Sentinel's and the resolver's asks): rearmed while the
// worker runs, and brought forward when something failed, but not more often than a gap.
#pragma once

#include "ngx/ngx_include.h"

inline bool rl_worker_stopping() { return ngx_exiting || ngx_quit || ngx_terminate; }

// Fires `ev` once `min_gap` ms have passed since `last` (at once if they have).
inline void rl_timer_soon(ngx_event_t* ev, ngx_msec_t last, ngx_msec_t min_gap) {
    auto since = static_cast<ngx_msec_int_t>(ngx_current_msec - last);
    ngx_msec_t wait = since >= static_cast<ngx_msec_int_t>(min_gap) ? 1 : min_gap - static_cast<ngx_msec_t>(since);
    if (ev->timer_set) ngx_del_timer(ev);
    ngx_add_timer(ev, wait);
}
