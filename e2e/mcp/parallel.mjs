// Drives `oma-sandbox mcp` as an agent runtime does when it issues tool
// calls in parallel: 72 calls at once on one session — every tool, three
// rounds of 16, then a burst of 12 writes beside 6 greps and 6 globs over
// the same directory. Every call must succeed with its own result, no
// result may name one of the tools' own files (.oma-*), and the workspace
// must hold exactly what the calls wrote. Exits non-zero on any mismatch.
//
// Usage: node parallel.mjs /path/to/oma-sandbox mcp [args...]
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StdioClientTransport } from "@modelcontextprotocol/sdk/client/stdio.js";
import assert from "node:assert/strict";

const [bin, ...args] = process.argv.slice(2);
if (!bin || args.length === 0) {
  console.error("usage: node parallel.mjs OMA_SANDBOX_BIN mcp [ARGS...]");
  process.exit(2);
}
const env = {};
for (const key of ["OMA_MSB", "XDG_STATE_HOME", "TMPDIR"]) {
  if (process.env[key]) env[key] = process.env[key];
}

const deadline = setTimeout(() => {
  console.error("parallel.mjs: timed out");
  process.exit(1);
}, 600_000);
deadline.unref();

const client = new Client({ name: "oma-sandbox-e2e-parallel", version: "1.0.0" });
const transport = new StdioClientTransport({ command: bin, args, env, stderr: "inherit" });
// A loaded machine runs 72 guest commands at once; no call may time out
// on the client's side first.
const callOptions = { timeout: 300_000 };

function text(result) {
  assert.equal(result.content.length, 1, "one content item");
  assert.equal(result.content[0].type, "text");
  return result.content[0].text;
}

async function call(name, args) {
  const result = await client.callTool({ name, arguments: args }, undefined, callOptions);
  const got = text(result);
  assert.ok(!result.isError, `${name} ${JSON.stringify(args)}: error result: ${got}`);
  assert.ok(!got.includes(".oma-"), `${name} ${JSON.stringify(args)}: a tool's own file in the result: ${got}`);
  return got;
}

const lines = (s) => s.split("\n").filter((l) => l !== "");

