-- wrk: like post.lua, but each request carries the next of the sessions in BENCH_SESSIONS (one
-- Mcp-Session-Id a line, each opened with initialize), so that every session has about one request in
-- flight, as when each of the connections were its own SDK client. The requests are formatted once, in
-- init(), so that wrk spends no more per request than with post.lua's fixed request.
local body = os.getenv("BENCH_BODY")
local headers = { ["Content-Type"] = "application/json" }
for line in string.gmatch(os.getenv("BENCH_HEADERS") or "", "[^\n]+") do
  local name, value = string.match(line, "^([^:]+):%s*(.*)$")
  if name then
    headers[name] = value
  end
end
local requests = {}
local n = 0

init = function(args)
  for line in io.lines(os.getenv("BENCH_SESSIONS")) do
    if #line > 0 then
      headers["Mcp-Session-Id"] = line
      requests[#requests + 1] = wrk.format("POST", nil, headers, body)
    end
  end
end

request = function()
  n = n % #requests + 1
  return requests[n]
end

done = function(summary, latency, requests)
  local e = summary.errors
  io.write(string.format("RESULT requests=%d duration_us=%d p50_us=%d p99_us=%d errors=%d non2xx=%d\n",
    summary.requests, summary.duration, latency:percentile(50), latency:percentile(99),
    e.connect + e.read + e.write + e.timeout, e.status))
end
