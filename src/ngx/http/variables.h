// $ratelimit_* variables (variables.cpp).
#pragma once

#include "ngx/ngx_include.h"

ngx_int_t rl_add_variables(ngx_conf_t* cf) noexcept;
