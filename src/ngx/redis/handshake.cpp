// The handshake every connection of a ratelimit_redis starts with: AUTH, SELECT, INFO (cluster,
// standalone or Sentinel, told by the server on each connection, so that the master never
// waits on the network), ROLE (sentinel=), and the Lua loaded both ways; and the check of
// its replies.
#include "ngx/redis/redis.h"

#include "ngx/redis/node.h"

#include "core/text/log_text.h"
#include "core/wire/redis_info.h"
#include "core/wire/redis_script.h"

bool rl_redis_build_handshake(ngx_pool_t* pool, rl_redis_t* redis) noexcept {
    ngx_str_t out = ngx_null_string;
    ngx_uint_t replies = 0;
    if (redis->password.len) {
        if (!rl_redis_append_auth(pool, out, redis->username, redis->password)) return false;
        replies++;
    }
    if (redis->database) {
        u_char db[NGX_INT_T_LEN];
        size_t n = static_cast<size_t>(ngx_sprintf(db, "%i", redis->database) - db);
        const char* argv[2] = {"SELECT", reinterpret_cast<const char*>(db)};
        size_t lens[2] = {6, n};
        if (!rl_redis_append_command(pool, out, 2, argv, lens)) return false;
        replies++;
    }
    // Cluster, standalone or Sentinel: told by the server on each connection, so that the
    // master never waits on the network (nginx -t and reloads do not depend on Redis).
    // INFO's default sections: redis_mode (server) and, for servers that leave it out,
    // cluster_enabled (cluster).
    const char* info[1] = {"INFO"};
    size_t info_lens[1] = {4};
    if (!rl_redis_append_command(pool, out, 1, info, info_lens)) return false;
    redis->mode_check = replies++;
    if (redis->sentinel.len) {
        // What a Sentinel named may since have become a replica: its ROLE says.
        const char* role[1] = {"ROLE"};
        size_t role_lens[1] = {4};
        if (!rl_redis_append_command(pool, out, 1, role, role_lens)) return false;
        redis->role_check = replies++;
    }
    // The checks run as a Function (FCALL: its Lua is compiled once, at load), or on servers
    // without Functions (before Redis 7) as a script (EVALSHA): both are loaded, the replies tell.
    std::string_view library = rl::function_library_text();
    const char* fn_argv[4] = {"FUNCTION", "LOAD", "REPLACE", library.data()};
    size_t fn_lens[4] = {8, 4, 7, library.size()};
    size_t fn_at = out.len;
    if (!rl_redis_append_command(pool, out, 4, fn_argv, fn_lens)) return false;
    redis->function_check = replies++;
    std::string_view script = rl::script_text(false);
    const char* argv[3] = {"SCRIPT", "LOAD", script.data()};
    size_t lens[3] = {6, 4, script.size()};
    size_t script_at = out.len;
    if (!rl_redis_append_command(pool, out, 3, argv, lens)) return false;
    replies++;
    redis->conn.handshake = out.data;
    redis->conn.handshake_len = out.len;
    redis->conn.handshake_replies = replies;
    redis->function_load = {script_at - fn_at, out.data + fn_at};
    redis->script_load = {out.len - script_at, out.data + script_at};
    return true;
}

// A reply to the handshake: an error (WRONGPASS, NOAUTH, ERR DB index...) or a server of the
// other mode makes the connection fail, so on_error applies, and is logged (rate limited).
bool rl_redis_check_handshake(rl_conn_t* conn, ngx_uint_t index, const redisReply* reply) noexcept {
    auto* node = static_cast<rl_redis_node_t*>(conn->data);
    rl_redis_t* redis = node->redis;
    if (index == redis->function_check) {
        // No Functions here (an older Redis, or an ACL without FUNCTION): scripts serve.
        node->scripts = reply->type == REDIS_REPLY_ERROR;
        return true;
    }
    if (reply->type == REDIS_REPLY_ERROR) {
        // The reply names the problem, never the password.
        char text[rl::kLogTextCap];
        size_t n = rl::log_text(reply->str, reply->len, text, sizeof(text));
        rl_redis_log_error(&redis->conn, 0, "ratelimit redis \"%V\" at %V: handshake failed: %*s", &redis->name,
                           &conn->addr.name, n, text);
        return false;
    }
    if (index == redis->role_check && redis->sentinel.len) {
        bool master = reply->type == REDIS_REPLY_ARRAY && reply->elements > 0 &&
                      reply->element[0]->type == REDIS_REPLY_STRING && reply->element[0]->len == 6 &&
                      ngx_strncmp(reply->element[0]->str, "master", 6) == 0;
        if (master) return true;
        rl_redis_log_error(&redis->conn, 0, "ratelimit redis \"%V\" at %V is a replica, not the master \"%V\": "
                           "asking the Sentinels again", &redis->name, &conn->addr.name, &redis->sentinel);
        return false;
    }
    if (index != redis->mode_check || reply->type != REDIS_REPLY_STRING) return true;
    std::string_view mode = rl::info_field({reply->str, reply->len}, "redis_mode");
    if (mode == "sentinel") {
        rl_redis_log_error(&redis->conn, 0, "ratelimit_redis \"%V\": %V is a Sentinel: use \"sentinel=MASTER_NAME\" "
                           "and the Sentinels' addresses in %s:%ui", &redis->name, &conn->addr.name, redis->file,
                           redis->line);
        return false;
    }
    bool cluster = mode == "cluster" || rl::info_field({reply->str, reply->len}, "cluster_enabled") == "1";
    if (cluster == redis->cluster) return true;
    rl_redis_log_error(&redis->conn, 0,
                       redis->cluster ? "ratelimit_redis \"%V\" is configured as a cluster, but %V is a standalone "
                                        "Redis (cluster mode is disabled) in %s:%ui"
                                      : "ratelimit_redis \"%V\" is configured as a standalone server, but %V is a "
                                        "Redis Cluster node: add \"cluster\" in %s:%ui",
                       &redis->name, &conn->addr.name, redis->file, redis->line);
    return false;
}

bool rl_redis_append_command(ngx_pool_t* pool, ngx_str_t& out, int argc, const char** argv,
                             const size_t* lens) noexcept {
    char* cmd = nullptr;
    int len = redisFormatCommandArgv(&cmd, argc, argv, lens);
    if (len < 0 || cmd == nullptr) return false;
    auto* buf = static_cast<u_char*>(ngx_pnalloc(pool, out.len + static_cast<size_t>(len)));
    if (buf != nullptr) {
        if (out.len) ngx_memcpy(buf, out.data, out.len);
        ngx_memcpy(buf + out.len, cmd, static_cast<size_t>(len));
        out.data = buf;
        out.len += static_cast<size_t>(len);
    }
    redisFreeCommand(cmd);
    return buf != nullptr;
}

bool rl_redis_append_auth(ngx_pool_t* pool, ngx_str_t& out, const ngx_str_t& username,
                          const ngx_str_t& password) noexcept {
    const char* argv[3] = {"AUTH", nullptr, nullptr};
    size_t lens[3] = {4, 0, 0};
    int argc = 1;
    if (username.len) {
        argv[argc] = reinterpret_cast<const char*>(username.data);
        lens[argc++] = username.len;
    }
    argv[argc] = reinterpret_cast<const char*>(password.data);
    lens[argc++] = password.len;
    return rl_redis_append_command(pool, out, argc, argv, lens);
}
