#!/usr/bin/env bash
# Builds ngx_http_ratelimit_module and runs it or its tests.
#   ./build.sh            build build/ngx_http_ratelimit_module.so (same as ./build.sh build)
#   ./build.sh run        build, start nginx on 127.0.0.1:8080 with examples/quickstart.conf
#   ./build.sh test       build, run the GoogleTest suite, prove t/, then test-upstream if
#                         ../shared/nginx/nginx-*.tar.gz exists
#   ./build.sh test-upstream [t/NN-x.t ...]  build that upstream nginx --with-compat and the
#                         module against it (nginx's default flags, -Werror) in build/upstream/,
#                         then prove t/ (or the files given) with them
#   ./build.sh asan       build build/asan/ngx_http_ratelimit_module.so with ASan+UBSan
#   ./build.sh test-asan  run prove t/ against the sanitizer build
#   ./build.sh bench      run tests/bench/run.sh, then tests/bench/instructions.sh (not tests)
#   ./build.sh bench-stream  run tests/bench/stream.sh, the stream{} benchmark (not a test)
#   ./build.sh stop       stop the nginx started by run
#   ./build.sh deb        build build/libnginx-mod-{http,stream}-ratelimit_<version>_<arch>.deb, check them
#                         with lintian
# NGINX_SRC=/path/to/nginx-source builds against that tree (configured --with-compat, with
# nginx's default compiler flags) instead of Debian's nginx-dev.
# PROVE_JOBS=N: how many t/ files run at once (CPUs + 1; those marked "# runs alone:" run
# alone, after the others).
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
BUILD="$ROOT/build"
JOBS=$(nproc 2>/dev/null || echo 2)

log() { printf '== %s\n' "$*" >&2; }

