// Seeds the test agent of fixtures.json through hivegate's admin API: the agent, an `mcp` key and a
// `registry` key (operator token), then its resources, resource templates and prompts (registry key,
// as a publishing agent would).
//
// Usage: node seed.mjs --base http://127.0.0.1:PORT --fixtures fixtures.json --out keys.json
// The operator token comes from HIVEGATE_ADMIN_TOKEN. keys.json receives {"agent", "mcpKey", "mcpKeyId",
// "registryKey"}.

import { readFileSync, writeFileSync } from 'node:fs';
import { parseArgs } from 'node:util';

const { values: args } = parseArgs({
  options: {
    base: { type: 'string' },
    fixtures: { type: 'string' },
    out: { type: 'string' }
  }
});

function die(message) {
  console.error(`seed: ${message}`);
  process.exit(1);
}

if (!args.base || !args.fixtures || !args.out) die('--base, --fixtures and --out are required');
const operatorToken = process.env.HIVEGATE_ADMIN_TOKEN;
if (!operatorToken) die('HIVEGATE_ADMIN_TOKEN is not set');

const fixtures = JSON.parse(readFileSync(args.fixtures, 'utf8'));
const admin = `${args.base.replace(/\/$/, '')}/admin/v1`;
const agentId = fixtures.agent.id;

/** One admin call; any status other than the expected ones stops the seeding with the answer's body. */
async function call(method, path, { body, auth, expect }) {
  const headers = { Accept: 'application/json', ...auth };
  if (body !== undefined) headers['Content-Type'] = 'application/json';
  let res;
  try {
    res = await fetch(`${admin}${path}`, {
      method,
      headers,
      body: body === undefined ? undefined : JSON.stringify(body)
    });
  } catch (error) {
    die(`${method} /admin/v1${path}: request failed: ${error.cause?.message ?? error.message}`);
  }
  const text = await res.text();
  if (!expect.includes(res.status)) {
    die(
      `${method} /admin/v1${path}: expected HTTP ${expect.join(' or ')}, got ${res.status}` +
        (text ? `: ${text.slice(0, 800)}` : ' (empty body)')
    );
  }
  if (!text) return undefined;
  try {
    return JSON.parse(text);
  } catch {
    die(`${method} /admin/v1${path}: answer is not JSON: ${text.slice(0, 200)}`);
  }
}

const asOperator = { Authorization: `Bearer ${operatorToken}` };

await call('POST', '/agents', { body: fixtures.agent, auth: asOperator, expect: [201] });

async function createKey(name, scopes) {
  const key = await call('POST', `/agents/${agentId}/keys`, {
    body: { name, scopes },
    auth: asOperator,
    expect: [201]
  });
  if (typeof key?.key !== 'string' || !key.key.startsWith('bak_')) {
    die(`POST /admin/v1/agents/${agentId}/keys: the answer carries no "key" starting with bak_`);
  }
  return key;
}

const { key: mcpKey, id: mcpKeyId } = await createKey('interop-clients', ['mcp']);
const { key: registryKey } = await createKey('interop-publisher', ['registry']);
const asPublisher = { 'X-Agent-API-Key': registryKey };

for (const resource of fixtures.resources) {
  await call('PUT', `/agents/${agentId}/resources`, { body: resource, auth: asPublisher, expect: [201] });
}
for (const template of fixtures.resourceTemplates) {
  await call('PUT', `/agents/${agentId}/resource-templates`, { body: template, auth: asPublisher, expect: [201] });
}
for (const [name, prompt] of Object.entries(fixtures.prompts)) {
  await call('PUT', `/agents/${agentId}/prompts/${encodeURIComponent(name)}`, {
    body: prompt,
    auth: asPublisher,
    expect: [201]
  });
}

writeFileSync(args.out, JSON.stringify({ agent: agentId, mcpKey, mcpKeyId, registryKey }) + '\n', { mode: 0o600 });
console.log(
  `seeded agent ${agentId}: ${fixtures.resources.length} resources, ` +
    `${fixtures.resourceTemplates.length} resource templates, ${Object.keys(fixtures.prompts).length} prompts`
);
