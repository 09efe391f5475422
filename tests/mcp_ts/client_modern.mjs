// The official TypeScript MCP SDK's v2 client (@modelcontextprotocol/client), which speaks MCP 2026-07-28,
// against the relay: `node client_modern.mjs http|stdio`. Reads OAR_URL, OAR_TOKEN, SESSION_ID (a session to
// prompt) and SLEEP_SECONDS (a turn longer than the relay's MCP wait cap); prints one JSON object with what each
// step got, for tests/test_mcp_typescript.py to check.
import { Client, StreamableHTTPClientTransport } from "@modelcontextprotocol/client";
import { StdioClientTransport } from "@modelcontextprotocol/client/stdio";

const mode = process.argv[2];
const env = process.env;
const transport = mode === "stdio"
  ? new StdioClientTransport({ command: env.PYTHON, args: ["-m", "oar", "mcp"], cwd: env.PROJECT, env: { ...env },
      stderr: "inherit" })
  : new StreamableHTTPClientTransport(new URL(`${env.OAR_URL}/mcp`), {
      requestInit: { headers: { Authorization: `Bearer ${env.OAR_TOKEN}` } },
    });
// As the client connects to any server: `server/discover` first, the handshake only if that fails.
const client = new Client({ name: "oar-ts-v2-test", version: "1.0.0" }, { versionNegotiation: { mode: "auto" } });
await client.connect(transport);
const body = (result) => ({ isError: result.isError ?? false, json: JSON.parse(result.content[0].text) });
const out = {
  era: client.getProtocolEra(), protocolVersion: client.getNegotiatedProtocolVersion(),
  capabilities: client.getServerCapabilities(), instructions: client.getInstructions() ?? null,
};
out.tools = (await client.listTools()).tools.map((tool) => tool.name);
out.listRelays = body(await client.callTool({ name: "relay_tool", arguments: { action: "list_relays" } }));
const send = { action: "send", relay: "this", session: env.SESSION_ID, text: `!sleep ${env.SLEEP_SECONDS}` };
let progress = 0;
// With progress the reply arrives in this one call, past the relay's cap; without, the relay answers `running`.
out.streamed = body(await client.callTool({ name: "relay_tool", arguments: send }, {
  resetTimeoutOnProgress: true, onprogress: () => { progress += 1; },
}));
out.progress = progress;
out.capped = body(await client.callTool({ name: "relay_tool", arguments: send }));
await client.close();
console.log(JSON.stringify(out));
