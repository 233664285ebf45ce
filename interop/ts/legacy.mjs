// The official TypeScript SDK v1 client (`@modelcontextprotocol/sdk`) on the legacy wire: the initialize
// handshake over Streamable HTTP, then the interop steps. See common.mjs for the environment.

import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import { LATEST_PROTOCOL_VERSION, ResourceUpdatedNotificationSchema } from '@modelcontextprotocol/sdk/types.js';
import { changeWatched, check, config, equal, expected, fixtures, runSteps, updateCollector } from './common.mjs';
import { coreSteps } from './steps.mjs';

const client = new Client({ name: 'hivegate-interop-ts-legacy', version: '1.0.0' }, { capabilities: {} });
const transport = new StreamableHTTPClientTransport(new URL(config.mcpUrl), {
  requestInit: { headers: { 'X-Agent-API-Key': config.mcpKey } }
});
// Notifications arrive on the session's GET stream, which the SDK opens after initialize.
const updates = updateCollector();
client.setNotificationHandler(ResourceUpdatedNotificationSchema, (notification) => updates.record(notification));

const steps = [
  [
    'initialize',
    async () => {
      await client.connect(transport);
      equal(transport.protocolVersion, LATEST_PROTOCOL_VERSION, 'negotiated protocol version');
    }
  ],
  [
    'server identity and capabilities',
    async () => {
      const info = client.getServerVersion();
      equal(info?.name, expected.serverName, 'serverInfo.name');
      equal(info?.title, fixtures.agent.name, 'serverInfo.title (the agent name)');
      equal(client.getInstructions(), fixtures.agent.description, 'instructions (the agent description)');
      const caps = client.getServerCapabilities() ?? {};
      for (const capability of ['resources', 'prompts', 'completions', 'logging']) {
        check(caps[capability] !== undefined, `capability "${capability}" is not advertised: ${JSON.stringify(caps)}`);
      }
      equal(caps.resources, { subscribe: true, listChanged: true }, 'capabilities.resources');
      equal(caps.prompts, { listChanged: true }, 'capabilities.prompts');
      check(typeof transport.sessionId === 'string' && transport.sessionId.length > 0, 'no Mcp-Session-Id was issued');
    }
  ],
  ['ping', async () => equal(await client.ping(), {}, 'ping result')],
  ['logging/setLevel', async () => equal(await client.setLoggingLevel('info'), {}, 'logging/setLevel result')],
  ...coreSteps(client, 'legacy'),
  [
    'resources/subscribe → notifications/resources/updated (GET stream)',
    async () => {
      const uri = expected.watchedResource;
      equal(await client.subscribeResource({ uri }), {}, 'resources/subscribe result');
      await changeWatched('ts-legacy');
      const notification = await updates.next(uri, 10000);
      equal(notification.params.uri, uri, 'the updated URI');
      equal(await client.unsubscribeResource({ uri }), {}, 'resources/unsubscribe result');
    }
  ]
];

await runSteps('ts-legacy', steps, { cleanup: () => client.close() });
