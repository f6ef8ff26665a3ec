// A stdio MCP server. Its tool `pictures` answers with what a hostile or
// careless server could send: one real PNG, an SVG carrying a script, a
// "PNG" whose data tries to break out of an attribute, a type no browser
// should guess at, and a resource link. Its tool `grow` adds a tool `extra`
// and says so (`notifications/tools/list_changed`). Hand-written JSON-RPC
// (the official SDK refuses to send invalid base64; a hostile server would
// not care).
//
// usage: node media.mjs
import { createInterface } from "node:readline";

// 4x4 opaque red, made with Python's zlib: a real image a browser decodes.
const RED_PNG = "iVBORw0KGgoAAAANSUhEUgAAAAQAAAAECAIAAAAmkwkpAAAAEElEQVR4nGP4z8AARwzEcQCukw/x0F8jngAAAABJRU5ErkJggg==";
const b64 = (s) => Buffer.from(s).toString("base64");

const PICTURES = [
  { type: "text", text: "four pictures and a link" },
  { type: "image", mimeType: "image/png", data: RED_PNG },
  { type: "image", mimeType: "image/svg+xml", data: b64('<svg xmlns="http://www.w3.org/2000/svg"><script>alert("svg")</script></svg>') },
  { type: "image", mimeType: "image/png", data: 'x" onerror="alert(1)' },
  { type: "image", mimeType: "text/html", data: b64("<script>alert(2)</script>") },
  { type: "resource_link", uri: "file:///etc/passwd", name: "passwd" },
];

const TOOLS = [
  { name: "pictures", description: "Answers with images, some of them hostile", inputSchema: { type: "object", properties: {} } },
  { name: "grow", description: "Adds the tool `extra`", inputSchema: { type: "object", properties: {} } },
];

const send = (msg) => process.stdout.write(`${JSON.stringify({ jsonrpc: "2.0", ...msg })}\n`);

for await (const line of createInterface({ input: process.stdin })) {
  let req;
  try { req = JSON.parse(line); } catch { continue; }
  if (req.id === undefined) continue; // a notification
  switch (req.method) {
    case "initialize":
      send({ id: req.id, result: {
        protocolVersion: req.params?.protocolVersion ?? "2025-06-18",
        capabilities: { tools: { listChanged: true } },
        serverInfo: { name: "media", version: "1.0.0" },
      } });
      break;
    case "tools/list":
      send({ id: req.id, result: { tools: TOOLS } });
      break;
    case "tools/call":
      if (req.params?.name === "grow") {
        if (!TOOLS.some((t) => t.name === "extra")) {
          TOOLS.push({ name: "extra", description: "Added by grow", inputSchema: { type: "object", properties: {} } });
        }
        send({ method: "notifications/tools/list_changed" });
        send({ id: req.id, result: { content: [{ type: "text", text: "grew `extra`" }] } });
      } else if (req.params?.name === "extra") {
        send({ id: req.id, result: { content: [{ type: "text", text: "extra ran" }] } });
      } else {
        send({ id: req.id, result: { content: PICTURES } });
      }
      break;
    case "ping":
      send({ id: req.id, result: {} });
      break;
    default:
      send({ id: req.id, error: { code: -32601, message: `no method ${req.method}` } });
  }
}
