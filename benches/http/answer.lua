-- wrk script: POST /v1/answer with the README's hotel question and $TOKEN.
local token = os.getenv("TOKEN")
local body = '{"question": "How much are hotel stays reimbursed per night in London?"}'
request = function()
  return wrk.format("POST", "/v1/answer",
    { ["Content-Type"] = "application/json", ["Authorization"] = "Bearer " .. token }, body)
end
