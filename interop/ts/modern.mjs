// The official TypeScript SDK v2 client (`@modelcontextprotocol/client`) with
// `versionNegotiation: {mode: 'auto'}`: it probes `server/discover` and must settle on the 2026-07-28
// (modern, stateless) era, then runs the interop steps. See common.mjs for the environment.

import { Client, StreamableHTTPClientTransport } from '@modelcontextprotocol/client';
import { changeWatched, check, config, equal, expected, fixtures, runSteps, updateCollector } from './common.mjs';
import { coreSteps } from './steps.mjs';

const MODERN_VERSION = '2026-07-28';

const client = new Client(
  { name: 'hivegate-interop-ts-modern', version: '1.0.0' },
  { capabilities: {}, versionNegotiation: { mode: 'auto' } }
);
const transport = new StreamableHTTPClientTransport(new URL(config.mcpUrl), {
  requestInit: { headers: { 'X-Agent-API-Key': config.mcpKey } }
});
// Notifications of a listen stream are dispatched to the client's notification handlers.
const updates = updateCollector();
client.setNotificationHandler('notifications/resources/updated', (notification) => updates.record(notification));

const steps = [
  [
    'server/discover (auto negotiation)',
    async () => {
      await client.connect(transport);
      equal(client.getProtocolEra(), 'modern', 'negotiated era (auto mode fell back to the legacy handshake)');
      equal(client.getNegotiatedProtocolVersion(), MODERN_VERSION, 'negotiated protocol version');
      const discover = client.getDiscoverResult();
      check(
        discover?.supportedVersions?.[0] === MODERN_VERSION,
        `server/discover supportedVersions should start with ${MODERN_VERSION}: ${JSON.stringify(discover?.supportedVersions)}`
      );
    }
  ],
  [
    'server identity and capabilities',
    async () => {
      const info = client.getServerVersion();
      equal(info?.name, expected.serverName, 'serverInfo.name (from _meta)');
      equal(info?.title, fixtures.agent.name, 'serverInfo.title (the agent name)');
      const caps = client.getServerCapabilities() ?? {};
      for (const capability of ['resources', 'prompts', 'completions']) {
        check(caps[capability] !== undefined, `capability "${capability}" is not advertised: ${JSON.stringify(caps)}`);
      }
      check(caps.logging === undefined, 'capability "logging" is advertised to a modern client');
      equal(caps.resources, { subscribe: true, listChanged: true }, 'capabilities.resources');
      equal(caps.prompts, { listChanged: true }, 'capabilities.prompts');
    }
  ],
  ...coreSteps(client, 'modern'),
  [
    'subscriptions/listen → notifications/resources/updated',
    async () => {
      const uri = expected.watchedResource;
      const subscription = await client.listen({ resourceSubscriptions: [uri], toolsListChanged: true });
      equal(subscription.honoredFilter, { resourceSubscriptions: [uri] }, 'the acknowledged (honoured) filter');
      await changeWatched('ts-modern');
      const notification = await updates.next(uri, 10000);
      equal(notification.params.uri, uri, 'the updated URI');
      const tag = notification.params._meta?.['io.modelcontextprotocol/subscriptionId'];
      check(tag !== undefined, `the notification is not tagged with its subscription: ${JSON.stringify(notification)}`);
      await subscription.close();
      equal(await subscription.closed, 'local', 'how the subscription ended');
    }
  ]
];

await runSteps('ts-modern', steps, { cleanup: () => client.close() });
