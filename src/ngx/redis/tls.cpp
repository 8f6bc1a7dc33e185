// TLS through nginx's OpenSSL layer, as proxy_ssl_* does it: verification is asked of
// OpenSSL and its result read once the handshake is done, so a bad certificate is reported
// with its reason rather than as a failed handshake.
#include "ngx/redis/tls.h"

#include "core/text/log_text.h"

#include <cstdio>

#if (NGX_SSL)

namespace {

constexpr ngx_int_t kVerifyDepth = 4;

bool is_address(const ngx_str_t& name) {
    u_char buf[NGX_SOCKADDR_STRLEN];
    if (name.len == 0 || name.len >= sizeof(buf)) return false;
    ngx_memcpy(buf, name.data, name.len);
    buf[name.len] = '\0';
    unsigned char bin[16];
    return inet_pton(AF_INET, reinterpret_cast<char*>(buf), bin) == 1 ||
           inet_pton(AF_INET6, reinterpret_cast<char*>(buf), bin) == 1;
}

void save_session(ngx_connection_t* c) {
    auto* conn = static_cast<rl_conn_t*>(c->data);
    ngx_ssl_session_t* session = ngx_ssl_get_session(c);
    if (session == nullptr) return;
    rl_tls_forget(conn);
    conn->tls_session = session;
}

void free_ctx(void* data) { ngx_ssl_cleanup_ctx(data); }

// What a certificate names (its DNS and IP subject alternative names, else its common name),
// as the log may show it: the server's bytes made safe, "..." past `cap`. Its length.
size_t cert_names(X509* cert, char* out, size_t cap) {
    size_t o = 0;
    auto add = [&](const char* kind, const void* p, size_t n) {
        size_t k = ngx_strlen(kind);
        if (o + k + 2 + 4 > cap) return;
        if (o > 0) {
            out[o++] = ',';
            out[o++] = ' ';
        }
        ngx_memcpy(out + o, kind, k);
        o += k;
        o += rl::log_text(p, n, out + o, cap - o);
    };
    auto* sans = static_cast<GENERAL_NAMES*>(X509_get_ext_d2i(cert, NID_subject_alt_name, nullptr, nullptr));
    for (int i = 0; sans != nullptr && i < sk_GENERAL_NAME_num(sans); i++) {
        const GENERAL_NAME* g = sk_GENERAL_NAME_value(sans, i);
        if (g->type == GEN_DNS) {
            add("DNS:", ASN1_STRING_get0_data(g->d.dNSName), static_cast<size_t>(ASN1_STRING_length(g->d.dNSName)));
        } else if (g->type == GEN_IPADD) {
            int len = ASN1_STRING_length(g->d.iPAddress);
            char ip[INET6_ADDRSTRLEN] = "";
            if (len == 4 || len == 16) {
                inet_ntop(len == 4 ? AF_INET : AF_INET6, ASN1_STRING_get0_data(g->d.iPAddress), ip, sizeof(ip));
            }
            add("IP:", ip, ngx_strlen(ip));
        }
    }
    bool had_sans = sans != nullptr;
    GENERAL_NAMES_free(sans);
    if (had_sans) return o;
    X509_NAME* subject = X509_get_subject_name(cert);
    int at = subject != nullptr ? X509_NAME_get_index_by_NID(subject, NID_commonName, -1) : -1;
    if (at >= 0) {
        const ASN1_STRING* cn = X509_NAME_ENTRY_get_data(X509_NAME_get_entry(subject, at));
        add("CN=", ASN1_STRING_get0_data(cn), static_cast<size_t>(ASN1_STRING_length(cn)));
    }
    return o;
}

}  // namespace

bool rl_tls_available() noexcept { return true; }

void* rl_tls_create(ngx_conf_t* cf, const rl_tls_conf_t& conf) noexcept {
    auto* ssl = static_cast<ngx_ssl_t*>(ngx_pcalloc(cf->pool, sizeof(ngx_ssl_t)));
    if (ssl == nullptr) return nullptr;
    ssl->log = cf->log;
    if (ngx_ssl_create(ssl, NGX_SSL_TLSv1_2 | NGX_SSL_TLSv1_3, nullptr) != NGX_OK) return nullptr;
    ngx_pool_cleanup_t* cln = ngx_pool_cleanup_add(cf->pool, 0);
    if (cln == nullptr) {
        ngx_ssl_cleanup_ctx(ssl);
        return nullptr;
    }
    cln->handler = free_ctx;
    cln->data = ssl;
    if (conf.certificate.len) {
        ngx_str_t cert = conf.certificate;
        ngx_str_t key = conf.certificate_key;
        if (ngx_ssl_certificate(cf, ssl, &cert, &key, nullptr) != NGX_OK) return nullptr;
    }
    if (conf.verify) {
        ngx_str_t trusted = conf.trusted_certificate;
        if (ngx_ssl_trusted_certificate(cf, ssl, &trusted, kVerifyDepth) != NGX_OK) return nullptr;
        if (trusted.len == 0 && SSL_CTX_set_default_verify_paths(ssl->ctx) != 1) {
            ngx_ssl_error(NGX_LOG_EMERG, cf->log, 0, const_cast<char*>("SSL_CTX_set_default_verify_paths() failed"));
            return nullptr;
        }
    }
    if (ngx_ssl_client_session_cache(cf, ssl, 1) != NGX_OK) return nullptr;
    return ssl;
}

