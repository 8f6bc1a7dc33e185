#include "redis_command.h"

#include <cstring>

#include "redis_keys.h"
#include "redis_script.h"

namespace rl {

namespace {

// Writes RESP into buf, or only counts the bytes when buf is null: one code path measures
// and writes, so the two passes cannot disagree.
class Resp {
  public:
    explicit Resp(char* buf) : buf_(buf) {}

    size_t size() const { return len_; }

    void array(size_t n) {
        raw("*", 1);
        digits(n);
        raw("\r\n", 2);
    }

    void bulk(std::string_view s) {
        bulk_head(s.size());
        raw(s.data(), s.size());
        raw("\r\n", 2);
    }

    void bulk_int(int64_t v) {
        char tmp[20];
        uint64_t u = v < 0 ? 0 - static_cast<uint64_t>(v) : static_cast<uint64_t>(v);
        size_t n = 0;
        do {
            tmp[sizeof tmp - 1 - n++] = static_cast<char>('0' + u % 10);
            u /= 10;
        } while (u > 0);
        bulk_head(n + (v < 0));
        if (v < 0) raw("-", 1);
        raw(tmp + sizeof tmp - n, n);
        raw("\r\n", 2);
    }

    void bulk_key(std::string_view prefix, const RedisCheck& c) {
        size_t n = redis_key_len(prefix, c.zone, c.policy->algo);
        bulk_head(n);
        if (buf_ != nullptr) redis_key(buf_ + len_, prefix, c.zone, c.hash, c.policy->algo);
        len_ += n;
        raw("\r\n", 2);
    }

  private:
    void raw(const char* s, size_t n) {
        if (buf_ != nullptr && n > 0) std::memcpy(buf_ + len_, s, n);
        len_ += n;
    }

    void digits(uint64_t u) {
        char tmp[20];
        size_t n = 0;
        do {
            tmp[sizeof tmp - 1 - n++] = static_cast<char>('0' + u % 10);
            u /= 10;
        } while (u > 0);
        raw(tmp + sizeof tmp - n, n);
    }

    void bulk_head(size_t n) {
        raw("$", 1);
        digits(n);
        raw("\r\n", 2);
    }

    char* buf_;
    size_t len_ = 0;
};

int64_t clamp_cost(int64_t cost) { return cost < 0 ? 0 : (cost > kExact ? kExact : cost); }

size_t script_command(char* buf, std::string_view mode, CommandScript script, bool injected_time,
                      std::string_view prefix, const RedisCheck* checks, size_t n, int64_t now_us) {
    Resp r(buf);
    r.array(3 + n + kArgvHead + kArgvPerCheck * n);
    if (script == CommandScript::eval) {
        r.bulk("EVAL");
        r.bulk(script_text(injected_time));
    } else {
        r.bulk("EVALSHA");
        r.bulk(std::string_view(script_sha1(injected_time), 40));
    }
    r.bulk_int(static_cast<int64_t>(n));
    for (size_t i = 0; i < n; i++) r.bulk_key(prefix, checks[i]);
    r.bulk(mode);
    r.bulk_int(injected_time ? now_us : 0);
    for (size_t i = 0; i < n; i++) {
        const Policy& p = *checks[i].policy;
        r.bulk_int(static_cast<int64_t>(p.algo));
        r.bulk_int(p.requests);
        r.bulk_int(p.period_us);
        r.bulk_int(p.burst);
        r.bulk_int(p.refill);
        r.bulk_int(p.token);
        r.bulk_int(p.depth);
        r.bulk_int(p.weight_scale);
        r.bulk_int(clamp_cost(checks[i].cost));
        r.bulk_int(checks[i].at);
    }
    return r.size();
}

}  // namespace

size_t decide_command_len(CommandScript script, bool injected_time, std::string_view prefix, const RedisCheck* checks,
                          size_t n, int64_t now_us) noexcept {
    return script_command(nullptr, "decide", script, injected_time, prefix, checks, n, now_us);
}

size_t write_decide_command(char* buf, CommandScript script, bool injected_time, std::string_view prefix,
                            const RedisCheck* checks, size_t n, int64_t now_us) noexcept {
    return script_command(buf, "decide", script, injected_time, prefix, checks, n, now_us);
}

size_t refund_command_len(CommandScript script, bool injected_time, std::string_view prefix, const RedisCheck* checks,
                          size_t n, int64_t now_us) noexcept {
    return script_command(nullptr, "refund", script, injected_time, prefix, checks, n, now_us);
}

size_t write_refund_command(char* buf, CommandScript script, bool injected_time, std::string_view prefix,
                            const RedisCheck* checks, size_t n, int64_t now_us) noexcept {
    return script_command(buf, "refund", script, injected_time, prefix, checks, n, now_us);
}

size_t refund_command_len(std::string_view prefix, const RedisCheck* checks, size_t n) noexcept {
    return refund_command_len(CommandScript::evalsha, false, prefix, checks, n, 0);
}

size_t write_refund_command(char* buf, std::string_view prefix, const RedisCheck* checks, size_t n) noexcept {
    return write_refund_command(buf, CommandScript::evalsha, false, prefix, checks, n, 0);
}

bool decode_decide_reply(const int64_t* values, size_t n, size_t nchecks, Decision* out, int64_t* redis_now) noexcept {
    if (values == nullptr || n != decide_reply_len(nchecks)) return false;
    bool all = true;
    for (size_t i = 0; i < nchecks; i++) {
        const int64_t* v = values + kReplyHead + kReplyPerCheck * i;
        if ((v[0] != 0 && v[0] != 1) || v[1] < 0 || v[2] < 0 || v[3] < kNever) return false;
        all = all && v[0] == 1;
    }
    // The script's verdict must agree with its parts.
    if (values[0] != (all ? 1 : 0) || values[1] < 0) return false;
    for (size_t i = 0; i < nchecks; i++) {
        const int64_t* v = values + kReplyHead + kReplyPerCheck * i;
        out[i].allowed = v[0] == 1;
        out[i].remaining = v[1];
        out[i].reset_us = v[2];
        out[i].retry_after_us = v[3];
    }
    if (redis_now != nullptr) *redis_now = values[1];
    return true;
}

}  // namespace rl
