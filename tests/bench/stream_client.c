/* The load client of tests/bench/stream.sh: new TCP connections or UDP datagrams as fast as one
 * CPU sends them, counted by how nginx answered (wrk speaks only HTTP). One thread, one epoll loop.
 *
 *   stream_client tcp -p PORT [-c N] [-d SECS] [-n COUNT] [-k KEYS] [-K addr|sni] [-w FIRST]
 *                     [-H | -T]
 *   stream_client udp -p PORT [-c N] [-d SECS] [-n COUNT] [-k KEYS] [-f] [-S SINK_PORT]
 *
 * tcp: N connections in flight; each connects, sends a TLS ClientHello (-H) or makes a whole TLS
 *   handshake (-T, OpenSSL, no session resumed) or sends nothing, then reads until the server
 *   closes (-H: or until what came so far is read: a ServerHello waits for a handshake that
 *   will not follow). A connection that got a byte is admitted; one closed (or reset) with
 *   nothing is rejected: that is how a stream limit refuses one.
 * udp: sessions: N sockets, each sends a datagram and waits for the reply (`return`) before its
 *   next (a session ends with its reply, so the next datagram opens a new one); no reply within
 *   a second counts as lost. -f (flood): N sockets (N = 1: one session) send round-robin without
 *   waiting; replies are counted as they come. -S: a UDP socket on that port counts what nginx
 *   proxies to it (the upstream of `proxy_pass`).
 * Keys (-k): 1: every connection from 127.0.0.1 (one key); more: key i in 0..KEYS-1 is the
 *   source address 127.(1 + i / 65536).(i / 256 % 256).(i % 256) (-K addr: loopback routes all
 *   of 127.0.0.0/8, so any of them can be bound), or the ClientHello's server name "k<i>.example"
 *   (-K sni); drawn at random, or walked in order from FIRST (-w, to fill a zone).
 * Stops after SECS seconds (-d) or COUNT connections, sessions or flood datagrams (-n),
 * whichever comes first; prints one line of name=value counters, with its own CPU time. */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define MAX_INFLIGHT 4096
#define MAX_KEYS (254u * 65536u)        /* 127.1.0.0 .. 127.254.255.255 */
#define CONN_TIMEOUT 10.0               /* seconds a TCP connection may take before it counts as a timeout */
#define UDP_TIMEOUT 1.0                 /* seconds a session waits for its reply */

enum { CONNECTING, HANDSHAKE, READING };
enum { END_EOF, END_RESET, END_ERROR, END_TIMEOUT };

struct conn {
    int fd;
    int state;
    int hello_due;        /* a ClientHello to send once connected */
    unsigned key;
    SSL *ssl;
    size_t got;
    double started;
};

static struct {
    int tcp, port, inflight, tls, hello, sni_keys, flood, sink_port, walk;
    unsigned keys;
    unsigned next_key;
    double secs;
    unsigned long count;
} opt = {.inflight = 64, .keys = 1, .secs = 5};

static struct {
    unsigned long conns, admitted, closed, reset, errors, timeouts, handshakes;
    unsigned long sent, replies, sink, lost;
} n;

static volatile sig_atomic_t stop;
static int ep;
static SSL_CTX *ctx;
static struct sockaddr_in target;
static uint64_t rng = 0x9e3779b97f4a7c15ull;

static void on_signal(int sig) { (void)sig; stop = 1; }

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec / 1e9;
}

static void die(const char *what)
{
    perror(what);
    exit(2);
}

/* xorshift64*: the keys drawn; quality is not the point, speed is */
static unsigned rand_below(unsigned bound)
{
    rng ^= rng >> 12;
    rng ^= rng << 25;
    rng ^= rng >> 27;
    return (unsigned)((rng * 0x2545f4914f6cdd1dull) >> 32) % bound;
}

static unsigned next_key(void)
{
    if (opt.keys <= 1)
        return 0;
    if (!opt.walk)
        return rand_below(opt.keys);
    unsigned k = opt.next_key;
    opt.next_key = (opt.next_key + 1) % opt.keys;
    return k;
}

