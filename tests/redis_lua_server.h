// A private redis-server (redis_test_server.h) with both variants of the Lua script and of
// its function library loaded, as the differential tests need it.
#pragma once
#include <gtest/gtest.h>

#include <memory>
#include <string>

#include "core/wire/redis_script.h"
#include "redis_test_server.h"

namespace rltest {

inline void start_lua_server(std::unique_ptr<RedisServer>& server, Context& conn) {
    server = std::make_unique<rltest::RedisServer>();
    ASSERT_TRUE(server->ready()) << server->error();
    conn = server->connect();
    ASSERT_TRUE(conn && conn->err == 0);
    for (bool injected : {false, true}) {
        Reply r = rltest::command(conn.get(), {"SCRIPT", "LOAD", std::string(rl::script_text(injected))});
        ASSERT_TRUE(r && r->type == REDIS_REPLY_STRING) << (r ? r->str : "no reply");
        ASSERT_EQ(std::string(r->str), rl::script_sha1(injected)) << "script_sha1 differs from SCRIPT LOAD";
        r = rltest::command(conn.get(), {"FUNCTION", "LOAD", "REPLACE", std::string(rl::function_library_text(injected))});
        ASSERT_TRUE(r && r->type == REDIS_REPLY_STRING) << (r ? r->str : "no reply");
        ASSERT_EQ(std::string(r->str), rl::function_name(injected)) << "the library's name is its function's";
    }
}

}  // namespace rltest
