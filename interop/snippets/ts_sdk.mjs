// The official MCP TypeScript SDK on a hivegate agent: MCP_URL is https://HOST/AGENT/mcp, KEY a key of scope mcp.
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';

const transport = new StreamableHTTPClientTransport(new URL(process.env.MCP_URL), {
  requestInit: { headers: { 'X-Agent-API-Key': process.env.KEY } }
});
const client = new Client({ name: 'my-app', version: '1.0.0' });
await client.connect(transport);
const { resources } = await client.listResources();
console.log(resources.map((resource) => resource.uri));
console.log((await client.readResource({ uri: resources[0].uri })).contents[0]);
await client.close();