static void key_addr(unsigned k, struct sockaddr_in *sa)
{
    memset(sa, 0, sizeof *sa);
    sa->sin_family = AF_INET;
    sa->sin_addr.s_addr = htonl((127u << 24) | ((1 + k / 65536) << 16) | (k / 256 % 256) << 8 | k % 256);
}

/* A TLS 1.3 ClientHello as a browser's first record (the shape of t/lib/RLTest/ClientHello.pm):
 * enough for ssl_preread ($ssl_preread_server_name), not for a handshake (the key share is not
 * a key). name NULL: no server_name extension. Returns its length. */
static size_t client_hello(unsigned char *out, const char *name)
{
    unsigned char *p = out + 9, *ext;
    size_t nlen = name ? strlen(name) : 0;
    *p++ = 3, *p++ = 3;                                            /* legacy version TLS 1.2 */
    for (int i = 0; i < 32; i++)
        *p++ = (unsigned char)(i * 7 + 1);                         /* random */
    *p++ = 32;
    for (int i = 0; i < 32; i++)
        *p++ = (unsigned char)(i * 13 + 5);                        /* legacy session id */
    static const unsigned char suites[] = {0, 14, 0x13, 1, 0x13, 2, 0x13, 3, 0xc0, 0x2b, 0xc0, 0x2f, 0xc0, 0x2c, 0xc0, 0x30};
    memcpy(p, suites, sizeof suites), p += sizeof suites;
    *p++ = 1, *p++ = 0;                                            /* compression: null */
    ext = p, p += 2;
    if (name) {
        *p++ = 0, *p++ = 0;                                        /* server_name */
        *p++ = (unsigned char)((nlen + 5) >> 8), *p++ = (unsigned char)(nlen + 5);
        *p++ = (unsigned char)((nlen + 3) >> 8), *p++ = (unsigned char)(nlen + 3);
        *p++ = 0;
        *p++ = (unsigned char)(nlen >> 8), *p++ = (unsigned char)nlen;
        memcpy(p, name, nlen), p += nlen;
    }
    static const unsigned char rest[] = {
        0, 0x0a, 0, 6, 0, 4, 0, 0x1d, 0, 0x17,                     /* supported groups: x25519, P-256 */
        0, 0x0b, 0, 2, 1, 0,                                       /* point formats */
        0, 0x0d, 0, 8, 0, 6, 4, 3, 8, 4, 4, 1,                     /* signature algorithms */
        0, 0x2b, 0, 5, 4, 3, 4, 3, 3,                              /* supported versions: 1.3, 1.2 */
        0, 0x33, 0, 38, 0, 36, 0, 0x1d, 0, 32};                    /* key share: x25519, 32 bytes follow */
    memcpy(p, rest, sizeof rest), p += sizeof rest;
    for (int i = 0; i < 32; i++)
        *p++ = (unsigned char)(i * 11 + 9);
    size_t elen = (size_t)(p - ext - 2), blen = (size_t)(p - out - 9);
    ext[0] = (unsigned char)(elen >> 8), ext[1] = (unsigned char)elen;
    out[0] = 0x16, out[1] = 3, out[2] = 1;                         /* handshake record, TLS 1.0 */
    out[3] = (unsigned char)((blen + 4) >> 8), out[4] = (unsigned char)(blen + 4);
    out[5] = 1;                                                    /* client_hello */
    out[6] = 0, out[7] = (unsigned char)(blen >> 8), out[8] = (unsigned char)blen;
    return (size_t)(p - out);
}

/* ---------------------------------------------------------------- TCP */
static struct conn conns[MAX_INFLIGHT];

static void watch(struct conn *c, uint32_t events, int op)
{
    struct epoll_event ev = {.events = events, .data.ptr = c};
    if (epoll_ctl(ep, op, c->fd, &ev) < 0)
        die("epoll_ctl");
}

static int done(void)
{
    return stop || (opt.count && n.conns >= opt.count);
}

