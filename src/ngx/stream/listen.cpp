// Each server's listens, as nginx's stream core keeps them while the configuration is read:
// its ports (1.25.5+: with each address's servers and default server) or its listen list.
#include "ngx/stream/listen.h"

#include "ngx/stream/conf.h"

#include "core/algo/delay.h"

namespace {

struct listens_t {
    bool udp;          // some listen is udp
    bool tcp;          // some listen is tcp
    bool by_default;   // it is the default server of some address (where at=accept decides)
};

listens_t listens_of(ngx_stream_core_main_conf_t* cmcf, ngx_stream_core_srv_conf_t* cscf) {
    listens_t l{};
#if (nginx_version >= 1025005)
    if (cmcf->ports == nullptr) return l;
    auto* ports = static_cast<ngx_stream_conf_port_t*>(cmcf->ports->elts);
    for (ngx_uint_t p = 0; p < cmcf->ports->nelts; p++) {
        auto* addrs = static_cast<ngx_stream_conf_addr_t*>(ports[p].addrs.elts);
        for (ngx_uint_t a = 0; a < ports[p].addrs.nelts; a++) {
            auto** servers = static_cast<ngx_stream_core_srv_conf_t**>(addrs[a].servers.elts);
            bool here = addrs[a].default_server == cscf;
            for (ngx_uint_t s = 0; s < addrs[a].servers.nelts && !here; s++) here = servers[s] == cscf;
            if (!here) continue;
            l.udp = l.udp || ports[p].type == SOCK_DGRAM;
            l.tcp = l.tcp || ports[p].type != SOCK_DGRAM;
            l.by_default = l.by_default || addrs[a].default_server == cscf;
        }
    }
#else
    // Before 1.25.5 a server is the only one on each of its listens.
    auto* ls = static_cast<ngx_stream_listen_t*>(cmcf->listen.elts);
    for (ngx_uint_t i = 0; i < cmcf->listen.nelts; i++) {
        if (ls[i].ctx != cscf->ctx) continue;
        l.udp = l.udp || ls[i].type == SOCK_DGRAM;
        l.tcp = l.tcp || ls[i].type != SOCK_DGRAM;
        l.by_default = true;
    }
#endif
    return l;
}

// The first applied line of a stage that `bad` finds wrong, or nullptr.
template <typename Bad>
const rl_applied_t* find_line(const rl_scope_t& scope, Bad bad) {
    if (scope.applied == nullptr) return nullptr;
    auto* applied = static_cast<rl_applied_t*>(scope.applied->elts);
    for (ngx_uint_t i = 0; i < scope.applied->nelts; i++) {
        if (bad(applied[i])) return &applied[i];
    }
    return nullptr;
}

bool check_server(ngx_conf_t* cf, ngx_stream_core_srv_conf_t* cscf, const listens_t& l) {
    auto* scf = static_cast<rl_stream_srv_conf_t*>(cscf->ctx->srv_conf[ngx_stream_ratelimit_module.ctx_index]);
    auto any = [](const rl_applied_t&) { return true; };
    if (!l.udp) {
        if (const rl_applied_t* a = find_line(scf->scope[RL_AT_DATAGRAM], any)) {
            rl_conf_error_at(cf, "ratelimit", a->limit->file, a->limit->line, "at=datagram needs a server that listens "
                             "udp (zone \"%V\")", &a->zone->name);
            return false;
        }
    }
    if (l.udp) {
        auto delays = [](const rl_applied_t& a) { return a.policy.delay != rl::kNoDelay; };
        for (ngx_uint_t at = RL_AT_ACCEPT; at <= RL_AT_PREREAD; at++) {
            if (const rl_applied_t* a = find_line(scf->scope[at], delays)) {
                rl_conf_error_at(cf, "ratelimit", a->limit->file, a->limit->line, "\"delay\" cannot be used where a "
                                 "server listens udp (zone \"%V\"): a datagram cannot wait", &a->zone->name);
                return false;
            }
        }
    }
    if (!l.by_default && (l.udp || l.tcp)) {
        if (const rl_applied_t* a = find_line(scf->scope[RL_AT_ACCEPT], any)) {
            ngx_log_error(NGX_LOG_WARN, cf->log, 0, "at=accept of zone \"%V\" in %s:%ui never applies: its server is "
                          "no address's default server (at=accept decides before the server is selected by name; use "
                          "at=preread)", &a->zone->name, a->limit->file, a->limit->line);
        }
    }
    return true;
}

}  // namespace

bool rl_stream_check_listens(ngx_conf_t* cf) noexcept {
    auto* cmcf = static_cast<ngx_stream_core_main_conf_t*>(ngx_stream_conf_get_module_main_conf(cf, ngx_stream_core_module));
    auto** servers = static_cast<ngx_stream_core_srv_conf_t**>(cmcf->servers.elts);
    for (ngx_uint_t i = 0; i < cmcf->servers.nelts; i++) {
        listens_t l = listens_of(cmcf, servers[i]);
        auto* scf = static_cast<rl_stream_srv_conf_t*>(servers[i]->ctx->srv_conf[ngx_stream_ratelimit_module.ctx_index]);
        scf->udp = l.udp;
        if (!check_server(cf, servers[i], l)) return false;
    }
    return true;
}
