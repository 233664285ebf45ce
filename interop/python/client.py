"""The official MCP Python SDK client (PyPI `mcp`) against hivegate.

    client.py --mode auto     the SDK's default: probes `server/discover` and must settle on 2026-07-28
    client.py --mode legacy   the initialize handshake (2025-11-25)

Runs the interop steps (discovery, lists, text/binary/template reads, prompts, completion, errors) and
exits non-zero naming every mismatch. The environment is the one described in ../ts/common.mjs
(INTEROP_MCP_URL, INTEROP_MCP_KEY, INTEROP_ADMIN_URL, INTEROP_REGISTRY_KEY, INTEROP_FIXTURES).

The last step subscribes to the watched resource (`resources/subscribe` on the legacy wire, whose
notifications arrive on the session's GET stream; `Client.listen` on the modern one), changes it through
`Admin`, and waits for `notifications/resources/updated`.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import json
import os
import sys
import time
import traceback
import warnings
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import httpx2
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client
from mcp.shared.exceptions import MCPError
from mcp_types import PromptReference, ResourceTemplateReference

MODERN_VERSION = "2026-07-28"
LEGACY_VERSION = "2025-11-25"


class Mismatch(Exception):
    """A failed expectation; its message says what was expected and what came."""


def env(name: str) -> str:
    value = os.environ.get(name)
    if not value:
        print(f"interop: {name} is not set (interop/run sets it; see interop/README.md)", file=sys.stderr)
        sys.exit(2)
    return value


def check(condition: bool, message: str) -> None:
    if not condition:
        raise Mismatch(message)


def equal(actual: Any, wanted: Any, what: str) -> None:
    if actual != wanted:
        raise Mismatch(f"{what}: expected {json.dumps(wanted)}, got {json.dumps(actual, default=str)}")


def same_set(actual: Any, wanted: list[str], what: str) -> None:
    equal(sorted(actual or []), sorted(wanted), what)


def same_bytes(actual_b64: Any, wanted_b64: str, what: str) -> None:
    check(isinstance(actual_b64, str), f"{what}: expected a base64 string, got {actual_b64!r}")
    actual, wanted = base64.b64decode(actual_b64), base64.b64decode(wanted_b64)
    if actual == wanted:
        return
    at = next((i for i, (a, b) in enumerate(zip(actual, wanted)) if a != b), min(len(actual), len(wanted)))
    raise Mismatch(f"{what}: {len(actual)} bytes differ from the expected {len(wanted)} bytes, first at offset {at}")


async def expect_rpc_error(call: Awaitable[Any], code: int, what: str) -> MCPError:
    try:
        result = await call
    except MCPError as error:
        check(error.error.code == code, f"{what}: expected JSON-RPC error {code}, got {error.error.code} ({error})")
        return error
    raise Mismatch(f"{what}: expected JSON-RPC error {code}, got a result {str(result)[:300]}")


def dump(model: Any) -> Any:
    return model.model_dump(mode="json", by_alias=True, exclude_none=True)


class Admin:
    """The admin API as the test agent's publisher (registry key)."""

    def __init__(self, base: str, key: str, agent: str) -> None:
        self.base, self.key, self.agent = base.rstrip("/"), key, agent

    async def request(self, method: str, path: str, body: Any = None) -> Any:
        async with httpx2.AsyncClient(timeout=30) as http:
            res = await http.request(
                method, f"{self.base}{path}", headers={"X-Agent-API-Key": self.key}, json=body
            )
        if res.status_code >= 300:
            raise Mismatch(f"admin {method} {path}: HTTP {res.status_code}: {res.text[:300]}")
        return res.json() if res.content else None

    async def put_resource(self, resource: dict[str, Any]) -> Any:
        return await self.request("PUT", f"/agents/{self.agent}/resources", resource)


    async def change_watched(self, who: str, uri: str) -> Any:
        """Changes the watched resource, so that its subscribers are told."""
        text = f"Watched resource content, changed by {who} at {time.time()}"
        return await self.put_resource({"uri": uri, "name": "watched-resource", "mimeType": "text/plain", "text": text})


class Updates:
    """The `notifications/resources/updated` a client receives outside any request (the client's message
    handler); `next(uri)` waits for one about `uri`."""

    def __init__(self) -> None:
        self.uris: list[str] = []
        self.arrived = asyncio.Event()

    async def handle(self, message: Any) -> None:
        if getattr(message, "method", None) == "notifications/resources/updated":
            self.uris.append(str(message.params.uri))
            self.arrived.set()

    async def next(self, uri: str, seconds: float) -> None:
        async def arrival() -> None:
            while uri not in self.uris:
                self.arrived.clear()
                await self.arrived.wait()
            self.uris.remove(uri)

        try:
            await asyncio.wait_for(arrival(), seconds)
        except TimeoutError:
            raise Mismatch(f"no notifications/resources/updated for {uri} within {seconds} s") from None


