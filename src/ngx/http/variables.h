// $ratelimit_* variables (variables.cpp).
#pragma once

#include "ngx/http/http.h"

ngx_int_t rl_add_variables(ngx_conf_t* cf) noexcept;
