-- wrk script: DEPTH pipelined GET /x per write (HTTP/1.1 pipelining).
--   wrk ... -s one-key.lua http://127.0.0.1:PORT/ -- [DEPTH=16]
-- run.sh uses it for the one-key rows when PIPELINE > 1. With one request per write, wrk's own
-- CPU time per request exceeds nginx's and wrk sets the pace; writing DEPTH requests at once
-- (and reading DEPTH responses per read, mostly) divides wrk's cost per request, so nginx
-- becomes the bottleneck. wrk counts DEPTH responses per write (it parses the string once at
-- start to learn the depth) and records one latency sample per write: from the write to the
-- last of its DEPTH responses.
local req

function init(args)
    local depth = tonumber(args[1]) or 16
    local r = {}
    for i = 1, depth do r[i] = wrk.format(nil, "/x") end
    req = table.concat(r)
end

request = function()
    return req
end
