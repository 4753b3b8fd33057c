// The b3os JS runtime's harness: runs one call of a js action inside a VM, speaking json-stdio.
//
// stdin: {"action", "input", "limits": {"timeoutMs"}, "call": {"id"},
//         "js": {"entry", "export", "errors": [{"code", "message"?, "retryable"?}], "connections": {...}}}
// stdout, last line: {"output": {...}} or {"error": {"code", "message", "retryable"}}.
//
// `fetch` is the only way out: each request goes as one JSON line over /in/egress.sock to the node, which
// relays it to the egress proxy under this call's grant (the allow-list, the address guard and the
// credentials are the proxy's). Node.js runs with its permission model (files: read /tool only; no child
// processes, workers or addons) inside the VM (no network, its own uid, cgroup limits, seccomp).
import net from "node:net";

const SOCKET = "/in/egress.sock";
const MAX_LOG_LINES = 200;
const write = process.stdout.write.bind(process.stdout);
const ownWrite = process.stderr.write.bind(process.stderr);

// The answer is the last line; the call exits once it (and whatever the code printed before) is written.
function answer(value) {
  return new Promise((resolve) => write("\n" + JSON.stringify(value) + "\n", resolve));
}

function relay(request) {
  return new Promise((resolve, reject) => {
    const socket = net.connect(SOCKET);
    const chunks = [];
    socket.on("connect", () => socket.end(JSON.stringify(request) + "\n"));
    socket.on("data", (c) => chunks.push(c));
    socket.on("error", (e) => reject(new TypeError(`fetch failed: the egress relay is not reachable (${e.code})`)));
    socket.on("end", () => {
      try {
        resolve(JSON.parse(Buffer.concat(chunks).toString("utf8")));
      } catch {
        reject(new TypeError("fetch failed: the egress relay answered nothing readable"));
      }
    });
  });
}

async function b3osFetch(resource, init = undefined) {
  const request = new Request(resource, init);
  const body = request.body === null ? null : Buffer.from(await request.arrayBuffer()).toString("base64");
  const reply = await relay({
    method: request.method,
    url: request.url,
    headers: [...request.headers],
    body,
  });
  if (reply.error) {
    const error = new TypeError(`fetch failed: ${reply.error.message}`);
    error.reason = reply.error.reason;
    throw error;
  }
  const raw = Buffer.from(reply.body || "", "base64");
  const nullBody = [101, 103, 204, 205, 304].includes(reply.status) || request.method === "HEAD";
  const response = new Response(nullBody ? null : raw, { status: reply.status, headers: reply.headers });
  Object.defineProperty(response, "url", { value: reply.url });
  Object.defineProperty(response, "redirected", { value: reply.redirects > 0 });
  return response;
}

function thrownAnswer(error, declared) {
  const code = error && typeof error === "object" ? error.code : undefined;
  const spec = declared.find((e) => e.code === code);
  const text = error && typeof error === "object" && "message" in error ? String(error.message) : String(error);
  if (spec) {
    return { error: { code, message: text || spec.message || code, retryable: Boolean(spec.retryable) } };
  }
  const name = error && typeof error === "object" && error.name ? `${error.name}: ` : "";
  return { error: { code: "js.thrown", message: `${name}${text}`.slice(0, 1000), retryable: false } };
}

async function main() {
  const chunks = [];
  for await (const c of process.stdin) chunks.push(c);
  const req = JSON.parse(Buffer.concat(chunks).toString("utf8"));
  const spec = req.js;
  const deadline = Date.now() + req.limits.timeoutMs;
  let logged = 0;
  const context = Object.freeze({
    connections: spec.connections || {},
    deadline,
    callId: req.call.id,
    log: (...parts) => {
      if (logged++ < MAX_LOG_LINES) ownWrite(parts.map(String).join(" ").slice(0, 2000) + "\n");
    },
  });
  Object.defineProperty(globalThis, "fetch", { value: b3osFetch, writable: false, configurable: false });
  let mod;
  try {
    mod = await import("/tool/" + spec.entry);
  } catch (e) {
    return answer(thrownAnswer(e, []));
  }
  const fn = mod[spec.export];
  if (typeof fn !== "function") {
    return answer({ error: { code: "js.export", message: `${spec.entry} exports no function ${spec.export}`, retryable: false } });
  }
  let output;
  try {
    output = await fn(req.input, context);
  } catch (e) {
    return answer(thrownAnswer(e, spec.errors || []));
  }
  if (output === null || typeof output !== "object" || Array.isArray(output)) {
    return answer({ error: { code: "js.output", message: `${spec.export} returned ${output === null ? "null" : Array.isArray(output) ? "an array" : typeof output}, not an object`, retryable: false } });
  }
  let text;
  try {
    text = JSON.stringify({ output });
  } catch (e) {
    return answer({ error: { code: "js.output", message: `the output is not JSON: ${e.message}`, retryable: false } });
  }
  return new Promise((resolve) => write("\n" + text + "\n", resolve));
}

// The call ends with its answer: timers or sockets the code left open do not keep it running.
main().then(
  () => process.exit(0),
  (e) => answer(thrownAnswer(e, [])).then(() => process.exit(0)),
);
