-- wrk script: POST /v1/retrieve with the queries of $QUERIES (one per line), in turn.
local queries = {}
for line in io.lines(os.getenv("QUERIES")) do queries[#queries + 1] = line end
local token = os.getenv("TOKEN")
local next_query = 0
request = function()
  next_query = next_query % #queries + 1
  local body = string.format('{"query": "%s", "k": 10}', queries[next_query])
  return wrk.format("POST", "/v1/retrieve",
    { ["Content-Type"] = "application/json", ["Authorization"] = "Bearer " .. token }, body)
end
