-- wrk: agent A's costliest allowed requests, picked at random for every request from BENCH_REQUESTS (one
-- JSON-RPC body a line, written by bench/noisy), curl-style, with A's key (BENCH_KEY) on A's endpoint
-- (BENCH_PATH). The requests are formatted once, in init().
local requests = {}

init = function(args)
  local headers = { ["Content-Type"] = "application/json", ["Accept"] = "*/*", ["X-Agent-API-Key"] = os.getenv("BENCH_KEY") }
  for body in io.lines(os.getenv("BENCH_REQUESTS")) do
    if #body > 0 then
      requests[#requests + 1] = wrk.format("POST", os.getenv("BENCH_PATH"), headers, body)
    end
  end
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