/* how the connection ended: admitted if it got a byte, else rejected (closed or reset) */
static void tcp_end(struct conn *c, int how)
{
    n.conns++;
    if (how == END_TIMEOUT)
        n.timeouts++;
    else if (c->got)
        n.admitted++;
    else if (how == END_ERROR)
        n.errors++;
    else if (how == END_RESET)
        n.reset++;
    else
        n.closed++;
    if (c->ssl)
        SSL_free(c->ssl), c->ssl = NULL;
    close(c->fd);          /* after the server's FIN: no TIME_WAIT on this side */
    c->fd = -1;            /* the loop starts the next (not here: failures would recurse) */
}

/* sends the ClientHello (small: one write); how a failure ends the connection, or -1 */
static int send_hello(struct conn *c)
{
    unsigned char hello[512];
    char name[32];
    snprintf(name, sizeof name, "k%u.example", opt.sni_keys ? c->key : 0);
    size_t len = client_hello(hello, name);
    if (send(c->fd, hello, len, MSG_NOSIGNAL) == (ssize_t)len) {
        c->hello_due = 0;
        return -1;
    }
    if (errno == EAGAIN || errno == ENOTCONN)
        return -1;              /* not connected yet: sent once writable */
    return errno == ECONNRESET || errno == EPIPE ? END_RESET : END_ERROR;
}

static void tcp_start(struct conn *c)
{
    c->fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);
    if (c->fd < 0)
        die("socket");
    c->got = 0;
    c->started = now();
    c->key = next_key();
    c->state = CONNECTING;
    c->hello_due = opt.hello;
    if (opt.keys > 1 && !opt.sni_keys) {
        struct sockaddr_in src;
        int one = 1;
        /* the port is chosen at connect, for the 4-tuple: bind alone would hold one per address */
        setsockopt(c->fd, IPPROTO_IP, IP_BIND_ADDRESS_NO_PORT, &one, sizeof one);
        key_addr(c->key, &src);
        if (bind(c->fd, (struct sockaddr *)&src, sizeof src) < 0)
            die("bind");
    }
    if (connect(c->fd, (struct sockaddr *)&target, sizeof target) < 0 && errno != EINPROGRESS) {
        tcp_end(c, END_ERROR);
        return;
    }
    /* on loopback the connection is usually up already: the ClientHello goes at once */
    int how = c->hello_due ? send_hello(c) : -1;
    if (how >= 0) {
        tcp_end(c, how);
        return;
    }
    if (opt.hello && !c->hello_due) {
        c->state = READING;
        watch(c, EPOLLIN, EPOLL_CTL_ADD);
        return;
    }
    watch(c, EPOLLOUT, EPOLL_CTL_ADD);
}

/* the handshake, then reading to the end: how the connection ended, or -1 (waiting) */
static int tls_step(struct conn *c)
{
    for (;;) {
        int r;
        if (c->state == HANDSHAKE) {
            r = SSL_do_handshake(c->ssl);
            if (r == 1) {
                n.handshakes++;
                c->state = READING;
                continue;
            }
        } else {
            char buf[4096];
            r = SSL_read(c->ssl, buf, sizeof buf);
            if (r > 0) {
                c->got += (size_t)r;
                continue;
            }
        }
        int e = SSL_get_error(c->ssl, r);
        ERR_clear_error();
        switch (e) {
        case SSL_ERROR_WANT_READ:
            watch(c, EPOLLIN, EPOLL_CTL_MOD);
            return -1;
        case SSL_ERROR_WANT_WRITE:
            watch(c, EPOLLOUT, EPOLL_CTL_MOD);
            return -1;
        case SSL_ERROR_ZERO_RETURN:
            return END_EOF;
        case SSL_ERROR_SYSCALL:       /* closed (r == 0) or reset under the TLS layer */
            return r == 0 || errno == 0 ? END_EOF : errno == ECONNRESET || errno == EPIPE ? END_RESET : END_ERROR;
        default:
            return END_ERROR;
        }
    }
}