ngx_int_t rl_tls_connect(rl_conn_t* conn, ngx_connection_handler_pt handler) noexcept {
    ngx_connection_t* c = conn->c;
    if (ngx_ssl_create_connection(static_cast<ngx_ssl_t*>(conn->shared->ssl), c, NGX_SSL_CLIENT) != NGX_OK) {
        return NGX_ERROR;
    }
    // SNI carries a host name, never an address (RFC 6066).
    if (conn->tls_name.len && !is_address(conn->tls_name)) {
        u_char name[256];
        if (conn->tls_name.len < sizeof(name)) {
            ngx_memcpy(name, conn->tls_name.data, conn->tls_name.len);
            name[conn->tls_name.len] = '\0';
            SSL_set_tlsext_host_name(c->ssl->connection, reinterpret_cast<char*>(name));
        }
    }
    if (conn->tls_session != nullptr &&
        ngx_ssl_set_session(c, static_cast<ngx_ssl_session_t*>(conn->tls_session)) != NGX_OK) {
        return NGX_ERROR;
    }
    c->ssl->save_session = save_session;
    c->ssl->handler = handler;
    return ngx_ssl_handshake(c);
}

bool rl_tls_handshaked(ngx_connection_t* c) noexcept { return c->ssl != nullptr && c->ssl->handshaked; }

bool rl_tls_reused(ngx_connection_t* c) noexcept {
    return c->ssl != nullptr && SSL_session_reused(c->ssl->connection);
}

bool rl_tls_check(rl_conn_t* conn, char* why, size_t size) noexcept {
    if (!conn->shared->ssl_verify) return true;
    SSL* ssl = conn->c->ssl->connection;
    long rc = SSL_get_verify_result(ssl);
    if (rc != X509_V_OK) {
        snprintf(why, size, "certificate verify failed: %s", X509_verify_cert_error_string(rc));
        return false;
    }
    const ngx_str_t& name = conn->tls_name;
    X509* cert = SSL_get_peer_certificate(ssl);
    bool match;
    if (is_address(name)) {
        u_char text[NGX_SOCKADDR_STRLEN];
        ngx_memcpy(text, name.data, name.len);
        text[name.len] = '\0';
        match = cert != nullptr && X509_check_ip_asc(cert, reinterpret_cast<char*>(text), 0) == 1;
    } else {
        ngx_str_t n = name;
        match = ngx_ssl_check_host(conn->c, &n) == NGX_OK;
    }
    if (!match) {
        // The name may be the one a cluster node announced, and the certificate's names are
        // the server's: both reach the log escaped.
        rl::LogText wanted(name.data, name.len);
        char names[rl::kLogTextCap];
        size_t n = cert != nullptr ? cert_names(cert, names, sizeof(names)) : 0;
        snprintf(why, size, "certificate does not match \"%.*s\" (it names %.*s)", static_cast<int>(wanted.len),
                 wanted.text, static_cast<int>(n), n > 0 ? names : "nothing");
    }
    if (cert != nullptr) X509_free(cert);
    return match;
}

size_t rl_tls_alert(ngx_connection_t* c, char* out, size_t cap) noexcept {
    if (c == nullptr || c->ssl == nullptr) return 0;
    // A write that met the reset the server sent after its alert: the alert is read now.
    u_char buf[512];
    ERR_clear_error();
    int n = SSL_read(c->ssl->connection, buf, sizeof(buf));
    unsigned long e = n > 0 ? 0 : ERR_peek_last_error();
    ERR_clear_error();
    const char* reason = e != 0 ? ERR_reason_error_string(e) : nullptr;
    if (reason == nullptr || ngx_strstr(reason, "alert") == nullptr) return 0;
    return rl::log_text(reason, ngx_strlen(reason), out, cap);
}

void rl_tls_close(ngx_connection_t* c) noexcept {
    if (c->ssl == nullptr) return;
    c->ssl->no_wait_shutdown = 1;
    c->ssl->no_send_shutdown = 1;
    ngx_ssl_shutdown(c);
}

void rl_tls_forget(rl_conn_t* conn) noexcept {
    if (conn->tls_session == nullptr) return;
    ngx_ssl_free_session(static_cast<ngx_ssl_session_t*>(conn->tls_session));
    conn->tls_session = nullptr;
}

#else

bool rl_tls_available() noexcept { return false; }
void* rl_tls_create(ngx_conf_t*, const rl_tls_conf_t&) noexcept { return nullptr; }
ngx_int_t rl_tls_connect(rl_conn_t*, ngx_connection_handler_pt) noexcept { return NGX_ERROR; }
bool rl_tls_handshaked(ngx_connection_t*) noexcept { return false; }
bool rl_tls_reused(ngx_connection_t*) noexcept { return false; }
bool rl_tls_check(rl_conn_t*, char*, size_t) noexcept { return false; }
size_t rl_tls_alert(ngx_connection_t*, char*, size_t) noexcept { return 0; }
void rl_tls_close(ngx_connection_t*) noexcept {}
void rl_tls_forget(rl_conn_t*) noexcept {}

#endif
