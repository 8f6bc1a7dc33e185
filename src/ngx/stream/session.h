// What the stream front end keeps for a connection or UDP session (session.cpp): a context per
// stage its servers limit it at, its $ratelimit_status, what it dropped.
#pragma once

#include "ngx/engine/ctx.h"
#include "ngx/stream/conf.h"

struct rl_stream_session_t {
    ngx_stream_session_t* s;
    rl_ctx_t* ctx[RL_AT_N];     // made when its stage first applies
    rl_status_e status;         // $ratelimit_status: the accept stage's verdict, then preread's
    uint64_t dropped;           // $ratelimit_dropped: its datagrams dropped over a limit
    ngx_event_t delay;          // delay=: held before anything is read (accept), before the content (preread)
};

// The stream front end's part of each stage's context (rl_ctx_front).
struct rl_stream_ctx_t {
    rl_stream_session_t* session;
    rl_stage_e at;
    ngx_int_t verdict;                     // NGX_DECLINED, or the status the session ends with
    bool delaying;                         // admitted with a delay (accept, TCP)
    void (*resume)(ngx_stream_session_t*); // where the session goes on after a wait (its stage's)
};

inline rl_stream_ctx_t* rl_stream(rl_ctx_t* ctx) { return static_cast<rl_stream_ctx_t*>(rl_ctx_front(ctx)); }

// The stream front end (session.cpp): its values, log lines and resumptions.
extern const rl_frontend_t rl_stream_frontend;

// The session's part, made on first use (nullptr without memory, or when `create` is false).
rl_stream_session_t* rl_stream_session(ngx_stream_session_t* s, bool create) noexcept;
// The context of a stage where `scope` applies, whose waits end in `resume`; nullptr on error.
rl_ctx_t* rl_stream_ctx_create(rl_stream_session_t* ss, rl_stage_e at, const rl_scope_t* scope,
                               void (*resume)(ngx_stream_session_t*)) noexcept;
// A rejected TCP connection is reset rather than closed (ratelimit_reject reset).
void rl_stream_reset(ngx_stream_session_t* s) noexcept;
// Holds the session for the delay its stage's context was admitted with (delay=), on the
// session's timer; `done` goes on when it is over.
void rl_stream_delay(rl_stream_session_t* ss, rl_ctx_t* ctx, ngx_event_handler_pt done) noexcept;
