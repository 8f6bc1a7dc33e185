// The Lua's source, src/core/wire/lua (RL_LUA_DIR): every file is a chunk that the Lua 5.1
// Redis runs parses on its own (luac5.1 -p, package lua5.1), and so is each text assembled from
// them; lua/embed.sh --where maps a line of each text back to its file's line.
#include "core/wire/redis_script.h"

#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

namespace {

namespace fs = std::filesystem;

struct Ran {
    int status;
    std::string out;  // stdout and stderr
};

Ran run(const std::string& cmd) {
    Ran r{-1, ""};
    FILE* p = popen((cmd + " 2>&1").c_str(), "r");
    if (!p) return r;
    char buf[4096];
    size_t n;
    while ((n = fread(buf, 1, sizeof(buf), p)) > 0) r.out.append(buf, n);
    int st = pclose(p);
    r.status = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
    return r;
}

std::string quoted(const std::string& s) {
    std::string q = "'";
    for (char c : s) q += c == '\'' ? std::string("'\\''") : std::string(1, c);
    return q + "'";
}

// luac5.1 -p on a file: its status and complaint.
Ran parse(const std::string& path) { return run("luac5.1 -p " + quoted(path)); }

std::vector<std::string> lua_files() {
    std::vector<std::string> out;
    for (const auto& e : fs::directory_iterator(RL_LUA_DIR)) {
        if (e.path().extension() == ".lua") out.push_back(e.path().string());
    }
    std::sort(out.begin(), out.end());
    return out;
}

std::vector<std::string> lines_of(std::string_view text) {
    std::vector<std::string> out;
    std::istringstream in{std::string(text)};
    for (std::string l; std::getline(in, l);) out.push_back(l);
    return out;
}

class LuaSource : public ::testing::Test {
  protected:
    void SetUp() override {
        if (run("command -v luac5.1").status != 0) GTEST_FAIL() << "luac5.1 is missing: apt-get install lua5.1";
        dir_ = fs::temp_directory_path() / ("rl_lua_source_test." + std::to_string(getpid()));
        fs::create_directories(dir_);
    }
    void TearDown() override { fs::remove_all(dir_); }

    std::string write(const std::string& name, std::string_view text) {
        std::string path = (dir_ / name).string();
        std::ofstream(path, std::ios::binary) << text;
        return path;
    }

    fs::path dir_;
};

// The check can fail: luac5.1 rejects what Lua 5.1 does not parse (here, Lua 5.2's goto).
TEST_F(LuaSource, LuacRejectsWhatDoesNotParse) {
    EXPECT_EQ(parse(write("good.lua", "local x = 1\nreturn x\n")).status, 0);
    Ran r = parse(write("bad.lua", "local x = 1\ngoto done\n::done::\n"));
    EXPECT_NE(r.status, 0);
    EXPECT_NE(r.out.find("bad.lua:2"), std::string::npos) << r.out;
}

TEST_F(LuaSource, EveryFileParses) {
    std::vector<std::string> files = lua_files();
    EXPECT_GE(files.size(), 10u);
    for (const std::string& f : files) {
        Ran r = parse(f);
        EXPECT_EQ(r.status, 0) << f << ": " << r.out;
    }
}

// Each text as Redis gets it (a library's first line, "#!lua name=...", is skipped by luac as
// by Redis): together the files stay within Lua's limits (200 locals, 60 upvalues a function).
TEST_F(LuaSource, EveryTextParses) {
    for (bool injected : {false, true}) {
        Ran r = parse(write("script.lua", rl::script_text(injected)));
        EXPECT_EQ(r.status, 0) << "the script, injected time " << injected << ": " << r.out;
        r = parse(write("library.lua", rl::function_library_text(injected)));
        EXPECT_EQ(r.status, 0) << "the library, injected time " << injected << ": " << r.out;
    }
}

// The line of file `name` of src/core/wire/lua numbered `n` (from 1).
std::string line_of(const std::string& name, size_t n) {
    std::ifstream in(std::string(RL_LUA_DIR) + "/" + name);
    std::string l;
    for (size_t k = 0; k < n; k++) {
        if (!std::getline(in, l)) return "(no line " + std::to_string(n) + " in " + name + ")";
    }
    return l;
}

// Redis reports an error at user_script:N (EVAL) or user_function:N (FCALL): --where names
// the file and line that text's line N came from. Checked on every line of code that has a
// function in it, in each of the four texts.
TEST_F(LuaSource, WhereMapsTextLinesBackToFiles) {
    const std::string prefix = "src/core/wire/lua/";
    size_t checked = 0;
    for (bool injected : {false, true}) {
        for (bool library : {false, true}) {
            const std::string form = library ? "user_function:" : "user_script:";
            std::vector<std::string> text =
                lines_of(library ? rl::function_library_text(injected) : rl::script_text(injected));
            std::string cmd = "sh " + quoted(std::string(RL_LUA_DIR) + "/embed.sh") + " --where" + (injected ? " --test" : "");
            std::vector<size_t> at;  // from 0
            for (size_t i = 0; i < text.size(); i++) {
                if (text[i].find("function") == std::string::npos || text[i].rfind("--", 0) == 0) continue;
                if (text[i].rfind("redis.register_function", 0) == 0) continue;  // not from a file
                at.push_back(i);
                cmd += " " + form + std::to_string(i + 1);
            }
            if (!library) {  // and the script's last line, "return run(KEYS, ARGV)"
                at.push_back(text.size() - 1);
                cmd += " " + form + std::to_string(text.size());
            } else {  // beyond the files: the registration
                cmd += " " + form + std::to_string(text.size());
            }
            Ran r = run(cmd);
            ASSERT_EQ(r.status, 0) << cmd << ": " << r.out;
            std::vector<std::string> out = lines_of(r.out);
            ASSERT_EQ(out.size(), at.size() + (library ? 1 : 0)) << r.out;
            for (size_t k = 0; k < at.size(); k++) {
                // "src/core/wire/lua/<file>:<line>"
                const std::string& o = out[k];
                ASSERT_EQ(o.rfind(prefix, 0), 0u) << form << at[k] + 1 << ": " << o;
                const size_t colon = o.rfind(':');
                const std::string file = o.substr(prefix.size(), colon - prefix.size());
                EXPECT_EQ(line_of(file, std::strtoul(o.c_str() + colon + 1, nullptr, 10)), text[at[k]])
                    << form << at[k] + 1 << (injected ? " --test" : "") << " -> " << o;
                checked++;
            }
            if (library) {
                EXPECT_EQ(out.back().rfind("beyond the parts: the library's registration", 0), 0u) << out.back();
            }
        }
    }
    EXPECT_GT(checked, 100u);
}

}  // namespace
