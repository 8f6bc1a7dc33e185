// $ratelimit_status and $ratelimit_dropped in stream{} (variables.cpp).
#pragma once

#include "ngx/stream/stream.h"

ngx_int_t rl_stream_add_variables(ngx_conf_t* cf) noexcept;
