// The API's top keys (top.cpp): a key's object as GET .../zones and .../top show it, and
// GET .../zones/NAME/top?n=N.
#pragma once

#include "ngx/http/api/json.h"
#include "ngx/limits/zone.h"

#include "core/keys/top_keys.h"

// The most one key's object takes (its text escaped, its reset percent-encoded).
constexpr size_t kRlApiTopItemBytes = 1024;

// {"key":...,"truncated":...,"rejected":...,"error":...,"blocked":...,"first_seen":...,
//  "last_seen":...,"reset":...}: `reset` is what a DELETE of the key appends (addr=, or key= of
// its bytes percent-encoded), null when its text was cut.
void rl_api_top_item(rl_json_t& j, const rl_zone_t* zone, const rl::TopItem& it) noexcept;
// GET .../zones/NAME/top?n=N (1 to K, default 10; above K: K): the window, its bound, the keys.
ngx_int_t rl_api_send_top(ngx_http_request_t* r, rl_zone_t* zone) noexcept;