static void tcp_event(struct conn *c, uint32_t events)
{
    int how = -1;
    if (c->state == CONNECTING) {
        int err = 0;
        socklen_t len = sizeof err;
        getsockopt(c->fd, SOL_SOCKET, SO_ERROR, &err, &len);
        if (err || (events & EPOLLERR)) {
            /* reset once up (ratelimit_reject reset, before the event was seen): a rejection */
            tcp_end(c, err == ECONNRESET || err == EPIPE ? END_RESET : END_ERROR);
            return;
        }
        if (c->hello_due && (how = send_hello(c)) >= 0) {
            tcp_end(c, how);
            return;
        }
        if (opt.tls) {
            c->ssl = SSL_new(ctx);
            if (!c->ssl)
                die("SSL_new");
            SSL_set_fd(c->ssl, c->fd);
            SSL_set_connect_state(c->ssl);
            c->state = HANDSHAKE;
        } else {
            c->state = READING;
            watch(c, EPOLLIN, EPOLL_CTL_MOD);
            return;
        }
    }
    if (c->ssl) {
        errno = 0;
        if ((how = tls_step(c)) >= 0)
            tcp_end(c, how);
        return;
    }
    for (;;) {
        char buf[4096];
        ssize_t r = recv(c->fd, buf, sizeof buf, 0);
        if (r > 0) {
            c->got += (size_t)r;
            continue;
        }
        if (r == 0)
            how = END_EOF;
        else if (errno == EINTR || (errno == EAGAIN && !(opt.hello && c->got)))
            return;
        else if (errno == EAGAIN)
            how = END_EOF;      /* a ClientHello answered (a ServerHello): admitted, no handshake follows */
        else
            how = errno == ECONNRESET ? END_RESET : END_ERROR;
        tcp_end(c, how);
        return;
    }
}

static void run_tcp(double until)
{
    if (opt.tls) {
        ctx = SSL_CTX_new(TLS_client_method());
        if (!ctx)
            die("SSL_CTX_new");
        SSL_CTX_set_verify(ctx, SSL_VERIFY_NONE, NULL);
        SSL_CTX_set_session_cache_mode(ctx, SSL_SESS_CACHE_OFF);   /* every handshake a full one */
        SSL_CTX_set_options(ctx, SSL_OP_IGNORE_UNEXPECTED_EOF);   /* a close is an end, not an error */
    }
    for (int i = 0; i < opt.inflight; i++)
        conns[i].fd = -1;
    double last_scan = now();
    while (!done()) {
        for (int i = 0; i < opt.inflight && !done(); i++)
            if (conns[i].fd < 0)
                tcp_start(&conns[i]);
        struct epoll_event evs[256];
        int k = epoll_wait(ep, evs, 256, 100);
        if (k < 0 && errno != EINTR)
            die("epoll_wait");
        for (int i = 0; i < k && !done(); i++) {
            struct conn *c = evs[i].data.ptr;
            if (c->fd >= 0)
                tcp_event(c, evs[i].events);
        }
        double t = now();
        if (t >= until)
            break;
        if (t - last_scan > 1) {
            last_scan = t;
            for (int i = 0; i < opt.inflight; i++) {
                struct conn *c = &conns[i];
                if (c->fd >= 0 && t - c->started > CONN_TIMEOUT)
                    tcp_end(c, END_TIMEOUT);
            }
        }
    }
}

/* ---------------------------------------------------------------- UDP */
struct usock {
    int fd;
    double sent_at;   /* sessions: when the datagram waiting for its reply was sent; 0: none */
};
static struct usock usocks[MAX_INFLIGHT];
static int sink_fd = -1;

static int udp_socket(void)
{
    int fd = socket(AF_INET, SOCK_DGRAM | SOCK_NONBLOCK, 0);
    if (fd < 0)
        die("socket");
    if (opt.keys > 1) {
        struct sockaddr_in src;
        key_addr(next_key(), &src);
        if (bind(fd, (struct sockaddr *)&src, sizeof src) < 0)
            die("bind");
    }
    if (connect(fd, (struct sockaddr *)&target, sizeof target) < 0)
        die("connect");
    return fd;
}

