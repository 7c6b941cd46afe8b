// Drives sandboxd's MCP server with the official MCP TypeScript SDK (npm
// @modelcontextprotocol/sdk), unchanged: argv[2] is the sandboxd binary, argv[3] the transport:
// "stdio" (`sandboxd mcp` as a subprocess) or "http" (the service's /mcp, streamable HTTP);
// SANDBOXD_URL and SANDBOXD_TOKEN are in the environment. It connects (initialize), lists the
// tools, calls them as an agent would (run_code; a session with a file and a PNG plot; a tool
// error; a long run it cancels; an unknown tool) and prints what it saw as one JSON object for
// tests/integration/test_mcp.py to judge.
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StdioClientTransport, getDefaultEnvironment } from "@modelcontextprotocol/sdk/client/stdio.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";

const [sandboxd, kind] = process.argv.slice(2);
const transport = kind === "http"
  ? new StreamableHTTPClientTransport(new URL(process.env.SANDBOXD_URL + "/mcp"), {
      requestInit: { headers: { Authorization: `Bearer ${process.env.SANDBOXD_TOKEN}` } },
    })
  : new StdioClientTransport({
      command: sandboxd,
      args: ["mcp"],
      env: {
        ...getDefaultEnvironment(),
        SANDBOXD_URL: process.env.SANDBOXD_URL,
        SANDBOXD_TOKEN: process.env.SANDBOXD_TOKEN,
      },
      stderr: "inherit",
    });
const client = new Client({ name: "sandboxd-test", version: "1.0.0" });
const seen = {};
const call = (name, args, options) => client.callTool({ name, arguments: args }, undefined, options);

await client.connect(transport);
seen.server = client.getServerVersion();
seen.capabilities = client.getServerCapabilities();
seen.instructions = client.getInstructions();
seen.tools = (await client.listTools()).tools;

seen.run = await call("run_code", { language: "python", code: "print(2 + 2)" });
seen.languages = await call("list_languages", {});
seen.failed_run = await call("run_code", {
  language: "python",
  code: "import sys; print('to stderr', file=sys.stderr); sys.exit(3)",
});
seen.timeout = await call("run_code", {
  language: "python", code: "while True: pass", limits: { wall_ms: 500 },
});
seen.bad_language = await call("run_code", { language: "cobol", code: "DISPLAY 'HI'." });

const opened = await call("create_session", { language: "python" });
seen.opened = opened;
const session_id = opened.structuredContent.id;
seen.write = await call("write_file", { session_id, path: "data/numbers.txt", content: "3\n4\n5\n" });
seen.listing = await call("list_files", { session_id, path: "data" });
seen.cell1 = await call("run_in_session", {
  session_id,
  code: "numbers = [int(x) for x in open('data/numbers.txt')]\ntotal = sum(numbers)\ntotal",
});
seen.cell2 = await call("run_in_session", {
  session_id,
  code: "import matplotlib\nmatplotlib.use('Agg')\nimport matplotlib.pyplot as plt\n" +
        "plt.plot(numbers)\nplt.savefig('plot.png')\nplt.show()\nprint(total * 2)",
});
seen.read_text = await call("read_file", { session_id, path: "data/numbers.txt" });
seen.read_png = await call("read_file", { session_id, path: "plot.png" });
seen.raised = await call("run_in_session", { session_id, code: "1 / 0" });

// A long run, cancelled by the client: the SDK sends notifications/cancelled.
const controller = new AbortController();
const started = Date.now();
const long = call("run_code", { language: "python", code: "import time\ntime.sleep(60)" },
                  { signal: controller.signal, timeout: 120000 });
setTimeout(() => controller.abort("test cancels"), 1500);
try {
  await long;
  seen.cancel = { resolved: true };
} catch (error) {
  seen.cancel = { rejected: String(error), after_ms: Date.now() - started };
}
// The server still answers after a cancellation.
seen.after_cancel = await call("run_code", { language: "bash", code: "echo still here" });

try {
  await call("no_such_tool", {});
  seen.unknown_tool = { resolved: true };
} catch (error) {
  seen.unknown_tool = { code: error.code, message: error.message };
}
seen.closed = await call("close_session", { session_id });
seen.after_close = await call("run_in_session", { session_id, code: "1" });
await client.close();
process.stdout.write(JSON.stringify(seen));
