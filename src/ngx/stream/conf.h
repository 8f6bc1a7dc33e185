// The stream front end's configuration (module.cpp): the engine's in stream{}, and a server's
// limits at each stage of a connection or UDP session.
#pragma once

#include "ngx/limits/conf.h"
#include "ngx/limits/limit.h"
#include "ngx/stream/stream.h"

// The stages a `ratelimit` line applies at (at=, rl_limit_t::at).
enum rl_stage_e : uint8_t {
    RL_AT_ACCEPT = 0,  // a new connection or session, before anything is read (pre-access)
    RL_AT_PREREAD,     // before the content handler: after ssl_preread, js_preread or a TLS handshake
    RL_AT_DATAGRAM,    // each client datagram of an admitted UDP session (a stream filter)
    RL_AT_N,
};

enum {
    RL_REJECT_CLOSE = 0,  // closed without data
    RL_REJECT_RESET,      // RST (SO_LINGER 0): no TIME_WAIT piles up
};

struct rl_stream_srv_conf_t {
    rl_scope_t scope[RL_AT_N];  // a stage each; the directives' settings are read into scope[0]
    ngx_uint_t status;          // ratelimit_status: the session's $status when rejected
    ngx_uint_t reject;          // ratelimit_reject
    ngx_stream_content_handler_pt content;  // the server's own content handler, wrapped by preread limits
    bool udp;                   // some listen of the server is udp (known at postconfiguration)
};

struct rl_stream_main_conf_t {
    rl_engine_conf_t engine;  // the zones and ratelimit_redis of stream{}
};

// The front end's values: a complex value compiled (rl_value_t is an ngx_stream_complex_value_t).
rl_value_t* rl_stream_compile(ngx_conf_t* cf, ngx_str_t* text) noexcept;
inline ngx_stream_complex_value_t* rl_stream_cv(const rl_value_t* v) {
    return reinterpret_cast<ngx_stream_complex_value_t*>(const_cast<rl_value_t*>(v));
}
