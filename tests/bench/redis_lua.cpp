// Redis's cost of the Lua per check, called as FCALL of the function library and as EVALSHA of
// the script (and of any other script given with --eval, e.g. an earlier version's), on the
// same batches against one private redis-server. A benchmark, not a test: it prints a table
// and never fails because of a figure. Build and run with tests/bench/redis_lua.sh.
//
// Per workload (algorithm x keys x batch shape) and way of calling, each round sends the same
// number of calls (a few in flight) and reads, around them, Redis's main-thread CPU time (INFO
// cpu), the time spent inside the command (INFO commandstats: the Lua, without parsing or
// network), and of that the time inside the commands the Lua ran (GET, SET, TIME...) and how
// many it ran. Ways are measured in turn within a round, in a rotating order; the medians over
// the rounds are reported, and each way's ratio to EVALSHA.
//
// --raw adds a way without Lua: per check a GET and a SET ... PX of the check's key, all of a
// batch pipelined in one write (what Redis's own commands cost per key, the floor of a script
// that reads and writes each key once). --quota run takes the throughput benchmark's quotas
// (run.sh: one key 10^9/s burst 1000; many keys 10/day burst 1000, whose state lasts), so that
// every check is admitted and writes its key, random keys then being sent once each before
// measuring (the keys exist, as in a zone that has run a while). --dump-script prints the
// production script (tests/bench/lua_parts.py makes its variants from it).
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
#include "core/wire/redis_keys.h"
#include "core/wire/redis_script.h"
#include "core/wire/sha1.h"

namespace {

using rltest::Reply;

struct Way {
    std::string name;
    rl::CommandScript script;  // fcall or evalsha
    std::string sha;           // evalsha: the script's
    std::string function;      // fcall: the function's name, if not production's
    bool lenient = false;      // a variant's reply: any array (tests/bench/lua_parts.py)
    bool raw = false;          // no script: a GET and a SET per check (--raw)
    // The decide command's form: the lean one when the batch allows it (production's), or the
    // general one, which other scripts and lua_parts.py's variants take.
    rl::BatchForm form = rl::BatchForm::general;
};

struct Workload {
    rl::Algo algo;
    bool hot;       // one key, else random keys among g_keys
    size_t groups;  // groups of one check per call
};

size_t g_keys = 100000;      // --keys-count
std::string g_hook;          // --hook
bool g_run_quota = false;    // --quota run
rl::BatchForm g_form = rl::BatchForm::best;  // production's ways (--form)
constexpr size_t kInFlight = 4;

rl::Policy policy_for(rl::Algo algo, bool hot) {
    rl::Policy p;
    p.algo = algo;
    p.requests = algo == rl::Algo::log ? 100 : 1000;
    p.period_us = 1000000;
    p.burst = rl::is_bucket(algo) ? 100 : 0;
    if (g_run_quota && algo != rl::Algo::log) {  // run.sh's (cases.py default_quota, redis_quota)
        p.requests = hot ? 1000000000 : rl::is_bucket(algo) ? 10 : 1000;
        p.period_us = hot ? 1000000 : int64_t{86400} * 1000000;
        p.burst = rl::is_bucket(algo) ? 1000 : 0;
    }
    if (const char* err = rl::finish_policy(p)) {
        std::fprintf(stderr, "policy: %s\n", err);
        std::exit(2);
    }
    return p;
}

// INFO's CPU and command fields as numbers: cmdstat_<name> its usec, calls_<name> its calls.
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
            // calls=N,usec=N,...
            size_t at = value.find("usec=");
            if (at != std::string::npos) out[key] = std::atof(value.c_str() + at + 5);
            if (value.rfind("calls=", 0) == 0) out["calls_" + key.substr(8)] = std::atof(value.c_str() + 6);
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

bool script_command(const std::string& name) {
    return name == "fcall" || name == "evalsha" || name == "eval" || name == "fcall_ro" || name == "evalsha_ro";
}

// The usec of the script commands (inner: of the others, which the scripts ran; INFO left out).
double command_us(const std::map<std::string, double>& i, bool inner) {
    double sum = 0;
    for (const auto& [k, v] : i) {
        if (k.rfind("cmdstat_", 0) != 0 || k == "cmdstat_info") continue;
        if (script_command(k.substr(8)) != inner) sum += v;
    }
    return sum;
}

// The calls of the commands other than the scripts (and INFO).
double inner_calls(const std::map<std::string, double>& i) {
    double sum = 0;
    for (const auto& [k, v] : i) {
        if (k.rfind("calls_", 0) == 0 && k != "calls_info" && !script_command(k.substr(6))) sum += v;
    }
    return sum;
}

struct Sample {
    double cpu_per_check_us, cmd_per_check_us, inner_per_check_us, inner_per_check, checks_per_s;
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

