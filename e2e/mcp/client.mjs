// Drives `oma-sandbox mcp` with the official TypeScript MCP client: lists
// the tools, calls write, read, edit, bash, glob and grep checking each
// result, leaves report.txt in the session's outputs (msb layout), then
// closes. Exits non-zero on any mismatch.
//
// Usage: OMA_MSB=/path/to/msb node client.mjs /path/to/oma-sandbox [args...]
// The args default to `mcp --backend msb`.
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StdioClientTransport } from "@modelcontextprotocol/sdk/client/stdio.js";
import assert from "node:assert/strict";

const [bin, ...rest] = process.argv.slice(2);
if (!bin) {
  console.error("usage: node client.mjs OMA_SANDBOX_BIN [ARGS...]");
  process.exit(2);
}
const args = rest.length > 0 ? rest : ["mcp", "--backend", "msb"];

// The transport passes the server only a few safe variables; these are the
// ones oma-sandbox reads.
const env = {};
for (const key of ["OMA_MSB", "XDG_STATE_HOME", "TMPDIR"]) {
  if (process.env[key]) env[key] = process.env[key];
}

// A hung server must not hang CI.
const deadline = setTimeout(() => {
  console.error("client.mjs: timed out");
  process.exit(1);
}, 120_000);
deadline.unref();

const client = new Client({ name: "oma-sandbox-e2e", version: "1.0.0" });
const transport = new StdioClientTransport({ command: bin, args, env, stderr: "inherit" });

function text(result) {
  assert.equal(result.content.length, 1, "one content item");
  assert.equal(result.content[0].type, "text");
  return result.content[0].text;
}

// call calls a tool and checks that it succeeded with the wanted text.
async function call(name, args, want, options) {
  const result = await client.callTool({ name, arguments: args }, undefined, options);
  const got = text(result);
  assert.ok(!result.isError, `${name}: unexpected error result: ${got}`);
  if (want !== undefined) assert.equal(got, want, `${name} ${JSON.stringify(args)}`);
  console.log(`ok ${name}`);
  return got;
}

async function main() {
  await client.connect(transport);

  const { tools } = await client.listTools();
  const names = tools.map((t) => t.name).sort();
  assert.deepEqual(names, ["bash", "edit", "glob", "grep", "ls", "read", "write"]);
  for (const tool of tools) {
    assert.equal(tool.inputSchema.type, "object", `${tool.name} schema type`);
    assert.equal(tool.inputSchema.additionalProperties, false, `${tool.name} additionalProperties`);
    assert.ok(tool.description, `${tool.name} description`);
  }
  console.log(`ok tools/list: ${names.join(", ")}`);

  await call("write", { path: "e2e/hello.txt", content: "hello\nworld\n" }, "Successfully wrote 12 bytes to e2e/hello.txt");
  await call("read", { path: "e2e/hello.txt" }, "hello\nworld\n");
  await call("edit", { path: "e2e/hello.txt", edits: [{ oldText: "world", newText: "mcp" }] },
    "Successfully replaced 1 block(s) in e2e/hello.txt.");
  await call("read", { path: "e2e/hello.txt" }, "hello\nmcp\n");

  // Bash output arrives as progress notifications too when asked for.
  let streamed = "";
  let last = 0;
  const out = await call("bash", { command: "cat e2e/hello.txt; sleep 0.3; pwd" }, undefined, {
    onprogress: (p) => {
      assert.ok(p.progress > last, "progress increases");
      last = p.progress;
      streamed += p.message ?? "";
    },
  });
  const lines = out.split("\n");
  assert.deepEqual(lines.slice(0, 2), ["hello", "mcp"]);
  const workspace = lines[2];
  assert.ok(workspace.startsWith("/"), `pwd printed ${workspace}`);
  // The server sends every notification before the result, but this SDK
  // handles a notification a microtask later and a result at once, and
  // forgets the request's progress handler with its result: a notification
  // read in the same chunk as the result is dropped here. So the output
  // printed before the sleep must have streamed, and what streamed must be
  // the output's beginning.
  assert.ok(streamed.startsWith("hello\nmcp\n"), `the output before the sleep streamed: ${JSON.stringify(streamed)}`);
  assert.ok(out.startsWith(streamed), `progress messages carry the output in order: ${JSON.stringify(streamed)}`);

  // Left for the caller: run.sh finds it in the --outputs directory.
  await call("bash", { command: "printf 'from mcp\\n' > /mnt/session/outputs/report.txt" }, "(no output)");
  await call("glob", { pattern: "*.txt" }, "e2e/hello.txt");
  await call("grep", { pattern: "mc+p", path: workspace }, `${workspace}/e2e/hello.txt`);

  // A tool error is a result with isError, not a protocol error.
  const missing = await client.callTool({ name: "read", arguments: { path: "missing.txt" } });
  assert.equal(missing.isError, true);
  assert.equal(text(missing), "File not found: missing.txt");
  const failed = await client.callTool({ name: "bash", arguments: { command: "exit 3" } });
  assert.equal(failed.isError, true);
  assert.match(text(failed), /Command exited with code 3$/);
  const invalid = await client.callTool({ name: "bash", arguments: { command: "true", timeout: 3601 } });
  assert.equal(invalid.isError, true);
  assert.equal(text(invalid), "bash timeout must be an integer from 0 through 3600 seconds");
  console.log("ok tool errors");

  await client.close();
  console.log("ok closed");
}

main().then(
  () => process.exit(0),
  async (err) => {
    console.error(`client.mjs: ${err.stack ?? err}`);
    await client.close().catch(() => {});
    process.exit(1);
  },
);