static void udp_send(struct usock *u)
{
    static const char q[] = "q\n";
    if (send(u->fd, q, sizeof q - 1, 0) == (ssize_t)(sizeof q - 1))
        n.sent++;
    else if (errno != EAGAIN && errno != ECONNREFUSED)
        n.errors++;
    u->sent_at = now();
}

/* the replies waiting on a socket; sessions: the socket's next datagram (from a new socket for
 * many keys: a session's key is its source address) */
static void udp_readable(struct usock *u)
{
    char buf[2048];
    while (recv(u->fd, buf, sizeof buf, 0) >= 0) {
        n.replies++;
        if (!opt.flood && u->sent_at > 0) {
            n.conns++;
            n.admitted++;
            u->sent_at = 0;
        }
    }
    if (!opt.flood && u->sent_at == 0 && !done()) {
        if (opt.keys > 1) {
            epoll_ctl(ep, EPOLL_CTL_DEL, u->fd, NULL);
            close(u->fd);
            u->fd = udp_socket();
            struct epoll_event ev = {.events = EPOLLIN, .data.ptr = u};
            if (epoll_ctl(ep, EPOLL_CTL_ADD, u->fd, &ev) < 0)
                die("epoll_ctl");
        }
        udp_send(u);
    }
}

static void sink_readable(void)
{
    char buf[2048];
    struct mmsghdr m[64];
    struct iovec iov[64];
    for (int i = 0; i < 64; i++) {
        iov[i].iov_base = buf;
        iov[i].iov_len = sizeof buf;
        memset(&m[i].msg_hdr, 0, sizeof m[i].msg_hdr);
        m[i].msg_hdr.msg_iov = &iov[i];
        m[i].msg_hdr.msg_iovlen = 1;
    }
    int r;
    while ((r = recvmmsg(sink_fd, m, 64, MSG_DONTWAIT, NULL)) > 0)
        n.sink += (unsigned long)r;
}

static void udp_events(int timeout_ms)
{
    struct epoll_event evs[256];
    int k = epoll_wait(ep, evs, 256, timeout_ms);
    if (k < 0 && errno != EINTR)
        die("epoll_wait");
    for (int i = 0; i < k; i++) {
        if (evs[i].data.ptr == NULL)
            sink_readable();
        else
            udp_readable(evs[i].data.ptr);
    }
}

static void run_udp(double until)
{
    if (opt.sink_port) {
        struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)opt.sink_port)};
        int big = 8 << 20;
        sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
        sink_fd = socket(AF_INET, SOCK_DGRAM | SOCK_NONBLOCK, 0);
        if (sink_fd < 0 || bind(sink_fd, (struct sockaddr *)&sa, sizeof sa) < 0)
            die("sink");
        /* as large as allowed (FORCE needs root): the flood sends faster than this loop reads */
        if (setsockopt(sink_fd, SOL_SOCKET, SO_RCVBUFFORCE, &big, sizeof big) < 0)
            setsockopt(sink_fd, SOL_SOCKET, SO_RCVBUF, &big, sizeof big);
        struct epoll_event ev = {.events = EPOLLIN, .data.ptr = NULL};
        if (epoll_ctl(ep, EPOLL_CTL_ADD, sink_fd, &ev) < 0)
            die("epoll_ctl");
    }
    for (int i = 0; i < opt.inflight; i++) {
        struct usock *u = &usocks[i];
        u->fd = udp_socket();
        struct epoll_event ev = {.events = EPOLLIN, .data.ptr = u};
        if (epoll_ctl(ep, EPOLL_CTL_ADD, u->fd, &ev) < 0)
            die("epoll_ctl");
        if (!opt.flood)
            udp_send(u);
    }
    if (opt.flood) {
        /* batches of sends, then whatever came back; -n counts datagrams sent */
        for (int i = 0; !stop && (!opt.count || n.sent < opt.count); i++) {
            for (int j = 0; j < 64 && (!opt.count || n.sent < opt.count); j++)
                udp_send(&usocks[(i * 64 + j) % opt.inflight]);
            udp_events(0);
            if (now() >= until)
                break;
        }
        /* what is still on its way */
        double end = now() + 0.2;
        while (now() < end)
            udp_events(20);
        return;
    }
    double last_scan = now();
    while (!done()) {
        udp_events(50);
        double t = now();
        if (t >= until)
            break;
        if (t - last_scan > 0.1) {
            last_scan = t;
            for (int i = 0; i < opt.inflight && !done(); i++) {
                struct usock *u = &usocks[i];
                if (u->sent_at > 0 && t - u->sent_at > UDP_TIMEOUT) {
                    n.conns++;
                    n.lost++;
                    u->sent_at = 0;
                    udp_readable(u);     /* sends the next */
                }
            }
        }
    }
}

