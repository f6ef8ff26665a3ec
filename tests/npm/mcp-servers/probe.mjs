// A stdio MCP server that probes its own confinement (tests/mcp_sandbox.rs):
// `read` reads a file, `write` writes one, `connect` makes an HTTP GET to a
// URL, straight to its host and, when HTTP_PROXY is set, through that proxy.
// Every tool answers with text "ok: ..." or "error: <code or message>", never
// an MCP error, so a test can tell what the sandbox allowed.
// Hand-written JSON-RPC: no dependency to install or to make readable.
//
// usage: node probe.mjs
import { createInterface } from "node:readline";
import { readFileSync, writeFileSync } from "node:fs";
import http from "node:http";

const TOOLS = [
  { name: "read", description: "Reads a file", inputSchema: { type: "object", properties: { path: { type: "string" } }, required: ["path"] } },
  { name: "write", description: "Writes a file (`bytes` of it, when given)", inputSchema: { type: "object", properties: { path: { type: "string" }, bytes: { type: "integer" } }, required: ["path"] } },
  { name: "connect", description: "GETs a URL directly, and through HTTP_PROXY when set", inputSchema: { type: "object", properties: { url: { type: "string" } }, required: ["url"] } },
  { name: "env", description: "Its environment", inputSchema: { type: "object", properties: {} } },
];

const send = (msg) => process.stdout.write(`${JSON.stringify({ jsonrpc: "2.0", ...msg })}\n`);
const text = (id, t) => send({ id, result: { content: [{ type: "text", text: t }] } });
const why = (e) => `error: ${e.code ?? e.message}`;

function get(options) {
  return new Promise((resolve) => {
    const req = http.request({ ...options, method: "GET", timeout: 5000 }, (res) => {
      let body = "";
      res.on("data", (c) => { body += c; });
      res.on("end", () => resolve(`${res.statusCode} ${body}`));
    });
    req.on("timeout", () => { req.destroy(new Error("timeout")); });
    req.on("error", (e) => resolve(why(e)));
    req.end();
  });
}

async function connect(url) {
  const u = new URL(url);
  const direct = await get({ host: u.hostname, port: u.port || 80, path: u.pathname });
  const proxy = process.env.HTTP_PROXY;
  let proxied = "no proxy";
  if (proxy) {
    const p = new URL(proxy);
    proxied = await get({ host: p.hostname, port: p.port, path: url, headers: { Host: u.host } });
  }
  return `direct: ${direct}\nproxy: ${proxied}`;
}

for await (const line of createInterface({ input: process.stdin })) {
  let req;
  try { req = JSON.parse(line); } catch { continue; }
  if (req.id === undefined) continue; // a notification
  const args = req.params?.arguments ?? {};
  switch (req.method) {
    case "initialize":
      send({ id: req.id, result: {
        protocolVersion: req.params?.protocolVersion ?? "2025-06-18",
        capabilities: { tools: {} },
        serverInfo: { name: "probe", version: "1.0.0" },
      } });
      break;
    case "tools/list":
      send({ id: req.id, result: { tools: TOOLS } });
      break;
    case "tools/call":
      switch (req.params?.name) {
        case "read":
          try { text(req.id, `ok: ${readFileSync(args.path, "utf8")}`); } catch (e) { text(req.id, why(e)); }
          break;
        case "write":
          try { writeFileSync(args.path, args.bytes ? Buffer.alloc(args.bytes, 120) : "written by probe"); text(req.id, "ok: written"); } catch (e) { text(req.id, why(e)); }
          break;
        case "connect":
          text(req.id, await connect(args.url));
          break;
        case "env":
          text(req.id, Object.keys(process.env).sort().join(" "));
          break;
        default:
          send({ id: req.id, error: { code: -32602, message: `no tool ${req.params?.name}` } });
      }
      break;
    case "ping":
      send({ id: req.id, result: {} });
      break;
    default:
      send({ id: req.id, error: { code: -32601, message: `no method ${req.method}` } });
  }
}
