// A `ratelimit` line: its parameters read into an rl_limit_t, then checked together.
#include "ngx/limits/limit.h"

#include "ngx/limits/conf.h"

#include "core/algo/delay.h"
#include "core/text/rate.h"

namespace {

// The line's own parameters.
rl_param_e read_param(ngx_conf_t* cf, const rl_engine_conf_t* ecf, rl_limit_t& limit, ngx_str_t& a) {
    ngx_str_t v;
    if (rl_arg(a, "zone=", v)) {
        if (v.len == 0) return rl_param_error(cf, "invalid zone name \"%V\"", &a);
        limit.shm_zone = ngx_shared_memory_add(cf, &v, 0, ecf->fe->module);
        if (limit.shm_zone == nullptr) return RL_PARAM_ERROR;
    } else if (rl_arg(a, "burst=", v)) {
        if (!rl::parse_int(rl_sv(v), 0, rl::kMaxRequests, limit.burst)) return rl_param_error(cf, "invalid burst \"%V\"", &a);
        limit.burst_set = true;
    } else if (rl_arg(a, "quantity=", v)) {
        limit.quantity_set = true;
        if (v.len > 0 && v.data[0] == '$') {
            limit.quantity_cv = ecf->fe->compile(cf, &v);
            if (limit.quantity_cv == nullptr) return RL_PARAM_ERROR;
        } else if (!rl::parse_int(rl_sv(v), 0, rl::kMaxRequests, limit.quantity)) {
            return rl_param_error(cf, "invalid quantity \"%V\"", &a);
        }
    } else if (rl_arg(a, "delay=", v)) {
        if (!rl::parse_int(rl_sv(v), 0, rl::kMaxRequests, limit.delay)) return rl_param_error(cf, "invalid delay \"%V\"", &a);
    } else if (rl_word(a, "nodelay")) {
        limit.nodelay = true;
    } else if (rl_arg(a, "max_delay=", v)) {
        if (!rl::parse_duration(rl_sv(v), limit.max_delay_us)) return rl_param_error(cf, "invalid max_delay \"%V\"", &a);
    } else if (rl_arg(a, "block=", v)) {
        if (!rl_parse_block(rl_sv(v), limit.block_us)) {
            return rl_param_error(cf, "invalid block \"%V\", it must be from 1s to 1y", &a);
        }
    } else {
        return RL_PARAM_OTHER;
    }
    return RL_PARAM_READ;
}

// The parameters together.
bool check(ngx_conf_t* cf, const rl_limit_t& limit) {
    auto* args = static_cast<ngx_str_t*>(cf->args->elts);
    if (limit.nodelay && limit.delay != rl::kNoDelay) {
        rl_conf_error(cf, "\"delay\" and \"nodelay\" are mutually exclusive");
        return false;
    }
    if (limit.max_delay_us > 0 && limit.delay == rl::kNoDelay) {
        rl_conf_error(cf, "\"max_delay\" requires \"delay\"");
        return false;
    }
    if (limit.shm_zone == nullptr) {
        rl_conf_error(cf, "\"%V\" must have \"zone\" parameter", &args[0]);
        return false;
    }
    return true;
}

}  // namespace

char* rl_limit_parse(ngx_conf_t* cf, rl_engine_conf_t* ecf, rl_scope_t* scope, rl_limit_param_pt more) noexcept {
    auto* args = static_cast<ngx_str_t*>(cf->args->elts);
    if (!rl_no_duplicate_params(cf, 1)) return static_cast<char*>(NGX_CONF_ERROR);
    rl_limit_t limit{};
    limit.quantity = 1;
    limit.settle_var = NGX_ERROR;
    limit.delay = rl::kNoDelay;
    limit.file = cf->conf_file->file.name.data;
    limit.line = cf->conf_file->line;
    for (ngx_uint_t i = 1; i < cf->args->nelts; i++) {
        rl_param_e rv = read_param(cf, ecf, limit, args[i]);
        if (rv == RL_PARAM_OTHER && more != nullptr) rv = more(cf, &limit, args[i]);
        if (rv == RL_PARAM_OTHER) return rl_conf_error(cf, "invalid parameter \"%V\"", &args[i]);
        if (rv == RL_PARAM_ERROR) return static_cast<char*>(NGX_CONF_ERROR);
    }
    if (!check(cf, limit)) return static_cast<char*>(NGX_CONF_ERROR);

    if (scope->limits == NGX_CONF_UNSET_PTR) {
        scope->limits = ngx_array_create(cf->pool, 2, sizeof(rl_limit_t));
        if (scope->limits == nullptr) return static_cast<char*>(NGX_CONF_ERROR);
    }
    auto* limits = static_cast<rl_limit_t*>(scope->limits->elts);
    for (ngx_uint_t i = 0; i < scope->limits->nelts; i++) {
        if (limits[i].shm_zone == limit.shm_zone && limits[i].at == limit.at) {
            return rl_conf_error(cf, "zone \"%V\" is already applied here", &limit.shm_zone->shm.name);
        }
    }
    auto* slot = static_cast<rl_limit_t*>(ngx_array_push(scope->limits));
    if (slot == nullptr) return static_cast<char*>(NGX_CONF_ERROR);
    *slot = limit;
    return NGX_CONF_OK;
}

void rl_scope_init(rl_scope_t* scope) noexcept {
    scope->limits = static_cast<ngx_array_t*>(NGX_CONF_UNSET_PTR);
    scope->applied = nullptr;
    scope->algo = NGX_CONF_UNSET_UINT;
    scope->dry_run = NGX_CONF_UNSET;
    scope->log_level = NGX_CONF_UNSET_UINT;
    scope->on_error = NGX_CONF_UNSET_UINT;
}
