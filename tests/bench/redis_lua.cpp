// Redis's cost of the Lua per check, called as FCALL of the function library and as EVALSHA of
// the script (and of any other script given with --eval, e.g. an earlier version's), on the
// same batches against one private redis-server. A benchmark, not a test: it prints a table
// and never fails because of a figure. Build and run with tests/bench/redis_lua.sh.
//
// Per workload (algorithm x keys x batch shape) and way of calling, each round sends the same
// number of calls (a few in flight) and reads, around them, Redis's main-thread CPU time (INFO
// cpu) and the time spent inside the command (INFO commandstats: the Lua, without parsing or
// network). Ways are measured in turn within a round, in a rotating order; the medians over
// the rounds are reported, and FCALL's ratio to EVALSHA.
#include <hiredis/hiredis.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cinttypes>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <map>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "../redis_test_server.h"
#include "core/algo/policy.h"
#include "core/wire/redis_command.h"
#include "core/wire/redis_script.h"
#include "core/wire/sha1.h"

namespace {

using rltest::Reply;

struct Way {
    std::string name;
    rl::CommandScript script;  // fcall or evalsha
    std::string sha;           // evalsha: the script's
};

struct Workload {
    rl::Algo algo;
    bool hot;       // one key, else random keys among kKeys
    size_t groups;  // groups of one check per call
};

constexpr size_t kKeys = 100000;
constexpr size_t kInFlight = 4;

rl::Policy policy_for(rl::Algo algo) {
    rl::Policy p;
    p.algo = algo;
    p.requests = algo == rl::Algo::log ? 100 : 1000;
    p.period_us = 1000000;
    p.burst = rl::is_bucket(algo) ? 100 : 0;
    if (const char* err = rl::finish_policy(p)) {
        std::fprintf(stderr, "policy: %s\n", err);
        std::exit(2);
    }
    return p;
}

// INFO's CPU and command fields as numbers.
std::map<std::string, double> info(redisContext* c) {
    std::map<std::string, double> out;
    Reply r(static_cast<redisReply*>(redisCommand(c, "INFO cpu commandstats")));
    if (!r || r->type != REDIS_REPLY_STRING) return out;  // RESP2: a bulk string
    std::istringstream in(std::string(r->str, r->len));
    std::string line;
    while (std::getline(in, line)) {
        size_t colon = line.find(':');
        if (colon == std::string::npos || line[0] == '#') continue;
        std::string key = line.substr(0, colon), value = line.substr(colon + 1);
        if (key.rfind("cmdstat_", 0) == 0) {
            // calls=N,usec=N,...: keep usec.
            size_t at = value.find("usec=");
            if (at != std::string::npos) out[key] = std::atof(value.c_str() + at + 5);
        } else {
            out[key] = std::atof(value.c_str());
        }
    }
    return out;
}

double main_thread_cpu_us(const std::map<std::string, double>& i) {
    auto user = i.find("used_cpu_user_main_thread"), sys = i.find("used_cpu_sys_main_thread");
    if (user != i.end() && sys != i.end()) return (user->second + sys->second) * 1e6;
    return (i.at("used_cpu_user") + i.at("used_cpu_sys")) * 1e6;  // before Redis 6.2: the process
}

double command_us(const std::map<std::string, double>& i) {
    double sum = 0;
    for (const char* k : {"cmdstat_fcall", "cmdstat_evalsha"}) {
        auto it = i.find(k);
        if (it != i.end()) sum += it->second;
    }
    return sum;
}

struct Sample {
    double cpu_per_check_us, cmd_per_check_us, checks_per_s;
};

class Bench {
  public:
    Bench(rltest::RedisServer& server, std::vector<Way> ways, size_t calls_per_round)
        : ways_(std::move(ways)), conn_(server.connect()), target_(calls_per_round) {
        if (!conn_ || conn_->err) {
            std::fprintf(stderr, "cannot connect to redis-server\n");
            std::exit(2);
        }
    }

    redisContext* conn() { return conn_.get(); }

