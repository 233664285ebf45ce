-- wrk: one JSON-RPC POST (BENCH_BODY) per request to a different agent each time, picked at random from
-- BENCH_AGENTS (lines "agent-id key", written by `seed agents`), with that agent's key, curl-style. The
-- requests are formatted once, in init(), so that wrk spends little more per request than with post.lua.
local requests = {}

init = function(args)
  local body = os.getenv("BENCH_BODY")
  for line in io.lines(os.getenv("BENCH_AGENTS")) do
    local id, key = string.match(line, "^(%S+) (%S+)$")
    if id then
      local headers = { ["Content-Type"] = "application/json", ["Accept"] = "*/*", ["X-Agent-API-Key"] = key }
      requests[#requests + 1] = wrk.format("POST", "/" .. id .. "/mcp", headers, body)
    end
  end
  -- Each thread has its own Lua state: seed each differently.
  math.randomseed(os.time() + tonumber(tostring(requests):match("0x(%x+)") or "0", 16) % 100000)
end

request = function()
  return requests[math.random(#requests)]
end

done = function(summary, latency, requests)
  local e = summary.errors
  io.write(string.format("RESULT requests=%d duration_us=%d p50_us=%d p99_us=%d errors=%d non2xx=%d\n",
    summary.requests, summary.duration, latency:percentile(50), latency:percentile(99),
    e.connect + e.read + e.write + e.timeout, e.status))
end
