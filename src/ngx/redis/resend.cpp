// A command that follows Redis's redirections (resend.h).
#include "ngx/redis/resend.h"

#include "ngx/metrics/metrics.h"
#include "ngx/redis/cluster.h"

namespace {

void on_reply(rl_conn_op_t* op, redisReply* reply) noexcept {
    auto* cmd = static_cast<rl_resend_t*>(op->data);
    auto* node = static_cast<rl_redis_node_t*>(op->conn->data);
    rl_retry_t retry{};
    rl_reply_e verdict = rl_node_reply(node, reply, &retry);
    // Nothing ran: the same bytes go where Redis said (the map already knows a MOVED).
    if (verdict == RL_REPLY_RETRY && rl_node_retry_left(&cmd->tries) && rl_resend_send(cmd, retry.node, retry.ask)) {
        return;
    }
    // RL_REPLY_SPLIT: a command of one key has nothing to split; as a failure.
    cmd->done(cmd, node, reply, verdict == RL_REPLY_TAKE);
}

}  // namespace

rl_redis_node_t* rl_resend_route(rl_redis_t* redis, uint16_t slot) noexcept {
    if (redis->cluster) return redis->nodes.n > 0 ? rl_cluster_route(redis, slot) : nullptr;
    return redis->nodes.n > 0 ? redis->nodes.elts[0] : nullptr;
}

bool rl_resend_send(rl_resend_t* cmd, rl_redis_node_t* node, bool ask) noexcept {
    return node != nullptr && rl_node_send(node, cmd->bytes, cmd->len, on_reply, cmd, cmd->weight, ask) != nullptr;
}

bool rl_resend_failed(rl_redis_node_t* node, const char* what, const redisReply* reply, bool taken) noexcept {
    if (taken && reply->type != REDIS_REPLY_ERROR) return false;
    if (reply != nullptr) rl_metrics_redis_error(node->redis->conn.metrics, RL_REDIS_ERR_ERROR_REPLY);
    rl_node_log_reply(node, what, reply);
    return true;
}
