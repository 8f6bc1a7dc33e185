-- ngx_http_ratelimit_module: decides the limits of a batch of requests (groups, in order, each
-- all or nothing), or refunds a request's, atomically. Layout: src/core/wire/redis_command.h.
-- Redis runs the files of src/core/wire/lua in the order of their names, most of them the
-- mirror of a file of src/core: the same functions with the same integer operations in the
-- same order. All values are integers below 2^52 held in doubles: +, - and * are exact, and
-- so is floor(a / b) for 0 <= a, 0 < b, a + b < 2^53 (the rounded quotient never reaches the
-- next integer). So is a % b (Lua: a - floor(a / b) * b, floored like window_start), and then
-- (a - a % b) / b is C++'s a / b: the hot paths write it so, as the VM computes it without the
-- cost of a call to math.floor. Never tostring a number beyond 14 digits (Lua 5.1 keeps 14):
-- numbers go out through struct.pack or string.format('%d').
--
-- Algorithms: 0 gcra, 1 token, 2 leaky, 3 sliding, 4 fixed, 5 log, 6 concurrency. A check is a
-- record of 13 doubles (104 bytes, see redis_command.h); a hash algorithm's state is 3: a, b, c
-- of rl::State.
-- A decide_* function returns the decision (allowed, remaining, reset, retry) and then
-- whether admitting it changes the state (w) and to what (x, y, z); a bucket's delay is left
-- in `shaped`.
--
-- Written for Redis's cost (tests/bench/redis_lua.sh measures it): no table per check
-- (multiple return values instead); one struct.unpack of doubles per check instead of ten
-- tonumber()s; in a batch, each state read once (GET) and written once (SET ... PX), and each
-- concurrency key read once (ZCOUNT) and written once (ZREMRANGEBYSCORE, ZADD, PEXPIRE); `run`
-- dispatches and reads the states itself, as each Lua call on a check's path costs a few
-- percent of it (read_check's is paid: a record's checks, written once). Under EVAL every local
-- function of the top level is a new closure on every call (about 0.1 us of Redis's time each),
-- which FCALL does not pay: FCALL is the way to call it where the server has Functions.

-- A library's top level sees only `redis`: each call binds the rest first.
local floor, fmt, sunpack, spack, call, pget, tonum, unpk
local function bind()
  floor, fmt, sunpack, spack = math.floor, string.format, struct.unpack, struct.pack
  call, pget, tonum, unpk = redis.call, redis.pcall, tonumber, unpack
end
