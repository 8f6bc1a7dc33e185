// One list and one timer per distinct timeout in a worker (a few: the zones' timeout= values);
// past kLists of them, a request's deadline is its own timer, as before.
#include "ngx/engine/deadline.h"

namespace {

constexpr ngx_uint_t kLists = 8;

struct rl_deadlines_t {
    ngx_msec_t timeout;
    ngx_queue_t waiting;  // rl_ctx_t::deadline, oldest first: deadlines in order (one timeout)
    ngx_event_t timer;    // the first's deadline, while any waits
};

rl_deadlines_t lists[kLists];  // a worker's own (process memory)
ngx_uint_t nlists;

// Times out every request whose deadline has come, then waits for the next one's.
void on_deadline(ngx_event_t* ev) noexcept {
    auto* list = static_cast<rl_deadlines_t*>(ev->data);
    while (!ngx_queue_empty(&list->waiting)) {
        rl_ctx_t* ctx = ngx_queue_data(ngx_queue_head(&list->waiting), rl_ctx_t, deadline);
        auto left = static_cast<ngx_msec_int_t>(ctx->deadline_at - ngx_current_msec);
        if (left > 0) {
            // Exactly the first's deadline: nginx keeps a set timer's key if the new one is
            // within 300 ms of it (a handler above may have set it, for a later deadline).
            if (list->timer.timer_set) ngx_del_timer(&list->timer);
            ngx_add_timer(&list->timer, static_cast<ngx_msec_t>(left));
            return;
        }
        rl_deadline_drop(ctx);
        ctx->timer.timedout = 1;
        ctx->timer.handler(&ctx->timer);  // may end other requests: the list is read again
    }
}

rl_deadlines_t* list_for(ngx_msec_t timeout) {
    for (ngx_uint_t i = 0; i < nlists; i++) {
        if (lists[i].timeout == timeout) return &lists[i];
    }
    if (nlists == kLists) return nullptr;
    rl_deadlines_t* list = &lists[nlists++];
    list->timeout = timeout;
    ngx_queue_init(&list->waiting);
    list->timer.handler = on_deadline;
    list->timer.data = list;
    // Not cancelable, as a request's own timer: a worker shutting down waits for its requests.
    return list;
}

}  // namespace

void rl_deadline_set(rl_ctx_t* ctx, ngx_msec_t timeout) noexcept {
    rl_deadline_drop(ctx);
    rl_deadlines_t* list = list_for(timeout);
    if (list == nullptr) {
        ngx_add_timer(&ctx->timer, timeout);
        return;
    }
    ctx->deadline_at = ngx_current_msec + timeout;
    ctx->deadline_list = list;
    ngx_queue_insert_tail(&list->waiting, &ctx->deadline);
    if (!list->timer.timer_set) {
        list->timer.log = ngx_cycle->log;  // this cycle's (the lists outlive a reload without a master)
        ngx_add_timer(&list->timer, timeout);
    }
}

bool rl_deadline_pending(const rl_ctx_t* ctx) noexcept { return ctx->deadline_list != nullptr || ctx->timer.timer_set; }

void rl_deadline_drop(rl_ctx_t* ctx) noexcept {
    if (ctx->timer.timer_set) {
        ngx_del_timer(&ctx->timer);
    }
    auto* list = static_cast<rl_deadlines_t*>(ctx->deadline_list);
    if (list == nullptr) return;
    ngx_queue_remove(&ctx->deadline);
    ctx->deadline_list = nullptr;
    // The last one gone: no timer keeps the worker (a shutting down one exits at once).
    if (ngx_queue_empty(&list->waiting) && list->timer.timer_set) {
        ngx_del_timer(&list->timer);
    }
}
