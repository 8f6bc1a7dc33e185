-- wrk script: DEPTH pipelined GET requests per write (the URL's path), each connection waiting
-- MS milliseconds after each write's answers, so that C connections offer at most
-- C * DEPTH * 1000 / MS requests per second, less as answers take time (wrk alone sends as fast
-- as answers come: a flood of a given rate needs a pace).
--   wrk -c C ... -s paced.lua URL -- [MS=1] [DEPTH=1]
local ms, req

function init(args)
    ms = tonumber(args[1]) or 1
    local r = {}
    for i = 1, (tonumber(args[2]) or 1) do r[i] = wrk.format(nil, wrk.path) end
    req = table.concat(r)
end

function request()
    return req
end

function delay()
    return ms
end
