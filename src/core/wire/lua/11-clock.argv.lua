local function clock(argv) return tonum(argv[2]) end  -- a test's: the caller's time
