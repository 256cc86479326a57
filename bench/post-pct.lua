-- wrk script: bench/post.lua's request, and at the end one line of latency percentiles in
-- milliseconds: `pct p10 p25 p50 p75 p90 p95 p99 p99.9 max` (bench/direct.sh, PCT=1).
dofile("bench/post.lua")

function done(summary, latency, requests)
  local out = {}
  for _, p in ipairs({ 10, 25, 50, 75, 90, 95, 99, 99.9 }) do
    out[#out + 1] = string.format("%.1f", latency:percentile(p) / 1000)
  end
  out[#out + 1] = string.format("%.1f", latency.max / 1000)
  io.write("pct " .. table.concat(out, " ") .. "\n")
end
