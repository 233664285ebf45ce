// What the TypeScript interop clients share: their environment, the expected values of fixtures.json,
// a step runner, comparisons that say what differed, and the admin calls a step may make (for example to
// change a resource and wait for the notification about it).
//
// Environment (set by interop/run):
//   INTEROP_MCP_URL       the agent's MCP endpoint, e.g. http://127.0.0.1:PORT/conformance/mcp
//   INTEROP_MCP_KEY       a key of that agent with scope `mcp`
//   INTEROP_ADMIN_URL     the admin API, e.g. http://127.0.0.1:PORT/admin/v1
//   INTEROP_REGISTRY_KEY  a key of that agent with scope `registry`
//   INTEROP_FIXTURES      path of fixtures.json (default: the one beside this directory)

import { readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { isDeepStrictEqual } from 'node:util';

export function env(name) {
  const value = process.env[name];
  if (!value) {
    console.error(`interop: ${name} is not set (interop/run sets it; see interop/README.md)`);
    process.exit(2);
  }
  return value;
}

export const config = {
  mcpUrl: env('INTEROP_MCP_URL'),
  mcpKey: env('INTEROP_MCP_KEY'),
  adminUrl: env('INTEROP_ADMIN_URL'),
  registryKey: env('INTEROP_REGISTRY_KEY')
};

const fixturesPath =
  process.env.INTEROP_FIXTURES || fileURLToPath(new URL('../fixtures.json', import.meta.url));
export const fixtures = JSON.parse(readFileSync(fixturesPath, 'utf8'));
export const expected = fixtures.expect;

/** A failed expectation; its message says what was expected and what came. */
export class Mismatch extends Error {}

export function check(condition, message) {
  if (!condition) throw new Mismatch(message);
}

export function equal(actual, wanted, what) {
  if (!isDeepStrictEqual(actual, wanted)) {
    throw new Mismatch(`${what}: expected ${JSON.stringify(wanted)}, got ${JSON.stringify(actual)}`);
  }
}

export function sameSet(actual, wanted, what) {
  equal([...(actual ?? [])].sort(), [...wanted].sort(), what);
}

/** Compares base64 payloads by their decoded bytes, naming the first differing offset. */
export function sameBytes(actualBase64, wantedBase64, what) {
  check(typeof actualBase64 === 'string', `${what}: expected a base64 string, got ${JSON.stringify(actualBase64)}`);
  const actual = Buffer.from(actualBase64, 'base64');
  const wanted = Buffer.from(wantedBase64, 'base64');
  if (actual.equals(wanted)) return;
  let at = 0;
  while (at < Math.min(actual.length, wanted.length) && actual[at] === wanted[at]) at++;
  throw new Mismatch(
    `${what}: ${actual.length} bytes differ from the expected ${wanted.length} bytes, first at offset ${at}`
  );
}

/** Awaits `promise`, expecting it to reject with a JSON-RPC error `code`; returns that error. */
export async function expectRpcError(promise, code, what) {
  let result;
  try {
    result = await promise;
  } catch (error) {
    check(
      error?.code === code,
      `${what}: expected JSON-RPC error ${code}, got ` +
        (typeof error?.code === 'number' ? `${error.code} (${error.message})` : String(error))
    );
    return error;
  }
  throw new Mismatch(`${what}: expected JSON-RPC error ${code}, got a result ${JSON.stringify(result).slice(0, 300)}`);
}

/** The admin API as the test agent's publisher (registry key). */
export const admin = {
  async request(method, path, body) {
    const res = await fetch(`${config.adminUrl}${path}`, {
      method,
      headers: {
        'X-Agent-API-Key': config.registryKey,
        Accept: 'application/json',
        ...(body === undefined ? {} : { 'Content-Type': 'application/json' })
      },
      body: body === undefined ? undefined : JSON.stringify(body)
    });
    const text = await res.text();
    if (!res.ok) throw new Mismatch(`admin ${method} ${path}: HTTP ${res.status}: ${text.slice(0, 300)}`);
    return text ? JSON.parse(text) : undefined;
  },
  /** Creates or replaces a resource of the test agent. */
  putResource(resource) {
    return admin.request('PUT', `/agents/${encodeURIComponent(fixtures.agent.id)}/resources`, resource);
  }
};

/** Changes the watched resource (`expected.watchedResource`) as its publisher, so subscribers are told. */
export function changeWatched(who) {
  return admin.putResource({
    uri: expected.watchedResource,
    name: 'watched-resource',
    mimeType: 'text/plain',
    text: `Watched resource content, changed by ${who} at ${new Date().toISOString()}`
  });
}

/**
 * Keeps the `notifications/resources/updated` a client receives; `next(uri, ms)` waits for one about `uri`
 * and returns it (the whole notification, `_meta` included).
 */
export function updateCollector() {
  const received = [];
  return {
    record(notification) {
      received.push(notification);
    },
    next(uri, ms) {
      return within(ms, `notifications/resources/updated for ${uri}`, () => {
        const at = received.findIndex((n) => n.params?.uri === uri);
        return at < 0 ? undefined : received.splice(at, 1)[0];
      });
    }
  };
}

/** Resolves with the first value `poll` yields that is not undefined, or rejects after `ms`. */
export async function within(ms, what, poll, intervalMs = 20) {
  const deadline = Date.now() + ms;
  for (;;) {
    const value = await poll();
    if (value !== undefined) return value;
    if (Date.now() > deadline) throw new Mismatch(`${what}: nothing within ${ms} ms`);
    await new Promise((resolve) => setTimeout(resolve, intervalMs));
  }
}

/**
 * Runs `steps` ([name, async fn] pairs) in order and reports each. A failing step is reported and the
 * next one runs, except that nothing runs after a failed first step (the connection). Exits 0 only when
 * every step passed.
 */
export async function runSteps(clientName, steps, { cleanup } = {}) {
  let passed = 0;
  let failed = 0;
  for (const [index, [name, fn]] of steps.entries()) {
    try {
      await fn();
      passed++;
      console.log(`  ok    ${name}`);
    } catch (error) {
      failed++;
      const cause = error?.cause ? `\n        caused by: ${error.cause.message ?? error.cause}` : '';
      const detail = error instanceof Mismatch ? error.message : `${error?.stack ?? String(error)}${cause}`;
      console.log(`  FAIL  ${name}: ${detail}`);
      if (index === 0) {
        console.log(`  (the remaining ${steps.length - 1} steps need a connection and were not run)`);
        failed += steps.length - 1;
        break;
      }
    }
  }
  try {
    await cleanup?.();
  } catch (error) {
    console.log(`  (closing the client failed: ${error?.message ?? error})`);
  }
  console.log(`${clientName}: ${passed} passed, ${failed} failed`);
  process.exit(failed === 0 ? 0 : 1);
}
