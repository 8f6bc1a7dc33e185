#include "core/text/log_text.h"

#include <gtest/gtest.h>

#include <string>

namespace {

std::string run(const std::string& in, size_t cap) {
    std::string out(cap, '?');
    out.resize(rl::log_text(in.data(), in.size(), out.data(), cap));
    return out;
}

TEST(LogText, PrintableTextIsKept) { EXPECT_EQ(run("ERR unknown command 'X'", 64), "ERR unknown command 'X'"); }

TEST(LogText, ControlBytesAndBackslashAreEscaped) {
    EXPECT_EQ(run(std::string("a\r\nb\x1b[31m\0c\\", 12), 64), "a\\x0d\\x0ab\\x1b[31m\\x00c\\x5c");
    EXPECT_EQ(run("\xff\x7f", 64), "\\xff\\x7f");
}

TEST(LogText, LongTextIsCutWithAnEllipsis) {
    std::string in(1000, 'x');
    std::string out = run(in, 20);
    EXPECT_EQ(out.size(), 20u);
    EXPECT_EQ(out, std::string(17, 'x') + "...");
    EXPECT_EQ(run("abcd", 4), "abcd");    // exactly fits: no ellipsis
    EXPECT_EQ(run("abcde", 4), "a...");
    EXPECT_EQ(run("\n\n", 5), "...");    // an escape never gets cut in half
}

TEST(LogText, ForgedLogLineStaysOnOneLine) {
    std::string out = run("x\n2026/01/01 00:00:00 [emerg] 1#1: forged", rl::kLogTextCap);
    EXPECT_EQ(out.find('\n'), std::string::npos);
    EXPECT_NE(out.find("\\x0a2026/01/01"), std::string::npos);
}

TEST(LogText, OwnBufferForOneLogCall) {
    rl::LogText t(std::string_view("host\x1b[2J\x00\xff", 10));
    EXPECT_EQ(std::string(t.text, t.len), "host\\x1b[2J\\x00\\xff");
    rl::LogText cut(std::string(1000, '\n'));
    EXPECT_EQ(cut.len, rl::kLogTextCap - 1);  // 63 escapes and the ellipsis: never more than the buffer
    EXPECT_EQ(std::string(cut.text + cut.len - 3, 3), "...");
}

}  // namespace
