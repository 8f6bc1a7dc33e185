// Settles (settle.cpp): a request's real cost, known when it ends; the difference from what it
// was charged goes to each limit's store: charged when more (core/algo/settle.h: as far as the
// key's debt may go), given back when less. The front end evaluates the values.
#pragma once

#include "ngx/limits/context.h"

// Whether a result's admission stands: the request was let through and the result took (or,
// with quantity 0, had room for) its cost.
bool rl_settle_admitted(const rl_ctx_t* ctx, const rl_result_t& res) noexcept;
// A settle value from outside: the number, or -1 when it is not one (logged, once a second per
// zone and worker).
int64_t rl_settle_parse(rl_ctx_t* ctx, const rl_result_t& res, const ngx_str_t& value) noexcept;
// Each result's settle (res.delta != 0) to its store: those kept in a zone's table here, under
// the zones' locks; the others sent.
void rl_engine_settle(rl_ctx_t* ctx) noexcept;
