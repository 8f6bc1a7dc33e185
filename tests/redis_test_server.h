// A private redis-server for one test, and a small synchronous hiredis client.
//
// The server runs from PATH (or /usr/bin/redis-server) on a free 127.0.0.1 port, without
// persistence, in its own temporary directory. It is stopped by the destructor, and by the
// kernel if the test process dies first (PR_SET_PDEATHSIG), so a failing or crashing test
// never leaves it behind. A missing redis-server is a failure, not a skip: CI installs it.
#pragma once
#include <hiredis/hiredis.h>

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <memory>
#include <string>
#include <thread>
#include <vector>

namespace rltest {

struct ReplyFree {
    void operator()(redisReply* r) const { freeReplyObject(r); }
};
using Reply = std::unique_ptr<redisReply, ReplyFree>;

struct ContextFree {
    void operator()(redisContext* c) const { redisFree(c); }
};
using Context = std::unique_ptr<redisContext, ContextFree>;

inline std::string find_redis_server() {
    if (const char* path = std::getenv("PATH")) {
        std::string dirs = path;
        size_t from = 0;
        while (from <= dirs.size()) {
            size_t to = dirs.find(':', from);
            if (to == std::string::npos) to = dirs.size();
            std::string candidate = dirs.substr(from, to - from) + "/redis-server";
            if (to > from && access(candidate.c_str(), X_OK) == 0) return candidate;
            from = to + 1;
        }
    }
    return access("/usr/bin/redis-server", X_OK) == 0 ? "/usr/bin/redis-server" : "";
}

// A port nobody listens on right now (the server may still lose a race for it: start() retries).
inline int free_port() {
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    if (fd < 0) return 0;
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    a.sin_port = 0;
    socklen_t len = sizeof a;
    int port = 0;
    if (bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0 &&
        getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) == 0) {
        port = ntohs(a.sin_port);
    }
    close(fd);
    return port;
}

class RedisServer {
  public:
    explicit RedisServer(std::vector<std::string> extra_args = {}) : extra_(std::move(extra_args)) {
        binary_ = find_redis_server();
        if (binary_.empty()) {
            error_ = "redis-server not found in PATH or /usr/bin (install the redis-server package)";
            return;
        }
        char tmpl[] = "/tmp/rl-redis-test-XXXXXX";
        if (mkdtemp(tmpl) == nullptr) {
            error_ = "mkdtemp failed";
            return;
        }
        dir_ = tmpl;
        for (int attempt = 0; attempt < 5 && !ready_; attempt++) start();
    }

    ~RedisServer() {
        stop();
        if (!dir_.empty()) {
            for (const char* f : {"redis.log", "nodes.conf", "dump.rdb"}) unlink((dir_ + "/" + f).c_str());
            rmdir(dir_.c_str());
        }
    }

    RedisServer(const RedisServer&) = delete;
    RedisServer& operator=(const RedisServer&) = delete;

    bool ready() const { return ready_; }
    const std::string& error() const { return error_; }
    int port() const { return port_; }

    // A new connection with a command timeout, so a stuck server fails the test instead of hanging it.
    Context connect() const {
        timeval tv{2, 0};
        Context c(redisConnectWithTimeout("127.0.0.1", port_, tv));
        if (c && c->err == 0) {
            timeval cmd{30, 0};
            redisSetTimeout(c.get(), cmd);
        }
        return c;
    }

  private:
    void start() {
        port_ = free_port();
        if (port_ == 0) {
            error_ = "no free port";
            return;
        }
        std::vector<std::string> args = {binary_, "--port", std::to_string(port_), "--bind", "127.0.0.1",
                                          "--save", "", "--appendonly", "no", "--dir", dir_, "--daemonize", "no",
                                          "--logfile", dir_ + "/redis.log"};
        args.insert(args.end(), extra_.begin(), extra_.end());
        std::vector<char*> argv;
        for (std::string& a : args) argv.push_back(a.data());
        argv.push_back(nullptr);

        pid_t parent = getpid();
        pid_ = fork();
        if (pid_ < 0) {
            error_ = "fork failed";
            return;
        }
        if (pid_ == 0) {
            // Dies with the test process, whatever way it ends.
            prctl(PR_SET_PDEATHSIG, SIGKILL);
            if (getppid() != parent) _exit(1);
            int devnull = open("/dev/null", O_RDWR);
            if (devnull >= 0) {
                dup2(devnull, 0);
                dup2(devnull, 1);
            }
            execv(argv[0], argv.data());
            _exit(127);
        }
        // Up to 10 s for PING to answer; give up at once if the server exited (port taken).
        auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
        while (std::chrono::steady_clock::now() < deadline) {
            int status;
            if (waitpid(pid_, &status, WNOHANG) == pid_) {
                pid_ = -1;
                error_ = "redis-server exited at start (see its log)";
                return;
            }
            Context c = connect();
            if (c && c->err == 0) {
                Reply r(static_cast<redisReply*>(redisCommand(c.get(), "PING")));
                if (r && r->type == REDIS_REPLY_STATUS && std::string(r->str) == "PONG") {
                    ready_ = true;
                    error_.clear();
                    return;
                }
            }
            std::this_thread::sleep_for(std::chrono::milliseconds(20));
        }
        error_ = "redis-server did not answer PING within 10 s";
        stop();
    }

    // SIGTERM, then SIGKILL after 3 s: bounded whatever the server does.
    void stop() {
        if (pid_ <= 0) return;
        kill(pid_, SIGTERM);
        for (int i = 0; i < 300; i++) {
            int status;
            if (waitpid(pid_, &status, WNOHANG) == pid_) {
                pid_ = -1;
                return;
            }
            std::this_thread::sleep_for(std::chrono::milliseconds(10));
        }
        kill(pid_, SIGKILL);
        int status;
        waitpid(pid_, &status, 0);
        pid_ = -1;
    }

    std::vector<std::string> extra_;
    std::string binary_;
    std::string dir_;
    int port_ = 0;
    pid_t pid_ = -1;
    bool ready_ = false;
    std::string error_;
};

// A command from its arguments (binary-safe).
inline Reply command(redisContext* c, const std::vector<std::string>& args) {
    std::vector<const char*> argv;
    std::vector<size_t> lens;
    for (const std::string& a : args) {
        argv.push_back(a.data());
        lens.push_back(a.size());
    }
    return Reply(static_cast<redisReply*>(redisCommandArgv(c, static_cast<int>(argv.size()), argv.data(), lens.data())));
}

inline void append(redisContext* c, const std::vector<std::string>& args) {
    std::vector<const char*> argv;
    std::vector<size_t> lens;
    for (const std::string& a : args) {
        argv.push_back(a.data());
        lens.push_back(a.size());
    }
    redisAppendCommandArgv(c, static_cast<int>(argv.size()), argv.data(), lens.data());
}

inline Reply next_reply(redisContext* c) {
    void* r = nullptr;
    if (redisGetReply(c, &r) != REDIS_OK) return Reply();
    return Reply(static_cast<redisReply*>(r));
}

// TIME as microseconds.
inline int64_t time_us(const redisReply* r) {
    if (r == nullptr || r->type != REDIS_REPLY_ARRAY || r->elements != 2) return -1;
    return std::atoll(r->element[0]->str) * 1000000 + std::atoll(r->element[1]->str);
}

}  // namespace rltest