    // One measurement: `calls` calls of the workload's batches, `way`; keys: the random keys
    // of each check in turn (else drawn at random).
    Sample measure(const Workload& w, const Way& way, std::mt19937_64& rng, const std::vector<uint64_t>* keys = nullptr) {
        const rl::Policy p = policy_for(w.algo, w.hot);
        const size_t calls = keys ? (keys->size() + w.groups - 1) / w.groups : std::max<size_t>(8, target_ / w.groups);
        std::vector<std::string> cmds;
        std::vector<rl::RedisCheck> checks(w.groups);
        std::vector<rl::RedisGroup> groups(w.groups);
        size_t next = 0;
        for (size_t c = 0; c < calls; c++) {
            for (size_t g = 0; g < w.groups; g++) {
                uint64_t k = keys ? (*keys)[next++ % keys->size()] : rng() % g_keys;
                checks[g].zone = "bench";
                checks[g].hash = w.hot ? rl::KeyHash{1, 1} : rl::KeyHash{k, 7};
                checks[g].policy = &p;
                checks[g].cost = 1;
                groups[g] = rl::RedisGroup{&checks[g], 1};
            }
            cmds.push_back(way.raw ? raw_command(checks) : script_call(way, groups));
        }
        redisContext* c = conn_.get();
        auto before = info(c);
        hook("begin", w, way, calls * w.groups);
        auto t0 = std::chrono::steady_clock::now();
        const size_t replies = way.raw ? 2 * w.groups : 1;  // per command string
        size_t sent = 0, got = 0;
        while (got < calls) {
            while (sent < calls && sent - got < kInFlight) {
                redisAppendFormattedCommand(c, cmds[sent].data(), cmds[sent].size());
                sent++;
            }
            for (size_t i = 0; i < replies; i++) {
                Reply r = rltest::next_reply(c);
                check_reply(r.get(), w.groups, way);
            }
            got++;
        }
        auto t1 = std::chrono::steady_clock::now();
        hook("end", w, way, calls * w.groups);
        auto after = info(c);
        const double n = static_cast<double>(calls * w.groups);
        const double wall = std::chrono::duration<double>(t1 - t0).count();
        const double inner_us = command_us(after, true) - command_us(before, true);
        return Sample{(main_thread_cpu_us(after) - main_thread_cpu_us(before)) / n,
                      (way.raw ? inner_us : command_us(after, false) - command_us(before, false)) / n,
                      inner_us / n, (inner_calls(after) - inner_calls(before)) / n, n / wall};
    }

  private:
    // --hook CMD: "CMD begin" and "CMD end" around the calls of a measurement (not timed), with
    // RL_WORKLOAD, RL_WAY and RL_CHECKS in the environment (lua_parts.py --callgrind: zero and
    // dump Redis's instruction counts).
    static void hook(const char* when, const Workload& w, const Way& way, size_t checks) {
        if (g_hook.empty()) return;
        std::string load = std::string(rl::algo_name(w.algo)) + (w.hot ? " hot " : " random ") +
                           std::to_string(w.groups) + "x1";
        setenv("RL_WORKLOAD", load.c_str(), 1);
        setenv("RL_WAY", way.name.c_str(), 1);
        setenv("RL_CHECKS", std::to_string(checks).c_str(), 1);
        if (std::system((g_hook + " " + when).c_str()) != 0) {
            std::fprintf(stderr, "--hook %s %s failed\n", g_hook.c_str(), when);
            std::exit(2);
        }
    }

    static std::string script_call(const Way& way, const std::vector<rl::RedisGroup>& groups) {
        size_t len = rl::batch_command_len(way.script, false, "rlbench:", groups.data(), groups.size(), 0, way.form);
        std::string cmd(len, '\0');
        rl::write_batch_command(cmd.data(), way.script, false, "rlbench:", groups.data(), groups.size(), 0, way.form);
        if (way.script == rl::CommandScript::evalsha) {
            size_t at = cmd.find(rl::script_sha1(false));
            cmd.replace(at, rl::kSha1HexLen, way.sha);
        } else if (!way.function.empty()) {
            size_t at = cmd.find(rl::function_name(false));
            cmd.replace(at, rl::kFunctionNameLen, way.function);
        }
        return cmd;
    }

