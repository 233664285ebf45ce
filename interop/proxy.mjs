// A header-injecting reverse proxy for the conformance suite, which cannot send headers of its own.
//
// Listens on loopback and forwards every request, unchanged, to hivegate, adding
// `X-Agent-API-Key: <key>`. The `Host` and `Origin` headers pass through as the client sent them (the
// suite's DNS-rebinding checks depend on that). Responses are streamed back chunk by chunk, never
// buffered, so SSE streams (legacy GET streams, `subscriptions/listen`) flow through as they are written.
//
// Usage: node proxy.mjs --upstream http://127.0.0.1:PORT --key bak_... [--listen 127.0.0.1:0] [--port-file F]
// Prints `proxy listening on http://HOST:PORT` once it accepts connections (and writes PORT to --port-file).

import http from 'node:http';
import { writeFileSync } from 'node:fs';
import { parseArgs } from 'node:util';

const { values: args } = parseArgs({
  options: {
    upstream: { type: 'string' },
    key: { type: 'string' },
    listen: { type: 'string', default: '127.0.0.1:0' },
    'port-file': { type: 'string' }
  }
});

function fail(message) {
  console.error(`proxy: ${message}`);
  process.exit(2);
}

if (!args.upstream) fail('--upstream is required');
const key = args.key ?? process.env.INTEROP_MCP_KEY;
if (!key) fail('--key (or INTEROP_MCP_KEY) is required');
const upstream = new URL(args.upstream);
if (upstream.protocol !== 'http:') fail(`only http:// upstreams are supported, got ${upstream.href}`);
const [listenHost, listenPortText] = args.listen.split(/:(?=\d+$)/);
const listenPort = Number(listenPortText);
if (!listenHost || !Number.isInteger(listenPort)) fail(`--listen must be HOST:PORT, got ${args.listen}`);

// Connection-scoped headers (RFC 9110 §7.6.1) are not forwarded; Node sets its own on each hop.
const HOP_BY_HOP = new Set([
  'connection',
  'keep-alive',
  'proxy-connection',
  'transfer-encoding',
  'te',
  'trailer',
  'upgrade'
]);

function forwardableHeaders(rawHeaders) {
  const out = [];
  for (let i = 0; i < rawHeaders.length; i += 2) {
    const name = rawHeaders[i];
    const lower = name.toLowerCase();
    if (HOP_BY_HOP.has(lower) || lower === 'x-agent-api-key') continue;
    out.push(name, rawHeaders[i + 1]);
  }
  return out;
}

const agent = new http.Agent({ keepAlive: true });

const server = http.createServer((req, res) => {
  const headers = forwardableHeaders(req.rawHeaders);
  headers.push('X-Agent-API-Key', key);

  const upstreamReq = http.request({
    host: upstream.hostname,
    port: upstream.port || 80,
    method: req.method,
    path: req.url,
    headers,
    agent,
    // Keep the client's Host header (the array form above carries it) instead of the upstream's.
    setHost: false
  });

  upstreamReq.on('response', (upstreamRes) => {
    res.writeHead(
      upstreamRes.statusCode ?? 502,
      upstreamRes.statusMessage,
      forwardableHeaders(upstreamRes.rawHeaders)
    );
    // Send the status line and headers at once: an SSE client waits for them before the first event.
    res.flushHeaders();
    // Each chunk is written as it arrives (pipe only waits when the client reads slower than hivegate writes).
    upstreamRes.pipe(res);
    upstreamRes.on('error', () => res.destroy());
  });

  upstreamReq.on('error', (error) => {
    if (res.headersSent) {
      res.destroy();
      return;
    }
    const body = JSON.stringify({
      jsonrpc: '2.0',
      id: null,
      error: { code: -32603, message: `interop proxy: upstream unreachable: ${error.message}` }
    });
    res.writeHead(502, { 'Content-Type': 'application/json', 'Content-Length': Buffer.byteLength(body) });
    res.end(body);
  });

  // The client went away (e.g. it closed an SSE stream): drop the upstream exchange too.
  res.on('close', () => {
    if (!res.writableFinished) upstreamReq.destroy();
  });

  req.pipe(upstreamReq);
});

server.on('connection', (socket) => socket.setNoDelay(true));
server.requestTimeout = 0;
server.headersTimeout = 60_000;

server.listen(listenPort, listenHost, () => {
  const { address, port } = server.address();
  if (args['port-file']) writeFileSync(args['port-file'], `${port}\n`);
  console.log(`proxy listening on http://${address}:${port} -> ${upstream.origin}`);
});

for (const signal of ['SIGTERM', 'SIGINT']) {
  process.on(signal, () => {
    server.close();
    server.closeAllConnections?.();
    agent.destroy();
    process.exit(0);
  });
}
