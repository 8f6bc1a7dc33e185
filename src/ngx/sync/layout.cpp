// A sync zone's area in its shared memory: laid out once, found again after a reload.
#include "ngx/sync/layout.h"

#include "core/text/log_text.h"

#include <sys/random.h>
#include <unistd.h>

size_t rl_sync_area_bytes(uint32_t cap) {
    size_t bytes = sizeof(rl_sync_shm_t) + size_t{cap} * (sizeof(uint32_t) + sizeof(uint8_t));
    return (bytes + 7) & ~size_t{7};
}

void rl_sync_area_format(void* area, uint32_t cap) {
    auto* h = static_cast<rl_sync_shm_t*>(area);
    ngx_memzero(h, rl_sync_area_bytes(cap));
    h->magic = kRlSyncMagic;
    h->cap = cap;
    h->hosts = 1;
    h->last_ok = ngx_current_msec;  // not "unavailable" before the first round
    // This host among the others in Redis: its name and a random tag, kept across reloads.
    char name[32] = "nginx";
    if (gethostname(name, sizeof(name)) != 0) ngx_memcpy(name, "nginx", 6);
    name[sizeof(name) - 1] = '\0';
    uint64_t tag = 0;
    if (getrandom(&tag, sizeof(tag), GRND_NONBLOCK) != static_cast<ssize_t>(sizeof(tag))) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        tag = static_cast<uint64_t>(ngx_pid) * 0x9e3779b97f4a7c15ULL ^
              static_cast<uint64_t>(ts.tv_sec * 1000000 + ts.tv_nsec / 1000);
    }
    size_t namelen = rl::log_text(name, ngx_strlen(name), reinterpret_cast<char*>(h->host_id), 24);
    u_char* end = ngx_snprintf(h->host_id + namelen, kRlHostIdLen - namelen, "-%016uxL", tag);
    h->host_id_len = static_cast<uint32_t>(end - h->host_id);
}

bool rl_sync_area_compatible(const void* area, uint32_t cap) {
    const auto* h = static_cast<const rl_sync_shm_t*>(area);
    return h != nullptr && h->magic == kRlSyncMagic && h->cap == cap;
}
