// TEMPORARY: the interface of src/core/sync_command.h as the design declares it, until the
// sync-core branch is merged (then this file and sync_stub.cpp go).
#pragma once
#include <cstddef>
#include <cstdint>
#include <string_view>
#include "core/key_hash.h"
#include "core/redis_command.h"
#include "core/sync.h"

namespace rl {

struct SyncItem {
    std::string_view zone; KeyHash hash; const Policy* policy = nullptr;
    Delta delta;
    int64_t want = 0, need = 0;
    int64_t hosts = 1;
    int64_t give_back = 0;
    int64_t give_back_at = 0;
};
struct SyncResult { State global; int64_t granted; int64_t retry_after_us; };

size_t sync_command_len(CommandScript, bool injected_time, std::string_view prefix,
                        const SyncItem* items, size_t n, int64_t now_us) noexcept;
size_t write_sync_command(char* buf, CommandScript, bool injected_time, std::string_view prefix,
                          const SyncItem* items, size_t n, int64_t now_us) noexcept;
size_t sync_command_bound(std::string_view prefix, const SyncItem* items, size_t n) noexcept;
size_t sync_reply_len(size_t n) noexcept;
bool decode_sync_reply(const int64_t* values, size_t nvalues, size_t nitems,
                       SyncResult* out, int64_t* redis_now) noexcept;
size_t hosts_command_len(CommandScript, bool injected_time, std::string_view prefix, std::string_view zone,
                         std::string_view host_id, int64_t window_us, int64_t now_us) noexcept;
size_t write_hosts_command(char* buf, CommandScript, bool injected_time, std::string_view prefix, std::string_view zone,
                           std::string_view host_id, int64_t window_us, int64_t now_us) noexcept;

}  // namespace rl
