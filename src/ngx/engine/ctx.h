// What is being limited, as the engine keeps it (ctx.cpp): made by a front end for each thing it
// limits (an HTTP request), with a result per limit that applies to it.
#pragma once

#include "ngx/limits/context.h"

// A new context for what `fe` limits (`subject`, living as long as `pool`), where `scope`'s
// limits apply: a result per applied limit whose key is not empty (keys, costs and tiers'
// values evaluated through fe->evaluate), and `front_bytes` for the front end's part
// (rl_ctx_front). One allocation, held by a cleanup of `pool` that ends every store's wait when
// the pool goes. nullptr on error.
rl_ctx_t* rl_ctx_create(ngx_pool_t* pool, ngx_log_t* log, const rl_scope_t* scope, const rl_frontend_t* fe,
                        void* subject, size_t front_bytes) noexcept;
// The context made ready for the next thing of the same kind (a session's next datagram): its
// results' keys, policies and costs kept, their decisions cleared (what was decided before
// stands), calendar windows moved to now.
void rl_ctx_renew(rl_ctx_t* ctx) noexcept;
// The pool cleanup that holds the context: a front end finds the context again by it.
void rl_ctx_cleanup(void* data) noexcept;