Step = tuple[str, Callable[[], Awaitable[None]]]


def steps(client: Client, mode: str, fixtures: dict[str, Any], admin: Admin, updates: Updates) -> list[Step]:
    expected = fixtures["expect"]
    era = "legacy" if mode == "legacy" else "modern"

    async def connected() -> None:
        if mode == "legacy":
            equal(client.protocol_version, LEGACY_VERSION, "negotiated protocol version")
        else:
            equal(client.protocol_version, MODERN_VERSION, "negotiated protocol version (auto fell back to legacy?)")

    async def identity() -> None:
        info = client.server_info
        check(info is not None, "the server did not identify itself (serverInfo)")
        equal(info.name, expected["serverName"], "serverInfo.name")
        equal(info.title, fixtures["agent"]["name"], "serverInfo.title (the agent name)")
        caps = dump(client.server_capabilities)
        for capability in ("resources", "prompts", "completions"):
            check(capability in caps, f'capability "{capability}" is not advertised: {json.dumps(caps)}')
        equal(caps["resources"], {"subscribe": True, "listChanged": True}, "capabilities.resources")
        equal(caps["prompts"], {"listChanged": True}, "capabilities.prompts")
        if era == "legacy":
            check("logging" in caps, f'capability "logging" is not advertised to a legacy client: {json.dumps(caps)}')
            equal(client.instructions, fixtures["agent"]["description"], "instructions (the agent description)")
        else:
            check("logging" not in caps, 'capability "logging" is advertised to a modern client')

    async def list_all(method: Callable[..., Awaitable[Any]], field: str) -> list[Any]:
        items: list[Any] = []
        cursor = None
        for _ in range(50):
            result = await method(cursor=cursor)
            items.extend(getattr(result, field))
            cursor = result.next_cursor
            if not cursor:
                return items
        raise Mismatch(f"{field}: still paging after 50 pages")

    async def resources_list() -> None:
        resources = await list_all(client.list_resources, "resources")
        same_set([r.uri for r in resources], expected["listedResources"], "resources/list URIs")
        text = next(r for r in resources if r.uri == expected["textResource"]["uri"])
        equal(text.mime_type, expected["textResource"]["mimeType"], f"mimeType of {text.uri} in resources/list")

    async def read_text(spec: dict[str, Any]) -> None:
        result = await client.read_resource(spec["uri"])
        equal(len(result.contents), 1, f"number of contents of {spec['uri']}")
        content = dump(result.contents[0])
        equal(
            {k: content.get(k) for k in ("uri", "mimeType", "text")},
            {k: spec[k] for k in ("uri", "mimeType", "text")},
            f"contents of {spec['uri']}",
        )

    async def read_binary() -> None:
        for spec in expected["binaryResources"]:
            result = await client.read_resource(spec["uri"])
            equal(len(result.contents), 1, f"number of contents of {spec['uri']}")
            content = dump(result.contents[0])
            equal(content.get("uri"), spec["uri"], f"uri of the contents of {spec['uri']}")
            equal(content.get("mimeType"), spec["mimeType"], f"mimeType of {spec['uri']}")
            check("text" not in content, f"{spec['uri']} was answered as text, not as a blob")
            same_bytes(content.get("blob"), spec["blob"], f"bytes of {spec['uri']}")

    async def templates_list() -> None:
        templates = await list_all(client.list_resource_templates, "resource_templates")
        same_set([t.uri_template for t in templates], expected["listedTemplates"], "resources/templates/list")

    async def prompts_list() -> None:
        prompts = await list_all(client.list_prompts, "prompts")
        same_set([p.name for p in prompts], expected["listedPrompts"], "prompts/list names")
        with_args = next(p for p in prompts if p.name == expected["prompt"]["name"])
        equal(
            [[a.name, a.required is True] for a in with_args.arguments or []],
            [["arg1", True], ["arg2", True]],
            f"arguments of {with_args.name}",
        )

    async def prompt_get() -> None:
        spec = expected["prompt"]
        result = await client.get_prompt(spec["name"], spec["arguments"])
        equal([dump(m) for m in result.messages], spec["messages"], f"messages of {spec['name']}")

    async def complete_prompt() -> None:
        spec = expected["promptCompletion"]
        result = await client.complete(PromptReference(name=spec["ref"]["name"]), spec["argument"])
        same_set(result.completion.values, spec["values"], f"completions of {spec['ref']['name']}")

    async def complete_template() -> None:
        spec = expected["templateCompletion"]
        result = await client.complete(ResourceTemplateReference(uri=spec["ref"]["uri"]), spec["argument"])
        same_set(result.completion.values, spec["values"], f"completions of {spec['ref']['uri']}")

    async def unknown_resource() -> None:
        uri = expected["missingResource"]
        error = await expect_rpc_error(
            client.read_resource(uri), expected["notFoundCode"][era], f"resources/read {uri}"
        )
        data = error.error.data if isinstance(error.error.data, dict) else {}
        equal(data.get("uri"), uri, "data.uri of the not-found error")

    async def missing_argument() -> None:
        spec = expected["promptMissingArgument"]
        await expect_rpc_error(
            client.get_prompt(spec["name"], spec["arguments"]),
            expected["invalidParamsCode"],
            f"prompts/get {spec['name']} without arg2",
        )

    async def subscription() -> None:
        uri = expected["watchedResource"]
        who = f"python-{era}"
        if era == "legacy":
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")  # deprecated as of 2026-07-28, the way to subscribe before
                equal(dump(await client.subscribe_resource(uri)), {}, "resources/subscribe result")
                await admin.change_watched(who, uri)
                await updates.next(uri, 10)
                equal(dump(await client.unsubscribe_resource(uri)), {}, "resources/unsubscribe result")
            return
        async with client.listen(resource_subscriptions=[uri], tools_list_changed=True) as subscription:
            equal(dump(subscription.honored), {"resourceSubscriptions": [uri]}, "the acknowledged (honoured) filter")
            await admin.change_watched(who, uri)

            async def first_event() -> Any:
                async for event in subscription:
                    return event
                raise Mismatch("the listen stream ended before any notification")

            try:
                event = await asyncio.wait_for(first_event(), 10)
            except TimeoutError:
                raise Mismatch(f"no notifications/resources/updated for {uri} within 10 s") from None
            equal(getattr(event, "uri", None), uri, f"the event on the listen stream ({event!r})")

    return [
        ("connect (initialize)" if era == "legacy" else "connect (server/discover, auto)", connected),
        ("server identity and capabilities", identity),
        ("resources/list", resources_list),
        ("resources/read (text)", lambda: read_text(expected["textResource"])),
        ("resources/read (binary, exact bytes)", read_binary),
        ("resources/templates/list", templates_list),
        ("resources/read (template)", lambda: read_text(expected["templateRead"])),
        ("prompts/list", prompts_list),
        ("prompts/get (with arguments)", prompt_get),
        ("completion/complete (prompt argument)", complete_prompt),
        ("completion/complete (template variable)", complete_template),
        ("error: unknown resource", unknown_resource),
        ("error: missing prompt argument", missing_argument),
        (
            "resources/subscribe → notifications/resources/updated (GET stream)"
            if era == "legacy"
            else "subscriptions/listen → notifications/resources/updated",
            subscription,
        ),
    ]


