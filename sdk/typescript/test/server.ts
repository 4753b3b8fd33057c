/** A real local HTTP server that answers the SDK as scripted and records what it was sent. */

import { createServer } from "node:http";
import type { AddressInfo } from "node:net";

/** A request as the server received it. */
export interface Seen {
  method: string;
  url: string;
  headers: Record<string, string | string[] | undefined>;
  body: string;
  /** When it arrived (performance.now()). */
  at: number;
}

/** An answer: JSON with a status and headers; `drop` closes the connection, `hang` never answers. */
export type Reply =
  { status: number; headers?: Record<string, string>; json?: unknown; text?: string } | "drop" | "hang";

export interface Server {
  url: string;
  seen: Seen[];
  close(): Promise<void>;
}

/**
 * Start a server on 127.0.0.1 that answers the nth request with `replies[n]` (the last one again after
 * them), or with what `replies(seen, n)` returns.
 */
export async function serve(replies: Reply[] | ((seen: Seen, n: number) => Reply)): Promise<Server> {
  const seen: Seen[] = [];
  const server = createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on("data", (chunk: Buffer) => chunks.push(chunk));
    req.on("end", () => {
      const request = {
        method: req.method ?? "",
        url: req.url ?? "",
        headers: req.headers,
        body: Buffer.concat(chunks).toString(),
        at: performance.now(),
      };
      seen.push(request);
      const n = seen.length - 1;
      const reply = typeof replies === "function" ? replies(request, n) : replies[Math.min(n, replies.length - 1)];
      if (reply === undefined || reply === "hang") return;
      if (reply === "drop") {
        req.socket.destroy();
        return;
      }
      const body = reply.text ?? (reply.json === undefined ? "" : JSON.stringify(reply.json));
      const type = reply.text === undefined ? { "Content-Type": "application/json" } : { "Content-Type": "text/plain" };
      res.writeHead(reply.status, { ...(body ? type : {}), ...reply.headers });
      res.end(body);
    });
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  const { port } = server.address() as AddressInfo;
  return {
    url: `http://127.0.0.1:${port}`,
    seen,
    close: () => {
      server.closeAllConnections();
      return new Promise((resolve) => server.close(() => resolve()));
    },
  };
}

/** The api's one error body. */
export function error(
  status: number,
  code: string,
  message: string,
  extra: Record<string, unknown> = {},
  headers: Record<string, string> = {},
): Reply {
  return { status, headers, json: { error: { code, message, ...extra } } };
}

/** The JSON body a request carried. */
export function bodyOf(seen: Seen | undefined): Record<string, unknown> {
  return JSON.parse(seen?.body ?? "null") as Record<string, unknown>;
}
