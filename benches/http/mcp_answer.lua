-- wrk script: the README's hotel question and $TOKEN as an MCP `tools/call` of the `answer` tool
-- (POST /mcp, JSON-RPC 2.0), the same work as answer.lua's POST /v1/answer behind the MCP wrapper.
local token = os.getenv("TOKEN")
local body = '{"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "answer", '
  .. '"arguments": {"question": "How much are hotel stays reimbursed per night in London?"}}}'
request = function()
  return wrk.format("POST", "/mcp",
    { ["Content-Type"] = "application/json", ["Accept"] = "application/json, text/event-stream",
      ["MCP-Protocol-Version"] = "2025-11-25", ["Authorization"] = "Bearer " .. token }, body)
end
