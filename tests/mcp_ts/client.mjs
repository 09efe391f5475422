// The official TypeScript MCP SDK client against the relay: `node client.mjs http|stdio`.
// Reads OAR_URL, OAR_TOKEN, CARD_TOKEN (a conversation without Allows), SESSION_ID (a session to prompt), SLEEP_SECONDS (a turn longer than
// the relay's MCP wait cap) and TIMEOUT_MS (the client's request timeout for the long calls);
// prints one JSON object with what each step got, for tests/test_mcp_typescript.py to check.
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";
import { StdioClientTransport } from "@modelcontextprotocol/sdk/client/stdio.js";

const mode = process.argv[2];
const env = process.env;
const connect = async (token) => {
  const transport = mode === "stdio"
    ? new StdioClientTransport({
        command: env.PYTHON, args: ["-m", "oar", "mcp"], cwd: env.PROJECT,
        env: { ...env, OAR_URL: env.OAR_URL, OAR_TOKEN: token }, stderr: "inherit",
      })
    : new StreamableHTTPClientTransport(new URL(`${env.OAR_URL}/mcp`), {
        requestInit: { headers: { Authorization: `Bearer ${token}` } },
      });
  const client = new Client({ name: "oar-ts-test", version: "1.0.0" });
  await client.connect(transport);
  return { client, transport };
};

const { client, transport } = await connect(env.OAR_TOKEN);
const out = { protocolVersion: transport.protocolVersion ?? null };
const body = (result) => ({ isError: result.isError ?? false, json: JSON.parse(result.content[0].text),
                            structured: result.structuredContent ?? null });

const tools = await client.listTools();
out.tools = tools.tools.map((tool) => ({ name: tool.name, inputSchema: tool.inputSchema }));
out.listRelays = body(await client.callTool({ name: "relay_tool", arguments: { action: "list_relays" } }));
out.bad = body(await client.callTool({ name: "relay_tool", arguments: { action: "wait", relay: "this" } }));
out.legacy = body(await client.callTool({ name: "remote_relay", arguments: { action: "list_relays" } }));
try {
  await client.callTool({ name: "no_such_tool", arguments: {} });
  out.unknownTool = null;
} catch (error) {
  out.unknownTool = { code: error.code ?? null, message: String(error.message) };
}

const timeout = Number(env.TIMEOUT_MS);
const send = { action: "send", relay: "this", session: env.SESSION_ID, text: `!sleep ${env.SLEEP_SECONDS}` };
let progress = 0;
const started = Date.now();
// A client that resets its timeout on progress: the reply arrives in this one call.
out.streamed = body(await client.callTool({ name: "relay_tool", arguments: send }, undefined, {
  timeout, resetTimeoutOnProgress: true, onprogress: () => { progress += 1; },
}));
out.streamedSeconds = (Date.now() - started) / 1000;
out.progress = progress;
// A client that does not: the relay answers `running` before the cap, and `wait` gets the reply.
const capped = body(await client.callTool({ name: "relay_tool", arguments: send }, undefined, { timeout }));
out.capped = capped;
out.waited = body(await client.callTool({ name: "relay_tool", arguments: {
  action: "wait", relay: "this", session: env.SESSION_ID, message_id: capped.json.message_id, wait_seconds: 30 } },
  undefined, { resetTimeoutOnProgress: true, onprogress: () => {} }));
// A conversation whose first create_session needs the owner's Allow: the call waits for its card
// (kept alive by progress) and the test allows it in the Inbox meanwhile.
const asker = await connect(env.CARD_TOKEN);
out.carded = body(await asker.client.callTool({ name: "relay_tool", arguments: {
  action: "create_session", relay: "this", text: "carded", wait_seconds: 30 } },
  undefined, { resetTimeoutOnProgress: true, onprogress: () => {} }));
await asker.client.close();
await client.close();
console.log(JSON.stringify(out));
