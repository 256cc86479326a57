-- wrk script for the integrator scenarios (bench/integrator.sh). BODY: a JSON file POSTed as
-- is; BODY2 (optional): a second file, the two alternating (JsonCBR's 50/50 tier mix);
-- IDS (optional, no BODY): GET the URL's path followed by ids 0..IDS-1 in turn (ScatterGather).
local bodies = {}
for _, name in ipairs({"BODY", "BODY2"}) do
  local path = os.getenv(name)
  if path then
    local f = assert(io.open(path, "rb"))
    bodies[#bodies + 1] = f:read("*a")
    f:close()
  end
end
local ids = tonumber(os.getenv("IDS") or "0")
local n = 0

function request()
  n = n + 1
  if ids > 0 then
    return wrk.format("GET", wrk.path .. tostring(n % ids))
  end
  local body = bodies[(n % #bodies) + 1]
  return wrk.format("POST", nil, { ["Content-Type"] = "application/json" }, body)
end