/* ---------------------------------------------------------------- main */
static void usage(void)
{
    fprintf(stderr, "usage: stream_client tcp|udp -p PORT [-c N] [-d SECS] [-n COUNT] [-k KEYS] [-K addr|sni] "
                    "[-w FIRST] [-H] [-T] [-f] [-S SINK_PORT] [-r SEED]\n");
    exit(2);
}

int main(int argc, char **argv)
{
    if (argc < 2 || (strcmp(argv[1], "tcp") && strcmp(argv[1], "udp")))
        usage();
    opt.tcp = !strcmp(argv[1], "tcp");
    optind = 2;
    int ch;
    while ((ch = getopt(argc, argv, "p:c:d:n:k:K:w:HTfS:r:")) != -1) {
        switch (ch) {
        case 'p': opt.port = atoi(optarg); break;
        case 'c': opt.inflight = atoi(optarg); break;
        case 'd': opt.secs = atof(optarg); break;
        case 'n': opt.count = strtoul(optarg, NULL, 10); break;
        case 'k': opt.keys = (unsigned)strtoul(optarg, NULL, 10); break;
        case 'K':
            if (strcmp(optarg, "addr") && strcmp(optarg, "sni"))
                usage();
            opt.sni_keys = !strcmp(optarg, "sni");
            break;
        case 'w': opt.walk = 1, opt.next_key = (unsigned)strtoul(optarg, NULL, 10); break;
        case 'H': opt.hello = 1; break;
        case 'T': opt.tls = 1; break;
        case 'f': opt.flood = 1; break;
        case 'S': opt.sink_port = atoi(optarg); break;
        case 'r': rng ^= strtoull(optarg, NULL, 10) * 0x100000001b3ull; break;
        default: usage();
        }
    }
    if (opt.port <= 0 || opt.port > 65535 || opt.inflight < 1 || opt.inflight > MAX_INFLIGHT || opt.keys < 1
        || opt.keys > MAX_KEYS || opt.secs <= 0 || (opt.hello && opt.tls) || (opt.sni_keys && !opt.hello))
        usage();
    if (opt.walk)
        opt.next_key %= opt.keys;

    struct sigaction sa = {.sa_handler = on_signal};
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    signal(SIGPIPE, SIG_IGN);
    target.sin_family = AF_INET;
    target.sin_port = htons((uint16_t)opt.port);
    target.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    ep = epoll_create1(0);
    if (ep < 0)
        die("epoll_create1");

    double t0 = now();
    if (opt.tcp)
        run_tcp(t0 + opt.secs);
    else
        run_udp(t0 + opt.secs);
    double wall = now() - t0;

    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    printf("wall=%.3f conns=%lu admitted=%lu closed=%lu reset=%lu errors=%lu timeouts=%lu handshakes=%lu "
           "sent=%lu replies=%lu sink=%lu lost=%lu user=%.3f sys=%.3f\n",
           wall, n.conns, n.admitted, n.closed, n.reset, n.errors, n.timeouts, n.handshakes, n.sent, n.replies,
           n.sink, n.lost, ru.ru_utime.tv_sec + ru.ru_utime.tv_usec / 1e6, ru.ru_stime.tv_sec + ru.ru_stime.tv_usec / 1e6);
    return 0;
}