async function main() {
  await client.connect(transport);
  const ws = (await call("bash", { command: "pwd" })).trim();

  // Seed what the rounds read, edit, list and search, one call at a time,
  // and record what each search returns alone.
  const seed = [];
  for (let k = 0; k < 3; k++) {
    for (let j = 0; j < 3; j++) seed.push(call("write", { path: `seed/r${k}-${j}.txt`, content: `read ${k} ${j}\n` }));
    for (let j = 0; j < 2; j++) seed.push(call("write", { path: `seed/e${k}-${j}.txt`, content: `before ${k} ${j}\n` }));
    for (const f of ["a.txt", "b.txt", "sub/c.txt"]) seed.push(call("write", { path: `seed/ls${k}/${f}`, content: `list ${k}\n` }));
    for (const f of ["x.md", "y.md", "z.txt"]) seed.push(call("write", { path: `seed/g${k}/${f}`, content: `marker-${k} ${f}\n` }));
  }
  for (let j = 0; j < 4; j++) seed.push(call("write", { path: `burst/pre${j}.txt`, content: `burst pre ${j}\n` }));
  await Promise.all(seed);
  const alone = {};
  for (let k = 0; k < 3; k++) {
    alone[`ls${k}`] = await call("ls", { path: `seed/ls${k}` });
    alone[`glob${k}`] = await call("glob", { pattern: "*.md", path: `seed/g${k}` });
    alone[`grep${k}`] = await call("grep", { pattern: `marker-${k}`, path: `${ws}/seed` });
    assert.equal(lines(alone[`grep${k}`]).length, 3, `grep ${k} alone: ${alone[`grep${k}`]}`);
    assert.equal(lines(alone[`glob${k}`]).length, 2, `glob ${k} alone: ${alone[`glob${k}`]}`);
  }
  const preGlob = lines(await call("glob", { pattern: "*.txt", path: "burst" }));
  const preGrep = lines(await call("grep", { pattern: "^burst", path: `${ws}/burst` }));
  assert.equal(preGlob.length, 4, `burst glob alone: ${preGlob}`);
  assert.equal(preGrep.length, 4, `burst grep alone: ${preGrep}`);
  console.log("ok seeded");

  // 72 calls at once, each with the result it must have.
  const calls = [];
  const expect = (name, args, check) => calls.push({ name, args, check });
  const exactly = (want) => (got) => assert.equal(got, want);
  for (let k = 0; k < 3; k++) {
    for (let j = 0; j < 3; j++) {
      const content = `round ${k} write ${j}\n`;
      expect("write", { path: `out/r${k}-${j}.txt`, content }, exactly(`Successfully wrote ${content.length} bytes to out/r${k}-${j}.txt`));
      expect("read", { path: `seed/r${k}-${j}.txt` }, exactly(`read ${k} ${j}\n`));
    }
    for (let j = 0; j < 2; j++) {
      expect("edit", { path: `seed/e${k}-${j}.txt`, edits: [{ oldText: "before", newText: "after" }] },
        exactly(`Successfully replaced 1 block(s) in seed/e${k}-${j}.txt.`));
      expect("ls", { path: `seed/ls${k}` }, exactly(alone[`ls${k}`]));
      expect("glob", { pattern: "*.md", path: `seed/g${k}` }, exactly(alone[`glob${k}`]));
      expect("grep", { pattern: `marker-${k}`, path: `${ws}/seed` }, exactly(alone[`grep${k}`]));
      expect("bash", { command: `echo bash-${k}-${j}; sleep 0.2; echo done-${k}-${j}` }, exactly(`bash-${k}-${j}\ndone-${k}-${j}\n`));
    }
  }
  // The burst: each search sees the files that existed before it, and
  // any of the new ones, but nothing else.
  const burstGlob = new Set([...preGlob]);
  const burstGrep = new Set([...preGrep]);
  for (let i = 0; i < 12; i++) {
    const content = `burst new ${i}\n`;
    expect("write", { path: `burst/n${i}.txt`, content }, exactly(`Successfully wrote ${content.length} bytes to burst/n${i}.txt`));
    burstGlob.add(preGlob[0].replace(/pre\d\.txt$/, `n${i}.txt`));
    burstGrep.add(preGrep[0].replace(/pre\d\.txt$/, `n${i}.txt`));
  }
  const within = (allowed, required) => (got) => {
    const seen = lines(got);
    for (const l of seen) assert.ok(allowed.has(l), `unexpected line ${JSON.stringify(l)} in ${JSON.stringify(got)}`);
    for (const l of required) assert.ok(seen.includes(l), `missing ${l} in ${JSON.stringify(got)}`);
  };
  for (let i = 0; i < 6; i++) {
    expect("grep", { pattern: "^burst", path: `${ws}/burst` }, within(burstGrep, preGrep));
    expect("glob", { pattern: "*.txt", path: "burst" }, within(burstGlob, preGlob));
  }
  assert.equal(calls.length, 72);
  assert.deepEqual([...new Set(calls.map((c) => c.name))].sort(), ["bash", "edit", "glob", "grep", "ls", "read", "write"]);

  const results = await Promise.allSettled(calls.map((c) => call(c.name, c.args)));
  const failures = [];
  results.forEach((r, i) => {
    const c = calls[i];
    try {
      if (r.status === "rejected") throw r.reason;
      c.check(r.value);
    } catch (err) {
      failures.push(`${c.name} ${JSON.stringify(c.args)}: ${err.message ?? err}`);
    }
  });
  if (failures.length > 0) {
    throw new Error(`${failures.length} of 72 parallel calls failed:\n${failures.join("\n")}`);
  }
  console.log("ok 72 parallel calls");

  // The workspace holds what the calls wrote and nothing of the tools'.
  for (let k = 0; k < 3; k++) {
    for (let j = 0; j < 3; j++) assert.equal(await call("read", { path: `out/r${k}-${j}.txt` }), `round ${k} write ${j}\n`);
    for (let j = 0; j < 2; j++) assert.equal(await call("read", { path: `seed/e${k}-${j}.txt` }), `after ${k} ${j}\n`);
  }
  for (let i = 0; i < 12; i++) assert.equal(await call("read", { path: `burst/n${i}.txt` }), `burst new ${i}\n`);
  const top = lines(await call("ls", {})).filter((l) => l !== "skills/");
  assert.deepEqual(top, ["burst/", "out/", "seed/"], "the workspace holds only what the calls made");
  console.log("ok workspace");

  await client.close();
  console.log("ok closed");
}

main().then(
  () => process.exit(0),
  async (err) => {
    console.error(`parallel.mjs: ${err.stack ?? err}`);
    await client.close().catch(() => {});
    process.exit(1);
  },
);
