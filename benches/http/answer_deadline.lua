-- wrk script: POST /v1/answer with the questions of $QUERIES (one per line), in turn, each with
-- "deadline_ms": $DEADLINE_MS, and $TOKEN.
local queries = {}
for line in io.lines(os.getenv("QUERIES")) do queries[#queries + 1] = line end
local token = os.getenv("TOKEN")
local deadline = tonumber(os.getenv("DEADLINE_MS"))
local next_query = 0
request = function()
  next_query = next_query % #queries + 1
  local body = string.format('{"question": "%s", "deadline_ms": %d}', queries[next_query], deadline)
  return wrk.format("POST", "/v1/answer",
    { ["Content-Type"] = "application/json", ["Authorization"] = "Bearer " .. token }, body)
end
