// The key a request to the API names (key.cpp): key=K (percent-encoded bytes) or addr=A.
#pragma once

#include "ngx/http/http.h"

// The key as the zone composes it: key= (raw, %XX decoded), or addr= (a textual address, as
// $binary_remote_addr makes it: 4 bytes IPv4, 16 bytes IPv6). nullptr, or why it is not valid.
const char* rl_api_request_key(ngx_http_request_t* r, ngx_str_t* key) noexcept;
