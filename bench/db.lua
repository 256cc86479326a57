-- wrk script for DbCrud reads (bench/db.sh): GET the URL's path followed by a random seeded
-- customer id (1..IDS, default 100000).
local ids = tonumber(os.getenv("IDS") or "100000")

function init(args)
  math.randomseed(os.time() + tonumber(tostring({}):sub(8), 16) % 1000)
end

function request()
  return wrk.format("GET", wrk.path .. tostring(math.random(1, ids)))
end
