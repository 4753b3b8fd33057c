// The build's look at a pack's JavaScript: parse every module the entry reaches and list the entry's
// exports, evaluating nothing. Reads {"entry", "files": {path: text}} on stdin, prints one JSON line:
// {"exports": [...]} or {"error": "<sentence>"}. Imports must be relative paths to files of the pack.
import vm from "node:vm";

const chunks = [];
for await (const c of process.stdin) chunks.push(c);
const req = JSON.parse(Buffer.concat(chunks).toString("utf8"));
const modules = new Map();

function load(path) {
  if (!modules.has(path)) {
    try {
      modules.set(path, new vm.SourceTextModule(req.files[path], { identifier: path }));
    } catch (e) {
      const where = String(e.stack || "").split("\n")[0];
      throw new Error(`${where.startsWith(path) ? where : path} does not parse as an ES module: ${e.message}`);
    }
  }
  return modules.get(path);
}

function resolve(spec, from) {
  if (!spec.startsWith("./") && !spec.startsWith("../")) {
    throw new Error(`${from} imports "${spec}": a pack's code imports only its own files, by a relative path`);
  }
  const parts = from.split("/").slice(0, -1);
  for (const seg of spec.split("/")) {
    if (seg === "..") parts.pop();
    else if (seg !== ".") parts.push(seg);
  }
  const path = parts.join("/");
  if (!Object.hasOwn(req.files, path)) {
    throw new Error(`${from} imports "${spec}", which is not a file under js/ of the pack`);
  }
  return path;
}

try {
  const entry = load(req.entry);
  await entry.link(async (spec, ref) => load(resolve(spec, ref.identifier)));
  const names = Reflect.ownKeys(entry.namespace).filter((k) => typeof k === "string");
  process.stdout.write(JSON.stringify({ exports: names }) + "\n");
} catch (e) {
  process.stdout.write(JSON.stringify({ error: String(e && e.message ? e.message : e) }) + "\n");
}
