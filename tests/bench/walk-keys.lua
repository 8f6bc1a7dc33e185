-- wrk script: GET /x?k=FIRST, FIRST+1, ... N, then 1, 2, ... (wraps around), DEPTH per write.
--   wrk ... -s walk-keys.lua http://127.0.0.1:PORT/ -- [N=1000000] [FIRST=1] [DEPTH=1]
-- run.sh uses it to fill a zone with every key once before measuring, so that the "1M keys"
-- rows measure a zone that really holds 1M keys rather than one still filling up.
-- DEPTH > 1: pipelined, as in random-keys.lua (keys still consecutive across writes).
local n, i, depth = 1000000, 0, 1
local format, concat = wrk.format, table.concat
local parts = {}

function init(args)
    n = tonumber(args[1]) or n
    i = (tonumber(args[2]) or 1) - 1
    depth = tonumber(args[3]) or depth
end

request = function()
    for j = 1, depth do
        i = i % n + 1
        parts[j] = format(nil, "/x?k=" .. i)
    end
    return concat(parts)
end
