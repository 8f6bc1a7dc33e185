-- wrk script: every request is GET /x?k=<random key in 1..N>, DEPTH of them per write.
--   wrk ... -s random-keys.lua http://127.0.0.1:PORT/ -- [N=1000000] [seed] [DEPTH=1]
-- One wrk thread (-t1) means one Lua state, so one random sequence for all connections.
-- The seed is an argument so that the warm-up and the measured run of a case do not replay
-- the same keys in the same order.
-- DEPTH > 1: HTTP/1.1 pipelining (see one-key.lua): each write carries DEPTH requests, each
-- with its own random key, built anew for every write. wrk learns the depth by parsing the
-- first string once, so every string must hold exactly DEPTH requests (it does).
-- The request is wrk.format's, split once around the key: wrk.format per request (a table and
-- a loop over the headers) would cost wrk more CPU than nginx spends on the request.
local n, depth = 1000000, 1
local random, concat = math.random, table.concat
local pre, post
local parts = {}

function init(args)
    n = tonumber(args[1]) or n
    math.randomseed(tonumber(args[2]) or os.time())
    depth = tonumber(args[3]) or depth
    pre, post = wrk.format(nil, "/x?k=@"):match("^(.-)@(.*)$")
end

request = function()
    if depth == 1 then return pre .. random(1, n) .. post end
    for i = 1, depth do parts[i] = pre .. random(1, n) .. post end
    return concat(parts)
end
