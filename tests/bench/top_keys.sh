#!/usr/bin/env bash
# The top keys' summary (src/core/keys/top_keys.h): its error against the bound on 10^6
# rejections over 10^5 keys, issue 32's flooders, ns per rejection against a slot-table lookup,
# its bytes (tests/bench/top_keys_bench.cpp). A benchmark, not a test. ~1 minute.
#
#   tests/bench/top_keys.sh [--rounds N] [--seeds N]
#
# Builds into build/bench (cmake -DRL_BENCH=ON, optimised as the module is: -O2).
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
OUT="$ROOT/build/bench"
cmake -S "$ROOT/tests" -B "$OUT" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DRL_BENCH=ON >/dev/null
cmake --build "$OUT" --target rl_top_keys_bench -j"$(nproc 2>/dev/null || echo 2)" >/dev/null
"$OUT/bench/rl_top_keys_bench" "$@"
