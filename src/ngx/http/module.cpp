// Module definition: directives, configuration create/merge, phase and filter registration.
#include "ngx/http/access.h"
#include "ngx/http/api/api.h"
#include "ngx/http/client_prefix.h"
#include "ngx/metrics/metrics.h"
#include "ngx/redis/redis.h"
#include "ngx/http/headers.h"
#include "ngx/http/settle.h"
#include "ngx/stores/store.h"
#include "ngx/sync/sync.h"
#include "ngx/limits/tier.h"
#include "ngx/http/variables.h"
#include "ngx/limits/zone.h"

#include "core/text/headers.h"
#include "core/text/rate.h"
#include "core/algo/settle.h"

#include <cstdarg>

namespace {

char* rl_limit_directive(ngx_conf_t* cf, ngx_command_t* cmd, void* conf) noexcept;
char* rl_algo_directive(ngx_conf_t* cf, ngx_command_t* cmd, void* conf) noexcept;
void* rl_create_main_conf(ngx_conf_t* cf) noexcept;
void* rl_create_loc_conf(ngx_conf_t* cf) noexcept;
char* rl_merge_loc_conf(ngx_conf_t* cf, void* parent, void* child) noexcept;
ngx_int_t rl_preconfiguration(ngx_conf_t* cf) noexcept;
ngx_int_t rl_postconfiguration(ngx_conf_t* cf) noexcept;
ngx_int_t rl_init_process(ngx_cycle_t* cycle) noexcept;
void rl_exit_process(ngx_cycle_t* cycle) noexcept;

char* rl_check_status(ngx_conf_t* cf, void* post, void* data) noexcept;
ngx_conf_post_t rl_status_post = {rl_check_status};
char* rl_set_enum(ngx_conf_t* cf, ngx_command_t* cmd, void* conf) noexcept;

ngx_conf_enum_t rl_headers_modes[] = {
    {ngx_string("off"), RL_HEADERS_OFF},
    {ngx_string("on"), RL_HEADERS_ON},
    {ngx_string("legacy"), RL_HEADERS_LEGACY},
    {ngx_string("all"), RL_HEADERS_ALL},
    {ngx_null_string, 0},
};

ngx_conf_enum_t rl_on_error_modes[] = {
    {ngx_string("allow"), RL_ON_ERROR_ALLOW},
    {ngx_string("deny"), RL_ON_ERROR_DENY},
    {ngx_string("local"), RL_ON_ERROR_LOCAL},
    {ngx_null_string, 0},
};

ngx_conf_enum_t rl_log_levels[] = {
    {ngx_string("info"), NGX_LOG_INFO},
    {ngx_string("notice"), NGX_LOG_NOTICE},
    {ngx_string("warn"), NGX_LOG_WARN},
    {ngx_string("error"), NGX_LOG_ERR},
    {ngx_null_string, 0},
};

ngx_command_t rl_commands[] = {
    {ngx_string("ratelimit_zone"), NGX_HTTP_MAIN_CONF | NGX_CONF_2MORE, rl_zone_directive,
     NGX_HTTP_MAIN_CONF_OFFSET, 0, nullptr},
    {ngx_string("ratelimit_redis"), NGX_HTTP_MAIN_CONF | NGX_CONF_2MORE, rl_redis_directive,
     NGX_HTTP_MAIN_CONF_OFFSET, 0, nullptr},
    {ngx_string("ratelimit_on_error"), NGX_HTTP_MAIN_CONF | NGX_HTTP_SRV_CONF | NGX_HTTP_LOC_CONF | NGX_CONF_TAKE1,
     rl_set_enum, NGX_HTTP_LOC_CONF_OFFSET, offsetof(rl_loc_conf_t, on_error), &rl_on_error_modes},
    {ngx_string("ratelimit"), NGX_HTTP_MAIN_CONF | NGX_HTTP_SRV_CONF | NGX_HTTP_LOC_CONF | NGX_CONF_1MORE,
     rl_limit_directive, NGX_HTTP_LOC_CONF_OFFSET, 0, nullptr},
    {ngx_string("ratelimit_algo"), NGX_HTTP_MAIN_CONF | NGX_HTTP_SRV_CONF | NGX_HTTP_LOC_CONF | NGX_CONF_TAKE1,
     rl_algo_directive, NGX_HTTP_LOC_CONF_OFFSET, offsetof(rl_loc_conf_t, algo), nullptr},
    {ngx_string("ratelimit_status"), NGX_HTTP_MAIN_CONF | NGX_HTTP_SRV_CONF | NGX_HTTP_LOC_CONF | NGX_CONF_TAKE1,
     ngx_conf_set_num_slot, NGX_HTTP_LOC_CONF_OFFSET, offsetof(rl_loc_conf_t, status), &rl_status_post},
    {ngx_string("ratelimit_headers"), NGX_HTTP_MAIN_CONF | NGX_HTTP_SRV_CONF | NGX_HTTP_LOC_CONF | NGX_CONF_TAKE1,
     rl_set_enum, NGX_HTTP_LOC_CONF_OFFSET, offsetof(rl_loc_conf_t, headers), &rl_headers_modes},
    {ngx_string("ratelimit_dry_run"), NGX_HTTP_MAIN_CONF | NGX_HTTP_SRV_CONF | NGX_HTTP_LOC_CONF | NGX_CONF_FLAG,
     ngx_conf_set_flag_slot, NGX_HTTP_LOC_CONF_OFFSET, offsetof(rl_loc_conf_t, dry_run), nullptr},
    {ngx_string("ratelimit_log_level"), NGX_HTTP_MAIN_CONF | NGX_HTTP_SRV_CONF | NGX_HTTP_LOC_CONF | NGX_CONF_TAKE1,
     rl_set_enum, NGX_HTTP_LOC_CONF_OFFSET, offsetof(rl_loc_conf_t, log_level), &rl_log_levels},
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

// ratelimit_status: nginx's own bounds check would not name the directive.
char* rl_check_status(ngx_conf_t* cf, void*, void* data) noexcept {
    ngx_int_t status = *static_cast<ngx_int_t*>(data);
    if (status >= 400 && status <= 599) return NGX_CONF_OK;
    return rl_conf_error(cf, "value must be between 400 and 599");
}

// ngx_conf_set_enum_slot, with an error that names the directive and the values it takes.
char* rl_set_enum(ngx_conf_t* cf, ngx_command_t* cmd, void* conf) noexcept {
    auto* value = reinterpret_cast<ngx_uint_t*>(static_cast<char*>(conf) + cmd->offset);
    if (*value != NGX_CONF_UNSET_UINT) return const_cast<char*>("is duplicate");
    auto* arg = &static_cast<ngx_str_t*>(cf->args->elts)[1];
    auto* e = static_cast<ngx_conf_enum_t*>(cmd->post);
    u_char names[128];
    u_char* p = names;
    for (ngx_uint_t i = 0; e[i].name.len != 0; i++) {
        if (e[i].name.len == arg->len && ngx_strcasecmp(e[i].name.data, arg->data) == 0) {
            *value = e[i].value;
            return NGX_CONF_OK;
        }
        p = ngx_slprintf(p, names + sizeof(names), i == 0 ? "\"%V\"" : ", \"%V\"", &e[i].name);
    }
    return rl_conf_error(cf, "invalid value \"%V\", it must be one of %*s", arg, static_cast<size_t>(p - names), names);
}

// Whether `name` is a variable's name alone (what "$name" may be followed by is not in it).
bool rl_variable_name(const ngx_str_t& name) {
    for (size_t i = 0; i < name.len; i++) {
        u_char c = name.data[i];
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_')) return false;
    }
    return true;
}

// ratelimit zone=NAME [burst=N] [quantity=N|$variable] [settle=VALUE] [delay=N | nodelay] [max_delay=TIME]
//           [block=TIME]
char* rl_limit_directive(ngx_conf_t* cf, ngx_command_t*, void* conf) noexcept {
    auto* lcf = static_cast<rl_loc_conf_t*>(conf);
    auto* args = static_cast<ngx_str_t*>(cf->args->elts);
    if (!rl_no_duplicate_params(cf, 1)) return static_cast<char*>(NGX_CONF_ERROR);

    rl_limit_t limit{};
    limit.quantity = 1;
    limit.settle_var = NGX_ERROR;
    limit.delay = rl::kNoDelay;
    bool nodelay = false;
    limit.file = cf->conf_file->file.name.data;
    limit.line = cf->conf_file->line;

    for (ngx_uint_t i = 1; i < cf->args->nelts; i++) {
        ngx_str_t a = args[i];
        ngx_str_t v;
        if (rl_arg(a, "zone=", v)) {
            if (v.len == 0) {
                return rl_conf_error(cf, "invalid zone name \"%V\"", &a);
            }
            limit.shm_zone = ngx_shared_memory_add(cf, &v, 0, &ngx_http_ratelimit_module);
            if (limit.shm_zone == nullptr) return static_cast<char*>(NGX_CONF_ERROR);
        } else if (rl_arg(a, "burst=", v)) {
            if (!rl::parse_int(rl_sv(v), 0, rl::kMaxRequests, limit.burst)) {
                return rl_conf_error(cf, "invalid burst \"%V\"", &a);
            }
            limit.burst_set = true;
        } else if (rl_arg(a, "quantity=", v)) {
            limit.quantity_set = true;
            if (v.len > 0 && v.data[0] == '$') {
                limit.quantity_cv = rl_complex_value(cf, &v);
                if (limit.quantity_cv == nullptr) return static_cast<char*>(NGX_CONF_ERROR);
            } else if (!rl::parse_int(rl_sv(v), 0, rl::kMaxRequests, limit.quantity)) {
                return rl_conf_error(cf, "invalid quantity \"%V\"", &a);
            }
        } else if (rl_arg(a, "settle=", v)) {
            // Evaluated when the request ends: its variables may be the response's (settle.cpp).
            limit.settle_set = true;
            ngx_str_t name{v.len - 1, v.data + 1};
            if (v.len > 1 && v.data[0] == '$' && rl_variable_name(name)) {
                // One variable: read by its index (no script to run, nothing to copy).
                limit.settle_var = ngx_http_get_variable_index(cf, &name);
                if (limit.settle_var == NGX_ERROR) return static_cast<char*>(NGX_CONF_ERROR);
            } else if (ngx_strlchr(v.data, v.data + v.len, '$') != nullptr) {
                limit.settle_cv = rl_complex_value(cf, &v);
                if (limit.settle_cv == nullptr) return static_cast<char*>(NGX_CONF_ERROR);
            } else if (!rl::parse_int(rl_sv(v), 0, rl::kMaxRequests, limit.settle)) {
                return rl_conf_error(cf, "invalid settle \"%V\"", &a);
            }
            static_cast<rl_main_conf_t*>(ngx_http_conf_get_module_main_conf(cf, ngx_http_ratelimit_module))->settles = true;
        } else if (rl_arg(a, "delay=", v)) {
            if (!rl::parse_int(rl_sv(v), 0, rl::kMaxRequests, limit.delay)) {
                return rl_conf_error(cf, "invalid delay \"%V\"", &a);
            }
        } else if (a.len == 7 && ngx_strncmp(a.data, "nodelay", 7) == 0) {
            nodelay = true;
        } else if (rl_arg(a, "max_delay=", v)) {
            if (!rl::parse_duration(rl_sv(v), limit.max_delay_us)) {
                return rl_conf_error(cf, "invalid max_delay \"%V\"", &a);
            }
        } else if (rl_arg(a, "block=", v)) {
            if (!rl_parse_block(rl_sv(v), limit.block_us)) {
                return rl_conf_error(cf, "invalid block \"%V\", it must be from 1s to 1y", &a);
            }
        } else {
            return rl_conf_error(cf, "invalid parameter \"%V\"", &a);
        }
    }

    limit.nodelay = nodelay;
    if (nodelay && limit.delay != rl::kNoDelay) {
        return rl_conf_error(cf, "\"delay\" and \"nodelay\" are mutually exclusive");
    }
    if (limit.max_delay_us > 0 && limit.delay == rl::kNoDelay) {
        return rl_conf_error(cf, "\"max_delay\" requires \"delay\"");
    }
    if (limit.shm_zone == nullptr) {
        return rl_conf_error(cf, "\"%V\" must have \"zone\" parameter", &args[0]);
    }

    if (lcf->limits == NGX_CONF_UNSET_PTR) {
        lcf->limits = ngx_array_create(cf->pool, 2, sizeof(rl_limit_t));
        if (lcf->limits == nullptr) return static_cast<char*>(NGX_CONF_ERROR);
    }
    auto* limits = static_cast<rl_limit_t*>(lcf->limits->elts);
    for (ngx_uint_t i = 0; i < lcf->limits->nelts; i++) {
        if (limits[i].shm_zone == limit.shm_zone) {
            return rl_conf_error(cf, "zone \"%V\" is already applied here",
                               &limit.shm_zone->shm.name);
        }
    }
    auto* slot = static_cast<rl_limit_t*>(ngx_array_push(lcf->limits));
    if (slot == nullptr) return static_cast<char*>(NGX_CONF_ERROR);
    *slot = limit;
    return NGX_CONF_OK;
}

char* rl_algo_directive(ngx_conf_t* cf, ngx_command_t*, void* conf) noexcept {
    auto* lcf = static_cast<rl_loc_conf_t*>(conf);
    auto* args = static_cast<ngx_str_t*>(cf->args->elts);
    if (lcf->algo != NGX_CONF_UNSET_UINT) return const_cast<char*>("is duplicate");
    rl::Algo algo;
    if (!rl::parse_algo(std::string_view(reinterpret_cast<char*>(args[1].data), args[1].len), algo)) {
        return rl_conf_error(cf, "invalid algorithm \"%V\"", &args[1]);
    }
    lcf->algo = static_cast<ngx_uint_t>(algo);
    return NGX_CONF_OK;
}

void* rl_create_loc_conf(ngx_conf_t* cf) noexcept {
    auto* conf = static_cast<rl_loc_conf_t*>(ngx_pcalloc(cf->pool, sizeof(rl_loc_conf_t)));
    if (conf == nullptr) return nullptr;
    conf->limits = static_cast<ngx_array_t*>(NGX_CONF_UNSET_PTR);
    conf->applied = nullptr;
    conf->algo = NGX_CONF_UNSET_UINT;
    conf->status = NGX_CONF_UNSET_UINT;
    conf->headers = NGX_CONF_UNSET_UINT;
    conf->dry_run = NGX_CONF_UNSET;
    conf->log_level = NGX_CONF_UNSET_UINT;
    conf->on_error = NGX_CONF_UNSET_UINT;
    conf->prefix_v4 = NGX_CONF_UNSET_UINT;
    conf->prefix_v6 = NGX_CONF_UNSET_UINT;
    return conf;
}

void* rl_create_main_conf(ngx_conf_t* cf) noexcept {
    auto* mcf = static_cast<rl_main_conf_t*>(ngx_pcalloc(cf->pool, sizeof(rl_main_conf_t)));
    if (mcf == nullptr) return nullptr;
    if (ngx_array_init(&mcf->redis, cf->pool, 2, sizeof(rl_redis_t*)) != NGX_OK ||
        ngx_array_init(&mcf->zones, cf->pool, 4, sizeof(rl_zone_t*)) != NGX_OK) {
        return nullptr;
    }
    return mcf;
}

// Every zone's redis= names a ratelimit_redis of the http block.
bool rl_resolve_zones(ngx_conf_t* cf) noexcept {
    auto* mcf = static_cast<rl_main_conf_t*>(ngx_http_conf_get_module_main_conf(cf, ngx_http_ratelimit_module));
    auto** zones = static_cast<rl_zone_t**>(mcf->zones.elts);
    for (ngx_uint_t i = 0; i < mcf->zones.nelts; i++) {
        if (!rl_zone_resolve(cf, zones[i], mcf)) return false;
    }
    return true;
}

// RateLimit-Policy for a request every applied limit decided: formatted once, here.
bool rl_build_policy_header(ngx_conf_t* cf, rl_loc_conf_t* conf) noexcept {
    auto* applied = static_cast<rl_applied_t*>(conf->applied->elts);
    ngx_uint_t n = conf->applied->nelts;
    auto* items = static_cast<rl::HeaderItem*>(ngx_palloc(cf->pool, n * sizeof(rl::HeaderItem) + 1));
    if (items == nullptr) return false;
    for (ngx_uint_t i = 0; i < n; i++) items[i] = rl_policy_item(*applied[i].zone, applied[i].policy);
    auto* buf = static_cast<char*>(ngx_pnalloc(cf->pool, rl::header_max_len(items, n)));
    if (buf == nullptr) return false;
    conf->policy.data = reinterpret_cast<u_char*>(buf);
    conf->policy.len = rl::format_policy(buf, items, n);
    return true;
}

// Turns this level's `ratelimit` lines into applied limits: each zone's policy under this
// level's algorithm and the line's burst, checked and finished once, here.
bool rl_build_applied(ngx_conf_t* cf, rl_loc_conf_t* conf) noexcept {
    conf->applied = nullptr;
    conf->tiered = false;
    conf->stores = 0;
    conf->slots = false;
    if (conf->limits == nullptr) return true;
    conf->applied = ngx_array_create(cf->pool, conf->limits->nelts, sizeof(rl_applied_t));
    if (conf->applied == nullptr) return false;
    auto* limits = static_cast<rl_limit_t*>(conf->limits->elts);
    for (ngx_uint_t i = 0; i < conf->limits->nelts; i++) {
        rl_limit_t& l = limits[i];
        auto* zone = static_cast<rl_zone_t*>(l.shm_zone->data);
        if (zone == nullptr) {
            rl_conf_error_at(cf, "ratelimit", l.file, l.line, "unknown ratelimit zone \"%V\"", &l.shm_zone->shm.name);
            return false;
        }
        if (zone->concurrency &&
            (l.burst_set || l.quantity_set || l.delay != rl::kNoDelay || l.nodelay || l.settle_set)) {
            // A request takes one slot while it runs, and nothing refills a slot but its end.
            rl_conf_error_at(cf, "ratelimit", l.file, l.line, "\"%s\" has no meaning for the concurrency zone \"%V\"",
                             l.burst_set ? "burst" : l.quantity_set ? "quantity" : l.nodelay ? "nodelay"
                             : l.settle_set ? "settle" : "delay",
                             &zone->name);
            return false;
        }
        if (l.block_us > 0 && !rl_zone_check_block(cf, zone, &l)) return false;
        rl::Policy p = zone->policy;
        if (l.block_us > 0) p.block_us = l.block_us;
        if (!zone->algo_set) p.algo = static_cast<rl::Algo>(conf->algo);
        if (l.burst_set) p.burst = l.burst;
        if (!rl::is_bucket(p.algo) && (l.burst_set || zone->burst_set)) {
            rl_conf_error_at(cf, "ratelimit", l.file, l.line, "\"burst\" is not supported by the \"%s\" algorithm (zone \"%V\")",
                             rl::algo_name(p.algo).data(), &zone->name);
            return false;
        }
        p.delay = l.delay;
        p.max_delay_us = l.max_delay_us;
        if (!rl::is_bucket(p.algo) && l.delay != rl::kNoDelay) {
            rl_conf_error_at(cf, "ratelimit", l.file, l.line, "\"delay\" is not supported by the \"%s\" algorithm (zone \"%V\")",
                             rl::algo_name(p.algo).data(), &zone->name);
            return false;
        }
        if (const char* why = rl::finish_policy(p)) {
            rl_conf_error_at(cf, "ratelimit", l.file, l.line, "%s in ratelimit zone \"%V\"", why, &zone->name);
            return false;
        }
        auto* a = static_cast<rl_applied_t*>(ngx_array_push(conf->applied));
        if (a == nullptr) return false;
        a->zone = zone;
        a->limit = &l;
        a->policy = p;
        if (l.settle_set) a->debt = rl::debt_policy(p);
        rl_tier_check_applied(a);
        conf->tiered = conf->tiered || a->tiered;
        conf->stores |= ngx_uint_t{1} << zone->store->index;
        conf->slots = conf->slots || zone->local == &rl_conc_store;  // a Redis one's too: on_error local
        if (p.algo == rl::Algo::log && !rl_zone_check_log(cf, zone, p, &l)) return false;
        if (zone->sync_mode != RL_SYNC_OFF && !rl_sync_add_policy(zone, p)) return false;
        if (!rl_api_note_policy(cf, zone, p)) return false;
    }
    return rl_build_policy_header(cf, conf);
}

char* rl_merge_loc_conf(ngx_conf_t* cf, void* parent, void* child) noexcept {
    auto* prev = static_cast<rl_loc_conf_t*>(parent);
    auto* conf = static_cast<rl_loc_conf_t*>(child);

    ngx_conf_merge_ptr_value(conf->limits, prev->limits, nullptr);
    ngx_conf_merge_uint_value(conf->algo, prev->algo, static_cast<ngx_uint_t>(rl::Algo::gcra));
    ngx_conf_merge_uint_value(conf->status, prev->status, 429);
    ngx_conf_merge_uint_value(conf->headers, prev->headers, static_cast<ngx_uint_t>(RL_HEADERS_ON));
    ngx_conf_merge_value(conf->dry_run, prev->dry_run, 0);
    ngx_conf_merge_uint_value(conf->log_level, prev->log_level, NGX_LOG_ERR);
    ngx_conf_merge_uint_value(conf->on_error, prev->on_error, static_cast<ngx_uint_t>(RL_ON_ERROR_ALLOW));
    rl_client_prefix_merge(conf, prev);

    if (!rl_build_applied(cf, conf)) return static_cast<char*>(NGX_CONF_ERROR);
    return NGX_CONF_OK;
}

ngx_int_t rl_preconfiguration(ngx_conf_t* cf) noexcept { return rl_add_variables(cf); }

ngx_int_t rl_postconfiguration(ngx_conf_t* cf) noexcept {
    if (!rl_resolve_zones(cf)) return NGX_ERROR;
    auto* mcf = static_cast<rl_main_conf_t*>(ngx_http_conf_get_module_main_conf(cf, ngx_http_ratelimit_module));
    if (rl_metrics_postconfiguration(cf, mcf) != NGX_OK) return NGX_ERROR;
    if (rl_redis_postconfiguration(cf, mcf) != NGX_OK) return NGX_ERROR;
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
    if (rl_redis_init_process(cycle) != NGX_OK) return NGX_ERROR;
    return rl_sync_init_process(cycle);
}

void rl_exit_process(ngx_cycle_t* cycle) noexcept {
    rl_sync_exit_process(cycle);
    rl_redis_exit_process(cycle);
}

}  // namespace

ngx_http_complex_value_t* rl_complex_value(ngx_conf_t* cf, ngx_str_t* value) noexcept {
    auto* cv = static_cast<ngx_http_complex_value_t*>(ngx_palloc(cf->pool, sizeof(ngx_http_complex_value_t)));
    if (cv == nullptr) return nullptr;
    ngx_http_compile_complex_value_t ccv{};
    ccv.cf = cf;
    ccv.value = value;
    ccv.complex_value = cv;
    return ngx_http_compile_complex_value(&ccv) == NGX_OK ? cv : nullptr;
}

namespace {

void conf_verror(ngx_conf_t* cf, const char* directive, const u_char* file, ngx_uint_t line, const char* fmt,
                 va_list args) {
    u_char msg[NGX_MAX_CONF_ERRSTR];
    u_char* p = ngx_vslprintf(msg, msg + sizeof(msg), fmt, args);
    auto len = static_cast<size_t>(p - msg);
    if (directive == nullptr) {
        auto* name = static_cast<ngx_str_t*>(cf->args->elts);
        ngx_conf_log_error(NGX_LOG_EMERG, cf, 0, "%*s in \"%V\" directive", len, msg, &name[0]);
    } else {
        ngx_log_error(NGX_LOG_EMERG, cf->log, 0, "%*s in \"%s\" directive in %s:%ui", len, msg, directive, file, line);
    }
}

}  // namespace

char* rl_conf_error(ngx_conf_t* cf, const char* fmt, ...) noexcept {
    va_list args;
    va_start(args, fmt);
    conf_verror(cf, nullptr, nullptr, 0, fmt, args);
    va_end(args);
    return static_cast<char*>(NGX_CONF_ERROR);
}

void rl_conf_error_at(ngx_conf_t* cf, const char* directive, const u_char* file, ngx_uint_t line, const char* fmt,
                      ...) noexcept {
    va_list args;
    va_start(args, fmt);
    conf_verror(cf, directive, file, line, fmt, args);
    va_end(args);
}

bool rl_no_duplicate_params(ngx_conf_t* cf, ngx_uint_t first) noexcept {
    auto* args = static_cast<ngx_str_t*>(cf->args->elts);
    for (ngx_uint_t i = first; i < cf->args->nelts; i++) {
        u_char* eq = ngx_strlchr(args[i].data, args[i].data + args[i].len, '=');
        if (eq == nullptr || ngx_strncmp(args[i].data, "unix:", 5) == 0) continue;  // not name=value
        size_t n = static_cast<size_t>(eq - args[i].data) + 1;  // the name and its '='
        for (ngx_uint_t j = first; j < i; j++) {
            if (args[j].len >= n && ngx_strncmp(args[j].data, args[i].data, n) == 0) {
                // The name only: the values may be secrets (password=).
                rl_conf_error(cf, "duplicate parameter \"%*s\"", n, args[i].data);
                return false;
            }
        }
    }
    return true;
}

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
