// The stream front end's module: directives, configuration create/merge, the pre-access phase,
// the content handlers it wraps, its filter, and the engine's start and stop in each worker.
#include "ngx/engine/conf.h"
#include "ngx/engine/metrics_zone.h"
#include "ngx/engine/worker.h"
#include "ngx/limits/settings.h"
#include "ngx/limits/zone.h"
#include "ngx/redis/redis.h"
#include "ngx/stream/accept.h"
#include "ngx/stream/datagram.h"
#include "ngx/stream/listen.h"
#include "ngx/stream/preread.h"
#include "ngx/stream/session.h"
#include "ngx/stream/variables.h"

#include "core/algo/delay.h"

namespace {

char* zone_directive(ngx_conf_t* cf, ngx_command_t* cmd, void* conf) noexcept;
char* redis_directive(ngx_conf_t* cf, ngx_command_t* cmd, void* conf) noexcept;
char* limit_directive(ngx_conf_t* cf, ngx_command_t* cmd, void* conf) noexcept;
void* create_main_conf(ngx_conf_t* cf) noexcept;
void* create_srv_conf(ngx_conf_t* cf) noexcept;
char* merge_srv_conf(ngx_conf_t* cf, void* parent, void* child) noexcept;
ngx_int_t preconfiguration(ngx_conf_t* cf) noexcept;
ngx_int_t postconfiguration(ngx_conf_t* cf) noexcept;
ngx_int_t init_process(ngx_cycle_t* cycle) noexcept;
void exit_process(ngx_cycle_t* cycle) noexcept;

ngx_conf_enum_t reject_modes[] = {
    {ngx_string("close"), RL_REJECT_CLOSE},
    {ngx_string("reset"), RL_REJECT_RESET},
    {ngx_null_string, 0},
};

constexpr ngx_uint_t kLevels = NGX_STREAM_MAIN_CONF | NGX_STREAM_SRV_CONF;

ngx_command_t commands[] = {
    {ngx_string("ratelimit_zone"), NGX_STREAM_MAIN_CONF | NGX_CONF_2MORE, zone_directive, NGX_STREAM_MAIN_CONF_OFFSET,
     0, nullptr},
    {ngx_string("ratelimit_redis"), NGX_STREAM_MAIN_CONF | NGX_CONF_2MORE, redis_directive,
     NGX_STREAM_MAIN_CONF_OFFSET, 0, nullptr},
    {ngx_string("ratelimit"), kLevels | NGX_CONF_1MORE, limit_directive, NGX_STREAM_SRV_CONF_OFFSET, 0, nullptr},
    {ngx_string("ratelimit_algo"), kLevels | NGX_CONF_TAKE1, rl_set_algo, NGX_STREAM_SRV_CONF_OFFSET,
     offsetof(rl_stream_srv_conf_t, scope[0].algo), nullptr},
    {ngx_string("ratelimit_status"), kLevels | NGX_CONF_TAKE1, ngx_conf_set_num_slot, NGX_STREAM_SRV_CONF_OFFSET,
     offsetof(rl_stream_srv_conf_t, status), &rl_status_post},
    {ngx_string("ratelimit_dry_run"), kLevels | NGX_CONF_FLAG, ngx_conf_set_flag_slot, NGX_STREAM_SRV_CONF_OFFSET,
     offsetof(rl_stream_srv_conf_t, scope[0].dry_run), nullptr},
    {ngx_string("ratelimit_log_level"), kLevels | NGX_CONF_TAKE1, rl_set_enum, NGX_STREAM_SRV_CONF_OFFSET,
     offsetof(rl_stream_srv_conf_t, scope[0].log_level), &rl_log_levels},
    {ngx_string("ratelimit_on_error"), kLevels | NGX_CONF_TAKE1, rl_set_enum, NGX_STREAM_SRV_CONF_OFFSET,
     offsetof(rl_stream_srv_conf_t, scope[0].on_error), &rl_on_error_modes},
    {ngx_string("ratelimit_reject"), kLevels | NGX_CONF_TAKE1, rl_set_enum, NGX_STREAM_SRV_CONF_OFFSET,
     offsetof(rl_stream_srv_conf_t, reject), &reject_modes},
    ngx_null_command,
};

ngx_stream_module_t module_ctx = {
    preconfiguration, postconfiguration, create_main_conf, nullptr, create_srv_conf, merge_srv_conf,
};

char* zone_directive(ngx_conf_t* cf, ngx_command_t*, void* conf) noexcept {
    return rl_zone_parse(cf, &static_cast<rl_stream_main_conf_t*>(conf)->engine);
}

char* redis_directive(ngx_conf_t* cf, ngx_command_t*, void* conf) noexcept {
    return rl_redis_parse(cf, &static_cast<rl_stream_main_conf_t*>(conf)->engine.redis);
}

// at=accept|preread|datagram: the stage of a `ratelimit` line.
rl_param_e at_param(ngx_conf_t* cf, rl_limit_t* limit, ngx_str_t& arg) noexcept {
    ngx_str_t v;
    if (!rl_arg(arg, "at=", v)) return RL_PARAM_OTHER;
    if (rl_sv(v) == "accept") {
        limit->at = RL_AT_ACCEPT;
    } else if (rl_sv(v) == "preread") {
        limit->at = RL_AT_PREREAD;
    } else if (rl_sv(v) == "datagram") {
        limit->at = RL_AT_DATAGRAM;
    } else {
        return rl_param_error(cf, "invalid at \"%V\", it must be \"accept\", \"preread\" or \"datagram\"", &v);
    }
    return RL_PARAM_READ;
}

// ratelimit zone=NAME [at=accept|preread|datagram] ...: the engine's line, with the stage.
char* limit_directive(ngx_conf_t* cf, ngx_command_t*, void* conf) noexcept {
    auto* mcf = static_cast<rl_stream_main_conf_t*>(ngx_stream_conf_get_module_main_conf(cf, ngx_stream_ratelimit_module));
    return rl_limit_parse(cf, &mcf->engine, &static_cast<rl_stream_srv_conf_t*>(conf)->scope[0], at_param);
}

void* create_main_conf(ngx_conf_t* cf) noexcept {
    auto* mcf = static_cast<rl_stream_main_conf_t*>(ngx_pcalloc(cf->pool, sizeof(rl_stream_main_conf_t)));
    if (mcf == nullptr) return nullptr;
    return rl_engine_conf_init(cf, &mcf->engine, &rl_stream_frontend) ? mcf : nullptr;
}

void* create_srv_conf(ngx_conf_t* cf) noexcept {
    auto* conf = static_cast<rl_stream_srv_conf_t*>(ngx_pcalloc(cf->pool, sizeof(rl_stream_srv_conf_t)));
    if (conf == nullptr) return nullptr;
    for (ngx_uint_t at = 0; at < RL_AT_N; at++) {
        rl_scope_init(&conf->scope[at]);
        conf->scope[at].at = static_cast<uint8_t>(at);
        conf->scope[at].counts = at == RL_AT_DATAGRAM ? RL_COUNT_DATAGRAMS : RL_COUNT_REQUESTS;
    }
    conf->status = NGX_CONF_UNSET_UINT;
    conf->reject = NGX_CONF_UNSET_UINT;
    return conf;
}

// A datagram decides at once: its zones keep their state in shared memory (optimistic sync
// included); no Redis per request, lease, in-flight slot or delay.
bool check_datagram(ngx_conf_t* cf, const rl_scope_t* scope) {
    if (scope->applied == nullptr) return true;
    auto* applied = static_cast<rl_applied_t*>(scope->applied->elts);
    for (ngx_uint_t i = 0; i < scope->applied->nelts; i++) {
        const rl_applied_t& a = applied[i];
        const char* why = a.zone->concurrency                                         ? "an in-flight zone"
                          : a.zone->store_id == RL_STORE_ID_REDIS                     ? "a zone decided in Redis per request"
                          : a.zone->store_id == RL_STORE_ID_SYNC_LEASE                ? "a lease zone"
                          : a.policy.delay != rl::kNoDelay || a.limit->nodelay         ? "delay"
                                                                                       : nullptr;
        if (why == nullptr) continue;
        rl_conf_error_at(cf, "ratelimit", a.limit->file, a.limit->line, "at=datagram cannot take %s (zone \"%V\"): a "
                         "datagram is decided at once, in shared memory or an optimistic sync zone", why, &a.zone->name);
        return false;
    }
    return true;
}

char* merge_srv_conf(ngx_conf_t* cf, void* parent, void* child) noexcept {
    auto* prev = static_cast<rl_stream_srv_conf_t*>(parent);
    auto* conf = static_cast<rl_stream_srv_conf_t*>(child);
    ngx_conf_merge_uint_value(conf->status, prev->status, NGX_STREAM_SERVICE_UNAVAILABLE);
    ngx_conf_merge_uint_value(conf->reject, prev->reject, static_cast<ngx_uint_t>(RL_REJECT_CLOSE));
    // The directives set the accept stage's settings; the other stages take them.
    if (!rl_scope_merge(cf, &conf->scope[RL_AT_ACCEPT], &prev->scope[RL_AT_ACCEPT])) {
        return static_cast<char*>(NGX_CONF_ERROR);
    }
    for (ngx_uint_t at = RL_AT_PREREAD; at < RL_AT_N; at++) {
        if (!rl_scope_merge(cf, &conf->scope[at], &conf->scope[RL_AT_ACCEPT])) return static_cast<char*>(NGX_CONF_ERROR);
    }
    if (!check_datagram(cf, &conf->scope[RL_AT_DATAGRAM])) return static_cast<char*>(NGX_CONF_ERROR);
    // Preread limits run where the content starts: the server's handler is wrapped.
    auto* cscf = static_cast<ngx_stream_core_srv_conf_t*>(ngx_stream_conf_get_module_srv_conf(cf, ngx_stream_core_module));
    if (conf->scope[RL_AT_PREREAD].applied != nullptr && cscf->handler != nullptr &&
        cscf->handler != rl_stream_preread_handler) {
        conf->content = cscf->handler;
        cscf->handler = rl_stream_preread_handler;
    }
    return NGX_CONF_OK;
}

ngx_int_t preconfiguration(ngx_conf_t* cf) noexcept { return rl_stream_add_variables(cf); }

ngx_int_t postconfiguration(ngx_conf_t* cf) noexcept {
    auto* mcf = static_cast<rl_stream_main_conf_t*>(ngx_stream_conf_get_module_main_conf(cf, ngx_stream_ratelimit_module));
    auto* cscf = static_cast<ngx_stream_core_srv_conf_t*>(ngx_stream_conf_get_module_srv_conf(cf, ngx_stream_core_module));
    ngx_msec_t resolver_timeout = cscf->resolver_timeout == NGX_CONF_UNSET_MSEC ? 30000 : cscf->resolver_timeout;
    if (!rl_engine_finish(cf, &mcf->engine, cscf->resolver, resolver_timeout)) return NGX_ERROR;
    if (mcf->engine.zones.nelts == 0) return NGX_OK;
    // Its counters, for the http{} metrics endpoint to find by name.
    ngx_str_t name = ngx_string("ratelimit:stream");
    if (rl_metrics_zone_add(cf, &mcf->engine, &name) == nullptr) return NGX_ERROR;
    if (!rl_stream_check_listens(cf)) return NGX_ERROR;
    auto* core = static_cast<ngx_stream_core_main_conf_t*>(ngx_stream_conf_get_module_main_conf(cf, ngx_stream_core_module));
    auto* h = static_cast<ngx_stream_handler_pt*>(ngx_array_push(&core->phases[NGX_STREAM_PREACCESS_PHASE].handlers));
    if (h == nullptr) return NGX_ERROR;
    *h = rl_stream_accept_handler;
    rl_stream_datagram_init();
    return NGX_OK;
}

ngx_int_t init_process(ngx_cycle_t* cycle) noexcept {
    auto* mcf = static_cast<rl_stream_main_conf_t*>(ngx_stream_cycle_get_module_main_conf(cycle, ngx_stream_ratelimit_module));
    return mcf != nullptr ? rl_engine_start(cycle, &mcf->engine) : NGX_OK;
}

void exit_process(ngx_cycle_t* cycle) noexcept {
    auto* mcf = static_cast<rl_stream_main_conf_t*>(ngx_stream_cycle_get_module_main_conf(cycle, ngx_stream_ratelimit_module));
    if (mcf != nullptr) rl_engine_stop(&mcf->engine);
}

}  // namespace

extern "C" {
ngx_module_t ngx_stream_ratelimit_module = {
    NGX_MODULE_V1,
    &module_ctx,
    commands,
    NGX_STREAM_MODULE,
    nullptr,       // init master
    nullptr,       // init module
    init_process,  // init process
    nullptr,       // init thread
    nullptr,       // exit thread
    exit_process,  // exit process
    nullptr,       // exit master
    NGX_MODULE_V1_PADDING,
};
}
