-- TIME is not deterministic: replicate the script's effects (the default since Redis 5, the
-- only mode since 7: then a no-op).
redis.replicate_commands()
return run(KEYS, ARGV)
