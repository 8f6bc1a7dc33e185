// TLS for the connections of a ratelimit_redis, through nginx's own OpenSSL layer (ngx_ssl_*):
// the context made when the configuration is read (files loaded, nothing on the network), the
// start of a connection's handshake, the checks of the server's certificate once it is done,
// and the session kept for the next connection. The handshake's events are the transport's
// (conn.cpp).
#pragma once

#include "ngx/redis/conn.h"

struct rl_tls_conf_t {
    bool verify;
    ngx_str_t trusted_certificate;  // empty: the system's trusted store
    ngx_str_t certificate;          // the client's, for servers that require one
    ngx_str_t certificate_key;
};

// Whether this nginx was built with OpenSSL.
bool rl_tls_available() noexcept;
// The ngx_ssl_t for these settings, freed with the configuration's pool; nullptr after an error
// at `nginx -t` (OpenSSL's reason logged by nginx).
void* rl_tls_create(ngx_conf_t* cf, const rl_tls_conf_t& conf) noexcept;
// Starts TLS on conn->c, connected: SNI, the session of the last connection, the handshake.
// NGX_OK: done (check it); NGX_AGAIN: `handler` runs when it ends (on the connection's events,
// whose timers bound it); NGX_ERROR: failed (conn->last_error says why).
ngx_int_t rl_tls_connect(rl_conn_t* conn, ngx_connection_handler_pt handler) noexcept;
// Whether the handshake completed; whether it resumed the last session.
bool rl_tls_handshaked(ngx_connection_t* c) noexcept;
bool rl_tls_reused(ngx_connection_t* c) noexcept;
// Once the handshake is done: whether the certificate is trusted and names conn->tls_name
// (unless verification is off). False with the reason in `why`.
bool rl_tls_check(rl_conn_t* conn, char* why, size_t size) noexcept;
// After a read or a write failed: the alert the server sent, if one is still waiting unread
// (OpenSSL's name for it, made safe for the log), into `out`; its length, 0 if none.
size_t rl_tls_alert(ngx_connection_t* c, char* out, size_t cap) noexcept;
// Frees the TLS state of a connection about to be closed, without waiting for the peer.
void rl_tls_close(ngx_connection_t* c) noexcept;
// Forgets the kept session (the server changed, or the connection goes away).
void rl_tls_forget(rl_conn_t* conn) noexcept;