    // GET <key> and SET <key> <24 bytes> PX <ms> per check, as RESP, back to back.
    static std::string raw_command(const std::vector<rl::RedisCheck>& checks) {
        std::string out;
        for (const rl::RedisCheck& ch : checks) {
            std::string key(rl::redis_key_len("rlbench:", ch.zone, ch.policy->algo), '\0');
            rl::redis_key(key.data(), "rlbench:", ch.zone, ch.hash, ch.policy->algo);
            auto bulk = [&out](const std::string& a) { out += "$" + std::to_string(a.size()) + "\r\n" + a + "\r\n"; };
            out += "*2\r\n";
            bulk("GET");
            bulk(key);
            out += "*5\r\n";
            bulk("SET");
            bulk(key);
            bulk(std::string(24, '\0'));  // a fresh state (all zero): the scripts' checks read it as theirs
            bulk("PX");
            bulk("86400000");
        }
        return out;
    }

    static void check_reply(const redisReply* r, size_t ngroups, const Way& way) {
        bool ok = r != nullptr && r->type != REDIS_REPLY_ERROR;
        if (ok && !way.raw && !way.lenient) {
            ok = r->type == REDIS_REPLY_ARRAY && r->elements == rl::decide_reply_len(ngroups);
        }
        if (!ok) {
            std::fprintf(stderr, "%s: bad reply: %s\n", way.name.c_str(),
                         r && r->type == REDIS_REPLY_ERROR ? r->str : "(shape)");
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
                 "                          [--keys hot|random] [--keys-count N] [--quota lua|run] [--raw]\n"
                 "                          [--no-fcall] [--eval NAME=FILE]... [--fcall NAME=FILE]... [--lenient]\n"
                 "                          [--form best|general] [--general]\n"
                 "                          [--dump-script FILE] [--dump-library FILE] [--csv FILE] [--hook CMD]\n"
                 "  --rounds      measurements per workload and way; medians are reported   (5)\n"
                 "  --checks      checks per measurement                                    (6400)\n"
                 "  --groups      only batches of N groups of one check            (64, then 1)\n"
                 "  --keys        only one hot key, or only random keys                  (both)\n"
                 "  --keys-count  how many random keys                                (100000)\n"
                 "  --quota       lua: 1000/s burst 100 (buckets), 1000/s (windows), 100/s (log);\n"
                 "                run: run.sh's (one key 10^9/s burst 1000, random keys 10/day burst\n"
                 "                1000; windows 10^9/s and 1000/day), random keys sent once first (lua)\n"
                 "  --raw         also a GET and a SET ... PX per check, pipelined, no script\n"
                 "  --no-fcall    leave FCALL out (EVALSHA is the reference)\n"
                 "  --form        the production ways' decide command: best (the lean form where the batch\n"
                 "                allows it, as nginx sends it) or general (the general loop)      (best)\n"
                 "  --general     also FCALL of production in the general form, as \"FCALL general\"\n"
                 "                (the loop every batch took before the lean form)\n"
                 "  --eval        also measure EVALSHA of the production script in FILE, as NAME\n"
                 "  --fcall       also measure FCALL of the function library in FILE (FUNCTION LOAD's text,\n"
                 "                its function named as the library, in as many bytes as production's), as NAME\n"
                 "  --lenient     an --eval or --fcall script's reply may be anything but an error (a variant's)\n"
                 "  --dump-script write the production script (EVAL's text) to FILE and exit\n"
                 "  --dump-library  write the production function library to FILE and exit\n"
                 "  --csv         also write the medians to FILE: workload,way,cpu,cmd,in,calls,kchk/s\n"
                 "  --hook        run \"CMD begin\" and \"CMD end\" around each measurement's calls, with\n"
                 "                RL_WORKLOAD, RL_WAY and RL_CHECKS set (lua_parts.py --callgrind)\n");
    std::exit(2);
}

}  // namespace

int main(int argc, char** argv) {
    int rounds = 5;
    size_t checks = 6400;
    std::vector<rl::Algo> algos = {rl::Algo::gcra, rl::Algo::token, rl::Algo::leaky,
                                   rl::Algo::sliding, rl::Algo::fixed, rl::Algo::log};
    std::vector<std::pair<std::string, std::string>> extra, libraries;  // name, file
    std::vector<size_t> shapes = {64, 1};
    std::vector<bool> kinds = {false, true};
    bool raw = false, fcall = true, lenient = false, general = false;
    std::string csv;
    for (int i = 1; i < argc; i++) {
        std::string a = argv[i];
        if (a == "--raw" || a == "--no-fcall" || a == "--lenient" || a == "--general") {
            (a == "--raw" ? raw : a == "--lenient" ? lenient : a == "--general" ? general : fcall) = a != "--no-fcall";
            continue;
        }
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
        } else if (a == "--csv") {
            csv = v;
        } else if (a == "--hook") {
            g_hook = v;
        } else if (a == "--keys-count") {
            g_keys = static_cast<size_t>(std::max(1, std::atoi(v.c_str())));
        } else if (a == "--form") {
            if (v != "best" && v != "general") usage();
            g_form = v == "best" ? rl::BatchForm::best : rl::BatchForm::general;
        } else if (a == "--quota") {
            if (v != "lua" && v != "run") usage();
            g_run_quota = v == "run";
        } else if (a == "--dump-script" || a == "--dump-library") {
            std::ofstream out(v, std::ios::binary);
            std::string_view text = a == "--dump-script" ? rl::script_text(false) : rl::function_library_text(false);
            out.write(text.data(), static_cast<std::streamsize>(text.size()));
            return out ? 0 : 2;
        } else if (a == "--eval" || a == "--fcall") {
            size_t eq = v.find('=');
            if (eq == std::string::npos) usage();
            (a == "--eval" ? extra : libraries).emplace_back(v.substr(0, eq), v.substr(eq + 1));
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
        // EVALSHA first: the reference of the ratios
        ways.push_back(Way{"EVALSHA", rl::CommandScript::evalsha,
                           load(c.get(), {"SCRIPT", "LOAD", std::string(rl::script_text(false))}), "", false, false,
                           g_form});
        if (fcall) ways.push_back(Way{"FCALL", rl::CommandScript::fcall, "", "", false, false, g_form});
        if (general) ways.push_back(Way{"FCALL general", rl::CommandScript::fcall, "", "", false, false});
        auto read = [](const std::string& file) {
            std::ifstream in(file, std::ios::binary);
            std::stringstream text;
            text << in.rdbuf();
            if (!in || text.str().empty()) {
                std::fprintf(stderr, "cannot read %s\n", file.c_str());
                std::exit(2);
            }
            return text.str();
        };
        for (const auto& [name, file] : extra) {
            ways.push_back(Way{name, rl::CommandScript::evalsha, load(c.get(), {"SCRIPT", "LOAD", read(file)}), "",
                               lenient});
        }
        for (const auto& [name, file] : libraries) {
            std::string fn = load(c.get(), {"FUNCTION", "LOAD", "REPLACE", read(file)});
            if (fn.size() != rl::kFunctionNameLen) {
                std::fprintf(stderr, "%s: the library's name must be %zu bytes, not \"%s\"\n", file.c_str(),
                             rl::kFunctionNameLen, fn.c_str());
                return 2;
            }
            ways.push_back(Way{name, rl::CommandScript::fcall, "", fn, lenient});
        }
        if (raw) ways.push_back(Way{"GET+SET", rl::CommandScript::evalsha, "", "", false, true});
    }

    std::vector<Workload> workloads;
    for (size_t groups : shapes) {
        for (bool hot : kinds) {
            for (rl::Algo a : algos) workloads.push_back(Workload{a, hot, groups});
        }
    }

    Bench bench(server, ways, checks);
    std::mt19937_64 rng(1);
    if (g_run_quota) {
        // Every random key once, so that the measured checks find their keys (their state lasts a
        // day), as in a zone filled before measuring (run.sh's FILL).
        std::vector<uint64_t> all(g_keys);
        for (size_t k = 0; k < g_keys; k++) all[k] = k;
        for (rl::Algo a : algos) {
            if (std::find(kinds.begin(), kinds.end(), false) != kinds.end()) {
                bench.measure(Workload{a, false, 64}, ways[0], rng, &all);
            }
        }
    }
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
    std::vector<std::vector<double>> cpu(workloads.size()), cmd(workloads.size()), rate(workloads.size()),
        inner(workloads.size()), ncalls(workloads.size());
    for (size_t wi = 0; wi < workloads.size(); wi++) {
        for (size_t k = 0; k < ways.size(); k++) {
            std::vector<double> a, b, c, d, e;
            for (const Sample& s : samples[wi][k]) {
                a.push_back(s.cpu_per_check_us);
                b.push_back(s.cmd_per_check_us);
                c.push_back(s.checks_per_s / 1000);
                d.push_back(s.inner_per_check_us);
                e.push_back(s.inner_per_check);
            }
            cpu[wi].push_back(median(a));
            cmd[wi].push_back(median(b));
            rate[wi].push_back(median(c));
            inner[wi].push_back(median(d));
            ncalls[wi].push_back(median(e));
        }
    }
    auto label = [&workloads](size_t wi) {
        const Workload& w = workloads[wi];
        return std::string(rl::algo_name(w.algo)) + (w.hot ? " hot " : " random ") + std::to_string(w.groups) + "x1";
    };

    std::printf("Redis Lua per check, %d rounds of %zu checks per workload and way (medians), production Lua\n"
                "(Redis TIME); policies %s; random keys\n"
                "among %zu%s; groups of one check per call (64x1: 64 requests per call), %zu calls in flight.\n"
                "cpu: Redis main-thread CPU us per check (INFO cpu); cmd: us per check inside the command (INFO\n"
                "commandstats: the Lua, without parsing and network; GET+SET: inside those commands); in: of cmd,\n"
                "us per check inside the commands the Lua ran; calls: those commands per check (redis.call()s);\n"
                "kchk/s: thousands of checks per second.\n\n",
                rounds, checks,
                g_run_quota ? "run.sh's: one key 10^9/s burst 1000, random keys 10/day burst 1000 (buckets), "
                              "1000/day (windows), 100/s (log)"
                            : "1000/s burst 100 (buckets), 1000/s (windows), 100/s (log)",
                g_keys, g_run_quota ? ", each sent once before measuring" : "", kInFlight);
    std::printf("%-18s", "workload");
    for (const Way& way : ways) std::printf(" | %-10s cpu   cmd    in calls kchk/s", way.name.substr(0, 10).c_str());
    std::printf("\n");
    for (size_t wi = 0; wi < workloads.size(); wi++) {
        std::printf("%-18s", label(wi).c_str());
        for (size_t k = 0; k < ways.size(); k++) {
            std::printf(" | %10s %5.2f %5.2f %5.2f %5.2f %6.1f", "", cpu[wi][k], cmd[wi][k], inner[wi][k], ncalls[wi][k],
                        rate[wi][k]);
        }
        std::printf("\n");
    }

    if (!csv.empty()) {
        std::ofstream out(csv);
        out << "workload,way,cpu,cmd,in,calls,kchk/s\n";
        for (size_t wi = 0; wi < workloads.size(); wi++) {
            for (size_t k = 0; k < ways.size(); k++) {
                out << label(wi) << ',' << ways[k].name << ',' << cpu[wi][k] << ',' << cmd[wi][k] << ',' << inner[wi][k]
                    << ',' << ncalls[wi][k] << ',' << rate[wi][k] << '\n';
            }
        }
        if (!out) {
            std::fprintf(stderr, "cannot write %s\n", csv.c_str());
            return 2;
        }
    }

    // Each other way against EVALSHA (ways[0]): geometric means of the per-workload ratios.
    auto geomean = [](const std::vector<double>& v) {
        double s = 0;
        for (double x : v) s += std::log(x);
        return std::exp(s / static_cast<double>(v.size()));
    };
    std::printf("\nRatio to EVALSHA of the script, geometric mean over the workloads (< 1: cheaper)\n");
    for (size_t k = 1; k < ways.size(); k++) {
        std::map<std::string, std::vector<double>> by_shape;
        std::vector<double> all_cpu, all_cmd;
        for (size_t wi = 0; wi < workloads.size(); wi++) {
            const Workload& w = workloads[wi];
            double r = cpu[wi][k] / cpu[wi][0];
            all_cpu.push_back(r);
            all_cmd.push_back(cmd[wi][k] / cmd[wi][0]);
            by_shape[std::string(w.hot ? "hot " : "random ") + std::to_string(w.groups) + "x1"].push_back(r);
        }
        std::printf("  %-10s all: cpu %.3f, cmd %.3f;", ways[k].name.c_str(), geomean(all_cpu), geomean(all_cmd));
        for (const auto& [shape, v] : by_shape) std::printf("  %s cpu %.3f", shape.c_str(), geomean(v));
        std::printf("\n");
    }
    return 0;
}
