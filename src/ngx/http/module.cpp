// The HTTP front end's module: directives, configuration create/merge, the phases and the filter
// it takes part in, and the engine's start and stop in each worker.
#include "ngx/engine/conf.h"
#include "ngx/engine/top.h"
#include "ngx/engine/worker.h"
#include "ngx/http/access.h"
#include "ngx/http/api/api.h"
#include "ngx/http/client_prefix.h"
#include "ngx/http/headers.h"
#include "ngx/http/metrics.h"
#include "ngx/http/request.h"
#include "ngx/http/settle.h"
#include "ngx/http/variables.h"
#include "ngx/limits/settings.h"
#include "ngx/limits/zone.h"
#include "ngx/redis/redis.h"

#include "core/text/headers.h"

namespace {

char* rl_zone_directive(ngx_conf_t* cf, ngx_command_t* cmd, void* conf) noexcept;
char* rl_redis_directive(ngx_conf_t* cf, ngx_command_t* cmd, void* conf) noexcept;
char* rl_limit_directive(ngx_conf_t* cf, ngx_command_t* cmd, void* conf) noexcept;
void* rl_create_main_conf(ngx_conf_t* cf) noexcept;
void* rl_create_loc_conf(ngx_conf_t* cf) noexcept;
char* rl_merge_loc_conf(ngx_conf_t* cf, void* parent, void* child) noexcept;
ngx_int_t rl_preconfiguration(ngx_conf_t* cf) noexcept;
ngx_int_t rl_postconfiguration(ngx_conf_t* cf) noexcept;
ngx_int_t rl_init_process(ngx_cycle_t* cycle) noexcept;
void rl_exit_process(ngx_cycle_t* cycle) noexcept;

ngx_conf_enum_t rl_headers_modes[] = {
    {ngx_string("off"), RL_HEADERS_OFF},
    {ngx_string("on"), RL_HEADERS_ON},
    {ngx_string("legacy"), RL_HEADERS_LEGACY},
    {ngx_string("all"), RL_HEADERS_ALL},
    {ngx_null_string, 0},
};

ngx_command_t rl_commands[] = {
    {ngx_string("ratelimit_zone"), NGX_HTTP_MAIN_CONF | NGX_CONF_2MORE, rl_zone_directive,
     NGX_HTTP_MAIN_CONF_OFFSET, 0, nullptr},
    {ngx_string("ratelimit_redis"), NGX_HTTP_MAIN_CONF | NGX_CONF_2MORE, rl_redis_directive,
     NGX_HTTP_MAIN_CONF_OFFSET, 0, nullptr},
    {ngx_string("ratelimit_on_error"), NGX_HTTP_MAIN_CONF | NGX_HTTP_SRV_CONF | NGX_HTTP_LOC_CONF | NGX_CONF_TAKE1,
     rl_set_enum, NGX_HTTP_LOC_CONF_OFFSET, offsetof(rl_loc_conf_t, scope.on_error), &rl_on_error_modes},
    {ngx_string("ratelimit"), NGX_HTTP_MAIN_CONF | NGX_HTTP_SRV_CONF | NGX_HTTP_LOC_CONF | NGX_CONF_1MORE,
     rl_limit_directive, NGX_HTTP_LOC_CONF_OFFSET, 0, nullptr},
    {ngx_string("ratelimit_algo"), NGX_HTTP_MAIN_CONF | NGX_HTTP_SRV_CONF | NGX_HTTP_LOC_CONF | NGX_CONF_TAKE1,
     rl_set_algo, NGX_HTTP_LOC_CONF_OFFSET, offsetof(rl_loc_conf_t, scope.algo), nullptr},
    {ngx_string("ratelimit_status"), NGX_HTTP_MAIN_CONF | NGX_HTTP_SRV_CONF | NGX_HTTP_LOC_CONF | NGX_CONF_TAKE1,
     ngx_conf_set_num_slot, NGX_HTTP_LOC_CONF_OFFSET, offsetof(rl_loc_conf_t, status), &rl_status_post},
    {ngx_string("ratelimit_headers"), NGX_HTTP_MAIN_CONF | NGX_HTTP_SRV_CONF | NGX_HTTP_LOC_CONF | NGX_CONF_TAKE1,
     rl_set_enum, NGX_HTTP_LOC_CONF_OFFSET, offsetof(rl_loc_conf_t, headers), &rl_headers_modes},
    {ngx_string("ratelimit_dry_run"), NGX_HTTP_MAIN_CONF | NGX_HTTP_SRV_CONF | NGX_HTTP_LOC_CONF | NGX_CONF_FLAG,
     ngx_conf_set_flag_slot, NGX_HTTP_LOC_CONF_OFFSET, offsetof(rl_loc_conf_t, scope.dry_run), nullptr},
    {ngx_string("ratelimit_log_level"), NGX_HTTP_MAIN_CONF | NGX_HTTP_SRV_CONF | NGX_HTTP_LOC_CONF | NGX_CONF_TAKE1,
     rl_set_enum, NGX_HTTP_LOC_CONF_OFFSET, offsetof(rl_loc_conf_t, scope.log_level), &rl_log_levels},
    {ngx_string("ratelimit_client_prefix"), NGX_HTTP_MAIN_CONF | NGX_HTTP_SRV_CONF | NGX_HTTP_LOC_CONF | NGX_CONF_TAKE12,
     rl_client_prefix_directive, NGX_HTTP_LOC_CONF_OFFSET, 0, nullptr},
    {ngx_string("ratelimit_metrics"), NGX_HTTP_LOC_CONF | NGX_CONF_NOARGS, rl_metrics_directive, 0, 0, nullptr},
    {ngx_string("ratelimit_api"), NGX_HTTP_LOC_CONF | NGX_CONF_NOARGS | NGX_CONF_TAKE1, rl_api_directive,
     NGX_HTTP_LOC_CONF_OFFSET, 0, nullptr},
    ngx_null_command,
};

ngx_http_module_t rl_module_ctx = {
    rl_preconfiguration,
    rl_postconfiguration,
    rl_create_main_conf, nullptr,
    nullptr, nullptr,  // server conf
    rl_create_loc_conf,
    rl_merge_loc_conf,
};

char* rl_zone_directive(ngx_conf_t* cf, ngx_command_t*, void* conf) noexcept {
    return rl_zone_parse(cf, &static_cast<rl_main_conf_t*>(conf)->engine);
}

char* rl_redis_directive(ngx_conf_t* cf, ngx_command_t*, void* conf) noexcept {
    return rl_redis_parse(cf, &static_cast<rl_main_conf_t*>(conf)->engine.redis);
}

// ratelimit zone=NAME ... [settle=VALUE]: the engine's line, with HTTP's settle=.
char* rl_limit_directive(ngx_conf_t* cf, ngx_command_t*, void* conf) noexcept {
    auto* mcf = static_cast<rl_main_conf_t*>(ngx_http_conf_get_module_main_conf(cf, ngx_http_ratelimit_module));
    return rl_limit_parse(cf, &mcf->engine, &static_cast<rl_loc_conf_t*>(conf)->scope, rl_settle_param);
}

void* rl_create_loc_conf(ngx_conf_t* cf) noexcept {
    auto* conf = static_cast<rl_loc_conf_t*>(ngx_pcalloc(cf->pool, sizeof(rl_loc_conf_t)));
    if (conf == nullptr) return nullptr;
    rl_scope_init(&conf->scope);
    conf->status = NGX_CONF_UNSET_UINT;
    conf->headers = NGX_CONF_UNSET_UINT;
    conf->prefix_v4 = NGX_CONF_UNSET_UINT;
    conf->prefix_v6 = NGX_CONF_UNSET_UINT;
    return conf;
}

void* rl_create_main_conf(ngx_conf_t* cf) noexcept {
    auto* mcf = static_cast<rl_main_conf_t*>(ngx_pcalloc(cf->pool, sizeof(rl_main_conf_t)));
    if (mcf == nullptr) return nullptr;
    return rl_engine_conf_init(cf, &mcf->engine, &rl_http_frontend) ? mcf : nullptr;
}

// RateLimit-Policy for a request every applied limit decided: formatted once, here.
bool rl_build_policy_header(ngx_conf_t* cf, rl_loc_conf_t* conf) noexcept {
    if (conf->scope.applied == nullptr) return true;
    auto* applied = static_cast<rl_applied_t*>(conf->scope.applied->elts);
    ngx_uint_t n = conf->scope.applied->nelts;
    auto* items = static_cast<rl::HeaderItem*>(ngx_palloc(cf->pool, n * sizeof(rl::HeaderItem) + 1));
    if (items == nullptr) return false;
    for (ngx_uint_t i = 0; i < n; i++) items[i] = rl_policy_item(*applied[i].zone, applied[i].policy);
    auto* buf = static_cast<char*>(ngx_pnalloc(cf->pool, rl::header_max_len(items, n)));
    if (buf == nullptr) return false;
    conf->policy.data = reinterpret_cast<u_char*>(buf);
    conf->policy.len = rl::format_policy(buf, items, n);
    return true;
}

// The prefix lengths of $ratelimit_client_prefix where a zone keyed on it applies, for its top
// keys' text: in locations only (a server's own level decides no request).
void rl_note_prefixes(ngx_conf_t* cf, const rl_loc_conf_t* conf) {
    auto* clcf = static_cast<ngx_http_core_loc_conf_t*>(ngx_http_conf_get_module_loc_conf(cf, ngx_http_core_module));
    if (conf->scope.applied == nullptr || clcf->name.len == 0) return;
    auto* applied = static_cast<rl_applied_t*>(conf->scope.applied->elts);
    for (ngx_uint_t i = 0; i < conf->scope.applied->nelts; i++) {
        rl_top_prefix(applied[i].zone, static_cast<unsigned>(conf->prefix_v4), static_cast<unsigned>(conf->prefix_v6));
    }
}

char* rl_merge_loc_conf(ngx_conf_t* cf, void* parent, void* child) noexcept {
    auto* prev = static_cast<rl_loc_conf_t*>(parent);
    auto* conf = static_cast<rl_loc_conf_t*>(child);
    ngx_conf_merge_uint_value(conf->status, prev->status, 429);
    ngx_conf_merge_uint_value(conf->headers, prev->headers, static_cast<ngx_uint_t>(RL_HEADERS_ON));
    rl_client_prefix_merge(conf, prev);
    if (!rl_scope_merge(cf, &conf->scope, &prev->scope)) return static_cast<char*>(NGX_CONF_ERROR);
    if (!rl_build_policy_header(cf, conf)) return static_cast<char*>(NGX_CONF_ERROR);
    rl_note_prefixes(cf, conf);
    return NGX_CONF_OK;
}

ngx_int_t rl_preconfiguration(ngx_conf_t* cf) noexcept { return rl_add_variables(cf); }

ngx_int_t rl_postconfiguration(ngx_conf_t* cf) noexcept {
    auto* mcf = static_cast<rl_main_conf_t*>(ngx_http_conf_get_module_main_conf(cf, ngx_http_ratelimit_module));
    auto* clcf = static_cast<ngx_http_core_loc_conf_t*>(ngx_http_conf_get_module_loc_conf(cf, ngx_http_core_module));
    // http{}'s own settings are not merged: unset means nginx's default, 30 s.
    ngx_msec_t resolver_timeout = clcf->resolver_timeout == NGX_CONF_UNSET_MSEC ? 30000 : clcf->resolver_timeout;
    if (!rl_engine_finish(cf, &mcf->engine, clcf->resolver, resolver_timeout)) return NGX_ERROR;
    auto* cmcf = static_cast<ngx_http_core_main_conf_t*>(ngx_http_conf_get_module_main_conf(cf, ngx_http_core_module));
    auto* h = static_cast<ngx_http_handler_pt*>(ngx_array_push(&cmcf->phases[NGX_HTTP_PREACCESS_PHASE].handlers));
    if (h == nullptr) return NGX_ERROR;
    *h = rl_access_handler;
    if (!mcf->settles) return rl_header_filter_init(cf);
    // The settles run before the log writers (the access log's handler came first): shifted
    // to the front.
    ngx_array_t* log = &cmcf->phases[NGX_HTTP_LOG_PHASE].handlers;
    h = static_cast<ngx_http_handler_pt*>(ngx_array_push(log));
    if (h == nullptr) return NGX_ERROR;
    auto* first = static_cast<ngx_http_handler_pt*>(log->elts);
    ngx_memmove(first + 1, first, (log->nelts - 1) * sizeof(ngx_http_handler_pt));
    first[0] = rl_settle_handler;
    return rl_header_filter_init(cf);
}

ngx_int_t rl_init_process(ngx_cycle_t* cycle) noexcept {
    auto* mcf = static_cast<rl_main_conf_t*>(ngx_http_cycle_get_module_main_conf(cycle, ngx_http_ratelimit_module));
    return mcf != nullptr ? rl_engine_start(cycle, &mcf->engine) : NGX_OK;
}

void rl_exit_process(ngx_cycle_t* cycle) noexcept {
    auto* mcf = static_cast<rl_main_conf_t*>(ngx_http_cycle_get_module_main_conf(cycle, ngx_http_ratelimit_module));
    if (mcf != nullptr) rl_engine_stop(&mcf->engine);
}

}  // namespace

extern "C" {
ngx_module_t ngx_http_ratelimit_module = {
    NGX_MODULE_V1,
    &rl_module_ctx,
    rl_commands,
    NGX_HTTP_MODULE,
    nullptr,                  // init master
    nullptr,                  // init module
    rl_init_process,          // init process
    nullptr,                  // init thread
    nullptr,                  // exit thread
    rl_exit_process,          // exit process
    nullptr,                  // exit master
    NGX_MODULE_V1_PADDING,
};
}