# Installs the Debian packages that provide the listed commands or files, if any is missing.
ensure_packages() {
    local missing=() item pkg
    for item in "$@"; do
        pkg=${item%%:*}
        local probe=${item#*:}
        if [[ $probe == /* ]]; then [[ -e $probe ]] && continue
        else command -v "$probe" >/dev/null 2>&1 && continue; fi
        missing+=("$pkg")
    done
    ((${#missing[@]})) || return 0
    log "installing ${missing[*]}"
    local sudo=""
    [[ $(id -u) -eq 0 ]] || sudo="sudo"
    export DEBIAN_FRONTEND=noninteractive
    $sudo apt-get update -qq
    $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
}

build_deps() {
    ensure_packages g++:g++ make:make \
        nginx-dev:/usr/share/nginx/src/configure nginx-light:/usr/sbin/nginx \
        libpcre2-dev:/usr/include/pcre2.h zlib1g-dev:/usr/include/zlib.h \
        libssl-dev:/usr/include/openssl/ssl.h libhiredis-dev:/usr/include/hiredis/hiredis.h \
        libhowardhinnant-date-dev:/usr/include/date/tz.h
}

test_deps() {
    # redis-server and redis-cli: the tests start their own servers and clusters on loopback;
    # redis-sentinel and Net::DNS (a test DNS server): t/71-redis-sentinel.t, t/72-redis-resolve.t;
    # openssl and IO::Socket::SSL: the TLS tests make their PKI and talk to Redis over TLS;
    # fail2ban (fail2ban-regex): t/75-fail2ban.t runs the example filter over a real error log;
    # python3-grpcio: t/82-settle.t's gRPC upstream and client (t/lib/grpc_tokens.py);
    # chromium: t/55-dashboard-page.t drives the dashboard in it (headless, t/lib/cdp_page.py);
    # lua5.1 (luac5.1): the Lua's files parse as the Lua 5.1 Redis runs (tests/lua_source_test.cpp);
    # libnginx-mod-stream: Debian's stream module, which the stream tests load before theirs.
    ensure_packages libnginx-mod-stream:/usr/lib/nginx/modules/ngx_stream_module.so cmake:cmake libgtest-dev:/usr/include/gtest/gtest.h \
        libhiredis-dev:/usr/include/hiredis/hiredis.h redis-server:redis-server redis-tools:redis-cli \
        redis-sentinel:redis-sentinel libnet-dns-perl:/usr/share/perl5/Net/DNS.pm \
        perl:prove curl:curl wrk:wrk prometheus:promtool python3-prometheus-client:/usr/lib/python3/dist-packages/prometheus_client \
        openssl:openssl libio-socket-ssl-perl:/usr/share/perl5/IO/Socket/SSL.pm \
        fail2ban:fail2ban-regex libhowardhinnant-date-dev:/usr/include/date/tz.h faketime:faketime \
        python3-grpcio:/usr/lib/python3/dist-packages/grpc chromium:/usr/bin/chromium lua5.1:luac5.1
}

# nginx's auto/make names an addon's objects with sed patterns that are not anchored (".c",
# ".cc", ".cpp", ".S" anywhere in the path), so a build directory whose path holds a dot
# followed by "c" or "S" (/tmp/tmp.S4b..., ~/my.code/...) gets a Makefile with mangled object
# names ("No rule to make target"): said plainly here instead.
objs_path_ok() {
    case $1 in
        *.[cS]*)
            log "cannot build in $1: nginx's auto/make mangles object paths that hold \".c\" or \".S\" (move the checkout)"
            exit 1 ;;
    esac
}

# Configures the nginx tree $1 with objects in $2 (once per tree, arguments and module
# sources), then runs make target $3 ('' for nginx and the module). The rest are configure's
# arguments. CFLAGS is unset: when set, configure drops nginx's own -W -Wall -Werror.
configure_make() {
    local src=$1 objs=$2 target=$3
    shift 3
    objs_path_ok "$objs"
    local stamp="$objs/.configured"
    local want="$src $* $(cd "$ROOT" && cat config config.make && find src -name '*.cpp' -o -name '*.h' -o -name '*.lua' | LC_ALL=C sort)"
    if [[ ! -f $stamp || $(cat "$stamp") != "$want" || ! -f $objs/Makefile ]]; then
        log "configuring $src"
        mkdir -p "$objs"
        (cd "$src" && env -u CFLAGS ./configure "$@" --builddir="$objs" \
            --add-dynamic-module="$ROOT" >"$objs/configure.log" 2>&1) \
            || { tail -30 "$objs/configure.log"; exit 1; }
        printf '%s' "$want" >"$stamp"
    fi
    # shellcheck disable=SC2086
    (cd "$src" && make -s -j"$JOBS" -f "$objs/Makefile" $target)
}

# Builds the module into $1 with extra cc opts $2: against Debian's nginx-dev with Debian's
# configure flags, or against $NGINX_SRC --with-compat with nginx's default compiler flags.
build_module() {
    local out=$1 extra_cc=${2:-}
    local src=${NGINX_SRC:-}
    local flags=()
    if [[ -z $src ]]; then
        # Debian's nginx-dev ships headers and configure; configure writes into the tree, so copy it.
        src="$BUILD/nginx-src"
        if [[ ! -x $src/configure || /usr/share/nginx/src/configure -nt $src/configure ]]; then
            rm -rf "$src"; mkdir -p "$BUILD"; cp -r /usr/share/nginx/src "$src"
        fi
        # shellcheck disable=SC1091
        source /usr/share/nginx/src/conf_flags
        # Debian builds stream as a module (libnginx-mod-stream) with these; nginx-dev's flags
        # leave them out. The stream .so is built against them.
        flags=("${NGX_CONF_FLAGS[@]}" --with-compat --with-stream=dynamic --with-stream_ssl_module
            --with-stream_ssl_preread_module --with-stream_realip_module --with-cc-opt="-g -O2 -fPIC $extra_cc")
    else
        src=$(cd "$src" && pwd)
        flags=(--with-compat)
        [[ -z $extra_cc ]] || flags+=(--with-cc-opt="$extra_cc")
    fi
    [[ -z $extra_cc ]] || flags+=(--with-ld-opt="$extra_cc")
    log "building modules"
    configure_make "$src" "$out/objs" "$out/objs/ngx_http_ratelimit_module.so $out/objs/ngx_stream_ratelimit_module.so" \
        "${flags[@]}"
    # A new file, renamed over the old one: an nginx running the old .so keeps its mapping.
    local so
    for so in ngx_http_ratelimit_module.so ngx_stream_ratelimit_module.so; do
        cp "$out/objs/$so" "$out/.$so.new"
        mv -f "$out/.$so.new" "$out/$so"
        log "built $out/$so"
    done
}

# The newest upstream nginx release tarball next to the repository (CI: ../shared/nginx/).
upstream_tarball() {
    local t
    t=$(compgen -G "$ROOT/../shared/nginx/nginx-*.tar.gz" | sort -V | tail -1) || true
    [[ -n $t ]] && printf '%s\n' "$(cd "$(dirname "$t")" && pwd)/$(basename "$t")"
}

# Builds upstream nginx from $1 --with-compat and the module against it, both with nginx's
# default flags (-O -W -Wall -Werror), into build/upstream/, then runs prove with them on
# the test files given after $1 (all of t/ by default).
upstream_tests() {
    local tarball=$1 dir="$BUILD/upstream" name
    shift
    name=$(basename "$tarball" .tar.gz)
    build_deps
    if [[ ! -x $dir/$name/configure || $tarball -nt $dir/$name/configure ]]; then
        log "unpacking $tarball"
        rm -rf "${dir:?}/$name"; mkdir -p "$dir"
        tar -xzf "$tarball" -C "$dir"
        touch "$dir/$name/configure"
    fi
    log "building $name and the module against it"
    # t/15 uses auth_request and addition, and t/74 realip, which are not built by default;
    # ssl_module brings OpenSSL, which `ratelimit_redis ... ssl` uses through nginx; t/80
    # checks HTTP/2 streams, and t/82 grpc_pass (the grpc module needs http_v2).
    ensure_packages libssl-dev:/usr/include/openssl/ssl.h
    local t0=$SECONDS
    configure_make "$dir/$name" "$dir/objs" "" --with-compat \
        --with-http_auth_request_module --with-http_addition_module --with-http_ssl_module \
        --with-http_v2_module --with-http_realip_module \
        --with-stream --with-stream_ssl_module --with-stream_ssl_preread_module --with-stream_realip_module
    log "built $name in $((SECONDS - t0)) s"
    test_deps
    log "prove ${*:-t/} against $name"
    (cd "$ROOT" && export NGINX_BIN="$dir/objs/nginx" RATELIMIT_SO="$dir/objs/ngx_http_ratelimit_module.so" \
        RATELIMIT_STREAM_SO="$dir/objs/ngx_stream_ratelimit_module.so" && prove_tests "$@")
}

# prove -I t/lib on the test files given, or on all of t/: first the files that may share the
# machine, PROVE_JOBS at a time (default: CPUs + 1; each has its own ports, servers and
# directories: t/lib), then the files marked "# runs alone:" (they measure time or load the
# machine) one after the other. Both groups run whatever the first one's outcome; --timer: each
# file's time, to weigh what running them at once saves.
prove_tests() {
    if (($#)); then prove -I t/lib "$@"; return; fi
    local shared=() alone=() f rc=0
    for f in t/*.t; do
        if grep -q '^# runs alone:' "$f"; then alone+=("$f"); else shared+=("$f"); fi
    done
    # (prove without files would run all of t/)
    if ((${#shared[@]})); then prove -I t/lib --timer -j "${PROVE_JOBS:-$((JOBS + 1))}" "${shared[@]}" || rc=$?; fi
    if ((${#alone[@]})); then prove -I t/lib --timer "${alone[@]}" || rc=$?; fi
    return "$rc"
}

do_build() { build_deps; build_module "$BUILD"; }

do_asan() {
    build_deps
    build_module "$BUILD/asan" "-fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=undefined"
}

unit_tests() {
    test_deps
    log "GoogleTest"
    cmake -S "$ROOT/tests" -B "$BUILD/tests" -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
    cmake --build "$BUILD/tests" -j"$JOBS"
    ctest --test-dir "$BUILD/tests" --output-on-failure
}

e2e_tests() {
    test_deps
    log "prove t/"
    (cd "$ROOT" && prove_tests)
}

asan_env() {
    export RATELIMIT_SO="$BUILD/asan/ngx_http_ratelimit_module.so"
    export RATELIMIT_STREAM_SO="$BUILD/asan/ngx_stream_ratelimit_module.so"
    LD_PRELOAD="$(gcc -print-file-name=libasan.so):$(gcc -print-file-name=libubsan.so)"
    export LD_PRELOAD
    # detect_odr_violation=0: every nginx dynamic module defines ngx_modules, ngx_module_names and
    # ngx_module_order (nginx looks each up in its own .so), so the http and stream modules
    # loaded together define them twice by design.
    export ASAN_OPTIONS="detect_leaks=0:detect_odr_violation=0:abort_on_error=1:log_path=$BUILD/asan/asan.log"
    export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1:log_path=$BUILD/asan/ubsan.log"
}

# dpkg-buildpackage in a copy of the tree (it writes debian/ and obj-*/ into its source); the
# .deb and its build log (deb.log) go to build/; lintian fails the command on an error.
do_deb() {
    ensure_packages dpkg-dev:dpkg-buildpackage debhelper:dh lintian:lintian build-essential:/usr/share/build-essential/list \
        nginx-dev:/usr/share/nginx/src/configure libhiredis-dev:/usr/include/hiredis/hiredis.h \
        libnginx-mod-stream:/usr/lib/nginx/modules/ngx_stream_module.so
    local tmp
    # No dot in the name: dpkg-buildpackage builds in it (objs_path_ok).
    tmp=$(mktemp -d /tmp/rl-deb-XXXXXXXXXX)
    # shellcheck disable=SC2064
    trap "rm -rf '$tmp'" EXIT
    mkdir -p "$tmp/src" "$BUILD"
    tar -C "$ROOT" --exclude=./build --exclude=./.git --exclude='./obj-*' -cf - . | tar -C "$tmp/src" -xf -
    log "dpkg-buildpackage"
    (cd "$tmp/src" && DEB_BUILD_OPTIONS="parallel=$JOBS" dpkg-buildpackage -b -us -uc >"$BUILD/deb.log" 2>&1) \
        || { tail -40 "$BUILD/deb.log"; exit 1; }
    # Two packages: the http module and the stream module.
    local pkg deb
    for pkg in libnginx-mod-http-ratelimit libnginx-mod-stream-ratelimit; do
        rm -f "$BUILD/${pkg}"_*.deb
        cp "$tmp/${pkg}"_*.deb "$BUILD/"
        deb=$(ls "$BUILD/${pkg}"_*.deb)
        log "lintian $deb"
        lintian --fail-on error "$deb"
        log "built $deb"
    done
}

do_run() {
    do_build
    local dir="$BUILD/run"
    mkdir -p "$dir/logs"
    do_stop_quiet
    sed "s#load_module .*ngx_http_ratelimit_module.so;#load_module $BUILD/ngx_http_ratelimit_module.so;#" \
        "$ROOT/examples/quickstart.conf" >"$dir/nginx.conf"
    /usr/sbin/nginx -p "$dir" -c "$dir/nginx.conf" -e "$dir/logs/error.log"
    log "nginx is running on http://127.0.0.1:8080/ (stop it with ./build.sh stop)"
    sleep 0.3
    # Seven requests at once, on one keep-alive connection: burst 3 + 1 pass, the rest wait.
    local urls=() i
    for i in 1 2 3 4 5 6 7; do urls+=(-o /dev/null "http://127.0.0.1:8080/"); done
    curl -s -w '%{http_code}  RateLimit: %header{ratelimit}  Retry-After: %header{retry-after}\n' "${urls[@]}" \
        | awk '{ printf "request %d: %s\n", NR, $0 }'
}

do_stop_quiet() {
    local pid="$BUILD/run/logs/nginx.pid"
    if [[ -f $pid ]] && kill -0 "$(cat "$pid")" 2>/dev/null; then
        /usr/sbin/nginx -p "$BUILD/run" -c "$BUILD/run/nginx.conf" -e "$BUILD/run/logs/error.log" -s quit || true
        sleep 0.5
    fi
}

cmd=${1:-build}
case "$cmd" in
    build) do_build ;;
    run) ensure_packages curl:curl; do_run ;;
    stop) do_stop_quiet ;;
    test)
        do_build
        unit_tests
        e2e_tests
        if tarball=$(upstream_tarball); then
            upstream_tests "$tarball"
        else
            log "no ../shared/nginx/nginx-*.tar.gz: upstream nginx build and tests skipped"
        fi
        ;;
    test-upstream)
        tarball=$(upstream_tarball) || { log "no ../shared/nginx/nginx-*.tar.gz next to the repository"; exit 1; }
        shift
        upstream_tests "$tarball" "$@"
        ;;
    unit) unit_tests ;;
    prove) e2e_tests ;;
    asan) do_asan ;;
    deb) do_deb ;;
    test-asan)
        do_asan
        rm -f "$BUILD"/asan/asan.log* "$BUILD"/asan/ubsan.log*
        asan_env
        e2e_tests
        # A sanitizer report kills only the worker that hit it: the reports are the verdict.
        if compgen -G "$BUILD/asan/*san.log*" >/dev/null; then
            cat "$BUILD"/asan/*san.log* >&2
            log "sanitizer reports above"
            exit 1
        fi
        ;;
    bench) do_build; ensure_packages wrk:wrk valgrind:valgrind; "$ROOT/tests/bench/run.sh"; "$ROOT/tests/bench/instructions.sh" ;;
    bench-stream) do_build; ensure_packages libnginx-mod-stream:/usr/lib/nginx/modules/ngx_stream_module.so \
        redis-server:redis-server redis-tools:redis-cli openssl:openssl; "$ROOT/tests/bench/stream.sh" ;;
    *) echo "usage: $0 [build|run|stop|test|test-upstream|unit|prove|asan|test-asan|bench|bench-stream|deb]" >&2; exit 2 ;;
esac