    // One measurement: `calls` calls of the workload's batches, `way`.
    Sample measure(const Workload& w, const Way& way, std::mt19937_64& rng) {
        const rl::Policy p = policy_for(w.algo);
        const size_t calls = std::max<size_t>(8, target_ / w.groups);
        std::vector<std::string> cmds;
        std::vector<rl::RedisCheck> checks(w.groups);
        std::vector<rl::RedisGroup> groups(w.groups);
        for (size_t c = 0; c < calls; c++) {
            for (size_t g = 0; g < w.groups; g++) {
                checks[g].zone = "bench";
                checks[g].hash = w.hot ? rl::KeyHash{1, 1} : rl::KeyHash{rng() % kKeys, 7};
                checks[g].policy = &p;
                checks[g].cost = 1;
                groups[g] = rl::RedisGroup{&checks[g], 1};
            }
            size_t len = rl::batch_command_len(way.script, false, "rlbench:", groups.data(), w.groups, 0);
            std::string cmd(len, '\0');
            rl::write_batch_command(cmd.data(), way.script, false, "rlbench:", groups.data(), w.groups, 0);
            if (way.script == rl::CommandScript::evalsha) {
                size_t at = cmd.find(rl::script_sha1(false));
                cmd.replace(at, rl::kSha1HexLen, way.sha);
            }
            cmds.push_back(std::move(cmd));
        }
        redisContext* c = conn_.get();
        auto before = info(c);
        auto t0 = std::chrono::steady_clock::now();
        size_t sent = 0, got = 0;
        while (got < calls) {
            while (sent < calls && sent - got < kInFlight) {
                redisAppendFormattedCommand(c, cmds[sent].data(), cmds[sent].size());
                sent++;
            }
            Reply r = rltest::next_reply(c);
            check_reply(r.get(), w.groups);
            got++;
        }
        auto t1 = std::chrono::steady_clock::now();
        auto after = info(c);
        const double n = static_cast<double>(calls * w.groups);
        const double wall = std::chrono::duration<double>(t1 - t0).count();
        return Sample{(main_thread_cpu_us(after) - main_thread_cpu_us(before)) / n,
                      (command_us(after) - command_us(before)) / n, n / wall};
    }

  private:
    static void check_reply(const redisReply* r, size_t ngroups) {
        if (r == nullptr || r->type != REDIS_REPLY_ARRAY || r->elements != rl::decide_reply_len(ngroups)) {
            std::fprintf(stderr, "bad reply: %s\n", r && r->type == REDIS_REPLY_ERROR ? r->str : "(shape)");
            std::exit(2);
        }
    }