async def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--mode", choices=("auto", "legacy"), default="auto")
    mode = parser.parse_args().mode
    name = f"python-{'legacy' if mode == 'legacy' else 'modern'}"

    url, key = env("INTEROP_MCP_URL"), env("INTEROP_MCP_KEY")
    fixtures_path = os.environ.get("INTEROP_FIXTURES") or str(Path(__file__).resolve().parent.parent / "fixtures.json")
    fixtures = json.loads(Path(fixtures_path).read_text())
    admin = Admin(env("INTEROP_ADMIN_URL"), env("INTEROP_REGISTRY_KEY"), fixtures["agent"]["id"])

    passed = failed = 0
    updates = Updates()
    http = create_mcp_http_client(headers={"X-Agent-API-Key": key}, timeout=httpx2.Timeout(30))
    transport = streamable_http_client(url, http_client=http)
    try:
        async with http, Client(transport, mode=mode, message_handler=updates.handle) as client:
            for name_, fn in steps(client, mode, fixtures, admin, updates):
                try:
                    await fn()
                    passed += 1
                    print(f"  ok    {name_}")
                except Mismatch as error:
                    failed += 1
                    print(f"  FAIL  {name_}: {error}")
                except Exception as error:  # an SDK or transport error is a failure of that step
                    failed += 1
                    print(f"  FAIL  {name_}: {type(error).__name__}: {error}")
                    traceback.print_exc(limit=3, file=sys.stdout)
    except Exception as error:  # connecting failed: nothing else can run
        failed += 1
        print(f"  FAIL  connect: {type(error).__name__}: {error}")
        for line in traceback.format_exception(error, limit=4)[-6:]:
            print("        " + line.rstrip().replace("\n", "\n        "))
    print(f"{name}: {passed} passed, {failed} failed")
    return 0 if failed == 0 and passed > 0 else 1


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
