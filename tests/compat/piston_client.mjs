// Drives the real piston-client package (npm), unchanged but for its base URL, against a
// sandboxd server: argv[2] is the server's base URL, stdin a JSON list of calls
// ([["runtimes"], ["execute", language, code, config], ...]); stdout is the JSON list of what
// each call returned. tests/integration/test_compat_piston.py runs it.
import piston from "piston-client";

const server = process.argv[2];
const chunks = [];
for await (const chunk of process.stdin) chunks.push(chunk);
const calls = JSON.parse(Buffer.concat(chunks).toString("utf8"));

const client = piston({ server });
const results = [];
for (const [method, ...args] of calls) {
  results.push(await client[method](...args));
}
process.stdout.write(JSON.stringify(results));