    std::vector<Way> ways_;
    rltest::Context conn_;
    size_t target_;
};

double median(std::vector<double> v) {
    std::sort(v.begin(), v.end());
    size_t n = v.size();
    return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

std::string load(redisContext* c, const std::vector<std::string>& args) {
    Reply r = rltest::command(c, args);
    if (!r || r->type != REDIS_REPLY_STRING) {
        std::fprintf(stderr, "%s %s failed: %s\n", args[0].c_str(), args[1].c_str(),
                     r && r->type == REDIS_REPLY_ERROR ? r->str : "no reply");
        std::exit(2);
    }
    return std::string(r->str, r->len);
}

void usage() {
    std::fprintf(stderr,
                 "usage: rl_redis_lua_bench [--rounds N] [--checks N] [--algos gcra,token,...] [--groups N]\n"
                 "                          [--keys hot|random] [--eval NAME=FILE]...\n"
                 "  --rounds  measurements per workload and way; medians are reported   (5)\n"
                 "  --checks  checks per measurement                                    (6400)\n"
                 "  --groups  only batches of N groups of one check            (64, then 1)\n"
                 "  --keys    only one hot key, or only random keys                  (both)\n"
                 "  --eval    also measure EVALSHA of the production script in FILE, as NAME\n");
    std::exit(2);
}

}  // namespace

int main(int argc, char** argv) {
    int rounds = 5;
    size_t checks = 6400;
    std::vector<rl::Algo> algos = {rl::Algo::gcra, rl::Algo::token, rl::Algo::leaky,
                                   rl::Algo::sliding, rl::Algo::fixed, rl::Algo::log};
    std::vector<std::pair<std::string, std::string>> extra;  // name, file
    std::vector<size_t> shapes = {64, 1};
    std::vector<bool> kinds = {false, true};
    for (int i = 1; i < argc; i++) {
        std::string a = argv[i];
        if (i + 1 >= argc) usage();
        std::string v = argv[++i];
        if (a == "--rounds") {
            rounds = std::max(1, std::atoi(v.c_str()));
        } else if (a == "--checks") {
            checks = static_cast<size_t>(std::max(64, std::atoi(v.c_str())));
        } else if (a == "--algos") {
            algos.clear();
            std::stringstream in(v);
            std::string name;
            while (std::getline(in, name, ',')) {
                rl::Algo x;
                if (!rl::parse_algo(name, x)) usage();
                algos.push_back(x);
            }
        } else if (a == "--groups") {
            shapes = {static_cast<size_t>(std::max(1, std::atoi(v.c_str())))};
        } else if (a == "--keys") {
            if (v != "hot" && v != "random") usage();
            kinds = {v == "hot"};
        } else if (a == "--eval") {
            size_t eq = v.find('=');
            if (eq == std::string::npos) usage();
            extra.emplace_back(v.substr(0, eq), v.substr(eq + 1));
        } else {
            usage();
        }
    }

    rltest::RedisServer server;
    if (!server.ready()) {
        std::fprintf(stderr, "%s\n", server.error().c_str());
        return 2;
    }
    std::vector<Way> ways;
    {
        rltest::Context c = server.connect();
        if (load(c.get(), {"FUNCTION", "LOAD", "REPLACE", std::string(rl::function_library_text(false))}) !=
            rl::function_name(false)) {
            std::fprintf(stderr, "FUNCTION LOAD returned another name\n");
            return 2;
        }
        ways.push_back(Way{"FCALL", rl::CommandScript::fcall, ""});
        ways.push_back(Way{"EVALSHA", rl::CommandScript::evalsha,
                           load(c.get(), {"SCRIPT", "LOAD", std::string(rl::script_text(false))})});
        for (const auto& [name, file] : extra) {
            std::ifstream in(file, std::ios::binary);
            std::stringstream text;
            text << in.rdbuf();
            if (!in || text.str().empty()) {
                std::fprintf(stderr, "cannot read %s\n", file.c_str());
                return 2;
            }
            ways.push_back(Way{name, rl::CommandScript::evalsha, load(c.get(), {"SCRIPT", "LOAD", text.str()})});
        }
    }

    std::vector<Workload> workloads;
    for (size_t groups : shapes) {
        for (bool hot : kinds) {
            for (rl::Algo a : algos) workloads.push_back(Workload{a, hot, groups});
        }
    }

    Bench bench(server, ways, checks);
    std::mt19937_64 rng(1);
    // samples[workload][way]
    std::vector<std::vector<std::vector<Sample>>> samples(workloads.size(), std::vector<std::vector<Sample>>(ways.size()));
    // One warm-up pass (fills the keys, grows Redis's tables), then the rounds.
    for (const Workload& w : workloads) {
        for (const Way& way : ways) bench.measure(w, way, rng);
    }
    for (int r = 0; r < rounds; r++) {
        for (size_t wi = 0; wi < workloads.size(); wi++) {
            for (size_t k = 0; k < ways.size(); k++) {
                size_t wy = (k + static_cast<size_t>(r) + wi) % ways.size();
                samples[wi][wy].push_back(bench.measure(workloads[wi], ways[wy], rng));
            }
        }
    }

    // Medians: [workload][way].
    std::vector<std::vector<double>> cpu(workloads.size()), cmd(workloads.size()), rate(workloads.size());
    for (size_t wi = 0; wi < workloads.size(); wi++) {
        for (size_t k = 0; k < ways.size(); k++) {
            std::vector<double> a, b, c;
            for (const Sample& s : samples[wi][k]) {
                a.push_back(s.cpu_per_check_us);
                b.push_back(s.cmd_per_check_us);
                c.push_back(s.checks_per_s / 1000);
            }
            cpu[wi].push_back(median(a));
            cmd[wi].push_back(median(b));
            rate[wi].push_back(median(c));
        }
    }
    auto label = [&workloads](size_t wi) {
        const Workload& w = workloads[wi];
        return std::string(rl::algo_name(w.algo)) + (w.hot ? " hot " : " random ") + std::to_string(w.groups) + "x1";
    };

    std::printf("Redis Lua per check, %d rounds of %zu checks per workload and way (medians), production Lua\n"
                "(Redis TIME); policies 1000/s burst 100 (buckets), 1000/s (windows), 100/s (log); random keys\n"
                "among %zu; groups of one check per call (64x1: 64 requests per call), %zu calls in flight.\n"
                "cpu: Redis main-thread CPU us per check (INFO cpu); cmd: us per check inside the command (INFO\n"
                "commandstats: the Lua, without parsing and network); kchk/s: thousands of checks per second.\n\n",
                rounds, checks, kKeys, kInFlight);
    std::printf("%-18s", "workload");
    for (const Way& way : ways) std::printf(" | %-10s cpu   cmd kchk/s", way.name.substr(0, 10).c_str());
    std::printf("\n");
    for (size_t wi = 0; wi < workloads.size(); wi++) {
        std::printf("%-18s", label(wi).c_str());
        for (size_t k = 0; k < ways.size(); k++) {
            std::printf(" | %10s %5.2f %5.2f %6.1f", "", cpu[wi][k], cmd[wi][k], rate[wi][k]);
        }
        std::printf("\n");
    }

    // Each other way against EVALSHA (ways[1]): geometric means of the per-workload ratios.
    auto geomean = [](const std::vector<double>& v) {
        double s = 0;
        for (double x : v) s += std::log(x);
        return std::exp(s / static_cast<double>(v.size()));
    };
    std::printf("\nRatio to EVALSHA of the script, geometric mean over the workloads (< 1: cheaper)\n");
    for (size_t k = 0; k < ways.size(); k++) {
        if (k == 1) continue;
        std::map<std::string, std::vector<double>> by_shape;
        std::vector<double> all_cpu, all_cmd;
        for (size_t wi = 0; wi < workloads.size(); wi++) {
            const Workload& w = workloads[wi];
            double r = cpu[wi][k] / cpu[wi][1];
            all_cpu.push_back(r);
            all_cmd.push_back(cmd[wi][k] / cmd[wi][1]);
            by_shape[std::string(w.hot ? "hot " : "random ") + std::to_string(w.groups) + "x1"].push_back(r);
        }
        std::printf("  %-10s all: cpu %.3f, cmd %.3f;", ways[k].name.c_str(), geomean(all_cpu), geomean(all_cmd));
        for (const auto& [shape, v] : by_shape) std::printf("  %s cpu %.3f", shape.c_str(), geomean(v));
        std::printf("\n");
    }
    return 0;
}
