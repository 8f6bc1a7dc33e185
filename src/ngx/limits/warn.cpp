// Values from outside that a zone cannot use, logged once a second per zone and worker.
#include "ngx/limits/context.h"

#include "core/text/log_text.h"

void rl_warn_value(ngx_log_t* log, const rl_zone_t* zone, time_t* stamp, const char* what, const ngx_str_t& value,
                   const char* outcome) noexcept {
    if (*stamp == ngx_time()) return;  // once a second per zone and worker
    *stamp = ngx_time();
    char text[64];
    size_t n = rl::log_text(value.data, value.len, text, sizeof(text));
    ngx_log_error(NGX_LOG_WARN, log, 0, "ratelimit zone \"%V\": invalid %s \"%*s\", %s", &zone->name, what, n, text,
                  outcome);
}
