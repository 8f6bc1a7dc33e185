// The pre-access phase handler (access.cpp).
#pragma once

#include "ngx/http/request.h"

ngx_int_t rl_access_handler(ngx_http_request_t* r) noexcept;
