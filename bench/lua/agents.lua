-- wrk: one JSON-RPC POST (BENCH_BODY) per request to a different agent each time, picked at random from
-- BENCH_AGENTS (lines "agent-id key", written by `seed agents`), with that agent's key, curl-style.
local agents = {}
for line in io.lines(os.getenv("BENCH_AGENTS")) do
  local id, key = string.match(line, "^(%S+) (%S+)$")
  if id then
    agents[#agents + 1] = {
      path = "/" .. id .. "/mcp",
      headers = { ["Content-Type"] = "application/json", ["Accept"] = "*/*", ["X-Agent-API-Key"] = key },
    }
  end
end
local body = os.getenv("BENCH_BODY")

init = function(args)
  -- Each thread has its own Lua state: seed each differently.
  math.randomseed(os.time() + tonumber(tostring(agents):match("0x(%x+)") or "0", 16) % 100000)
end

request = function()
  local agent = agents[math.random(#agents)]
  return wrk.format("POST", agent.path, agent.headers, body)
end

done = function(summary, latency, requests)
  local e = summary.errors
  io.write(string.format("RESULT requests=%d duration_us=%d p50_us=%d p99_us=%d errors=%d non2xx=%d\n",
    summary.requests, summary.duration, latency:percentile(50), latency:percentile(99),
    e.connect + e.read + e.write + e.timeout, e.status))
end
