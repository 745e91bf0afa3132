// The editor flow of tests/acp/test_acp_ts_client.py, driven by the official ACP TypeScript SDK:
// spawn `ponder acp` (argv[2] is a JSON config: command, env, cwd, work, buffers, prompt), declare
// fs, open a session, pick mock/tools and the "auto" mode, send one prompt, and answer fs requests
// from in-memory buffers (an editor's unsaved text). Prints one JSON object: the answers, every
// message received and sent in wire order, the buffers afterwards and the fs requests made.
import { spawn } from "node:child_process";
import { Readable, Writable } from "node:stream";
import { client, methods, ndJsonStream, PROTOCOL_VERSION, RequestError } from "@agentclientprotocol/sdk";

const cfg = JSON.parse(process.argv[2]);
const child = spawn(cfg.command[0], cfg.command.slice(1), { env: cfg.env, cwd: cfg.cwd, stdio: ["pipe", "pipe", "inherit"] });
const base = ndJsonStream(Writable.toWeb(child.stdin), Readable.toWeb(child.stdout));
const received = [];
const sent = [];
const writer = base.writable.getWriter();
const stream = {
  readable: base.readable.pipeThrough(new TransformStream({ transform(message, ctl) { received.push(message); ctl.enqueue(message); } })),
  writable: new WritableStream({
    async write(message) { sent.push(message); await writer.write(message); },
    async close() { await writer.close(); },
  }),
};
const buffers = cfg.buffers;
const fsLog = [];
const updates = [];
const permissions = [];
const app = client({ name: "ponder-tests-ts" })
  .onRequest(methods.client.fs.readTextFile, ({ params }) => {
    fsLog.push(["read", params.path]);
    if (params.path in buffers) return { content: buffers[params.path] };
    throw RequestError.resourceNotFound(params.path);
  })
  .onRequest(methods.client.fs.writeTextFile, ({ params }) => {
    fsLog.push(["write", params.path]);
    buffers[params.path] = params.content;
    return {};
  })
  .onRequest(methods.client.session.requestPermission, ({ params }) => {
    permissions.push(params);
    return { outcome: { outcome: "selected", optionId: "allow_once" } };
  })
  .onNotification(methods.client.session.update, ({ params }) => { updates.push(params); });

const result = await app.connectWith(stream, async (agent) => {
  const init = await agent.request(methods.agent.initialize, {
    protocolVersion: PROTOCOL_VERSION,
    clientCapabilities: { fs: { readTextFile: true, writeTextFile: true } },
    clientInfo: { name: "ponder-tests-ts", version: "0" },
  });
  const session = await agent.request(methods.agent.session.new, { cwd: cfg.work, mcpServers: [] });
  await agent.request(methods.agent.session.setConfigOption, { sessionId: session.sessionId, configId: "model", value: "mock/tools" });
  await agent.request(methods.agent.session.setMode, { sessionId: session.sessionId, modeId: "auto" });
  const answer = await agent.request(methods.agent.session.prompt, { sessionId: session.sessionId, prompt: [{ type: "text", text: cfg.prompt }] });
  return { init, session, answer };
});
child.stdin.end();
const code = await new Promise((resolve) => child.on("exit", resolve));
process.stdout.write(JSON.stringify({ ...result, code, received, sent, buffers, fs: fsLog, updates, permissions }));
