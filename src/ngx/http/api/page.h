// The dashboard ratelimit_api serves (page.cpp): src/ngx/http/api/dashboard's files, built into
// the module (dashboard/embed.sh), with the headers its API.md lists.
#pragma once

#include "ngx/http/http.h"

#include <string_view>

// Whether `file` (the path's last part) is one of the dashboard's: "" (the page), app.js...
bool rl_api_is_file(std::string_view file) noexcept;
// GET or HEAD of one: the page only to a browser (Accept: text/html; else the JSON 404 of an
// unknown endpoint); any other method 405.
ngx_int_t rl_api_send_file(ngx_http_request_t* r, std::string_view file) noexcept;
