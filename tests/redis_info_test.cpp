#include "core/wire/redis_info.h"

#include <gtest/gtest.h>

#include <string>

TEST(RedisInfo, FindsAFieldOnItsOwnLine) {
    std::string info = "# Server\r\nredis_version:7.0.15\r\nredis_mode:sentinel\r\nos:Linux\r\n";
    EXPECT_EQ(rl::info_field(info, "redis_mode"), "sentinel");
    EXPECT_EQ(rl::info_field(info, "os"), "Linux");
    EXPECT_EQ(rl::info_field("redis_mode:cluster", "redis_mode"), "cluster");  // no final CRLF
}

TEST(RedisInfo, APrefixOrAValueIsNotTheField) {
    EXPECT_EQ(rl::info_field("redis_mode_x:cluster\r\n", "redis_mode"), "");
    EXPECT_EQ(rl::info_field("x:redis_mode:cluster\r\n", "redis_mode"), "");
    EXPECT_EQ(rl::info_field("", "redis_mode"), "");
    EXPECT_EQ(rl::info_field("redis_mode:\r\n", "redis_mode"), "");
}

TEST(RedisInfo, PortsAreDigitsInRange) {
    EXPECT_EQ(rl::parse_port("6379"), 6379);
    EXPECT_EQ(rl::parse_port("65535"), 65535);
    EXPECT_EQ(rl::parse_port("0"), 0);
    EXPECT_EQ(rl::parse_port("65536"), 0);
    EXPECT_EQ(rl::parse_port("-1"), 0);
    EXPECT_EQ(rl::parse_port("63 79"), 0);
    EXPECT_EQ(rl::parse_port(""), 0);
    EXPECT_EQ(rl::parse_port("000006379"), 0);
}
