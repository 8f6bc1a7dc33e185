// ratelimit_zone (zone.cpp): parsing, and the zone's shared-memory table, created once and
// reused across reloads.
#pragma once

#include "ngx/limits/conf.h"

struct rl_result_t;

char* rl_zone_directive(ngx_conf_t* cf, ngx_command_t* cmd, void* conf) noexcept;
// The log algorithm for `zone` under `policy`, checked here once for the zone's own algo= and for
// each `ratelimit` line that applies it (`where`): refused with sync= (hosts add counts, not
// every request's time) and with a variable rate (its memory per key depends on the rate), and
// its ring must fit the zone. Errors name the directive being read, or the line `where`.
// block=TIME of a zone or a `ratelimit` line: from 1s to 1 year (rl::parse_duration).
bool rl_parse_block(std::string_view v, int64_t& us) noexcept;
// Whether a zone can keep a block (refused at `where`, or at the directive when null).
bool rl_zone_check_block(ngx_conf_t* cf, const rl_zone_t* zone, const rl_limit_t* where) noexcept;
bool rl_zone_check_log(ngx_conf_t* cf, rl_zone_t* zone, const rl::Policy& policy, const rl_limit_t* where) noexcept;
// Once the http block is read: each zone's redis= names a ratelimit_redis, and its store.
bool rl_zone_resolve(ngx_conf_t* cf, rl_zone_t* zone, rl_main_conf_t* mcf) noexcept;
// A calendar zone's result (period=day...): its policy's window made the one holding `now`
// (us), computed again only when now has left it; nothing for other zones.
void rl_calendar_window(const rl_result_t& res, int64_t now) noexcept;
