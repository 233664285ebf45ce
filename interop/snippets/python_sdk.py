# The official MCP Python SDK on a hivegate agent: MCP_URL is https://HOST/AGENT/mcp, KEY a key of scope mcp.
import asyncio, os
import httpx2
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

async def main() -> None:
    http = httpx2.AsyncClient(headers={"X-Agent-API-Key": os.environ["KEY"]})
    async with http, Client(streamable_http_client(os.environ["MCP_URL"], http_client=http)) as client:
        resources = (await client.list_resources()).resources
        print([str(resource.uri) for resource in resources])
        print((await client.read_resource(resources[0].uri)).contents[0])

asyncio.run(main())
