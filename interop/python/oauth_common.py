"""What the Python SDK's OAuth clients (oauth_client.py, oauth_external.py) share: their environment, the
SDK's token storage in memory, the user the SDK sends to the authorization server, a client session through
the `OAuthClientProvider` they configure alike, and the list-and-read step that proves an access token works
on the agent."""

from __future__ import annotations

import os
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from urllib.parse import parse_qs, urlparse

import httpx2
from mcp import Client
from mcp.client.auth import AuthorizationCodeResult, OAuthClientProvider
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.auth import OAuthClientInformationFull, OAuthClientMetadata, OAuthToken

# Never listened on: the scripts play the user and read the redirect's Location themselves.
CALLBACK = "http://127.0.0.1:9/callback"
EXPECTED_URI = "test://static-text"


def env(name: str) -> str:
    value = os.environ.get(name)
    if not value:
        print(f"interop: {name} is not set (interop/run sets it)", file=sys.stderr)
        sys.exit(2)
    return value


class MemoryStorage:
    """The SDK's token storage, in memory."""

    def __init__(self) -> None:
        self.tokens: OAuthToken | None = None
        self.client_info: OAuthClientInformationFull | None = None

    async def get_tokens(self) -> OAuthToken | None:
        return self.tokens

    async def set_tokens(self, tokens: OAuthToken) -> None:
        self.tokens = tokens

    async def get_client_info(self) -> OAuthClientInformationFull | None:
        return self.client_info

    async def set_client_info(self, client_info: OAuthClientInformationFull) -> None:
        self.client_info = client_info


class User:
    """The user the SDK sends to the authorization server: `open` (the SDK's redirect handler, written by
    each script) ends at a redirect to CALLBACK and hands its Location to `redirected`; `callback` (the SDK's
    callback handler) returns the code, `state` and `iss` it carried."""

    def __init__(self) -> None:
        self.result: AuthorizationCodeResult | None = None
        self.visits = 0

    async def open(self, authorization_url: str) -> None:
        raise NotImplementedError

    def redirected(self, location: str) -> None:
        query = parse_qs(urlparse(location).query)
        if not location.startswith(CALLBACK) or "code" not in query:
            raise RuntimeError(f"redirected to {location!r}, not to the callback with a code")
        self.visits += 1
        self.result = AuthorizationCodeResult(
            code=query["code"][0], state=query.get("state", [None])[0], iss=query.get("iss", [None])[0]
        )

    async def callback(self) -> AuthorizationCodeResult:
        if self.result is None:
            raise RuntimeError("the callback was asked for before the authorization server redirected")
        return self.result


def provider(
    url: str,
    storage: MemoryStorage,
    user: User,
) -> OAuthClientProvider:
    """The SDK's provider for the agent at `url`: a public client registered by DCR, scope `mcp`."""
    return OAuthClientProvider(
        server_url=url,
        client_metadata=OAuthClientMetadata(
            client_name="hivegate interop (Python SDK)",
            redirect_uris=[CALLBACK],
            grant_types=["authorization_code", "refresh_token"],
            response_types=["code"],
            token_endpoint_auth_method="none",
            scope="mcp",
        ),
        storage=storage,
        redirect_handler=user.open,
        callback_handler=user.callback,
    )


@asynccontextmanager
async def session(url: str, user: User) -> AsyncIterator[tuple[Client, MemoryStorage, OAuthClientProvider]]:
    """A client of the agent at `url` that authorizes through the SDK's provider (which sends `user`), with
    the provider's storage and the provider."""
    storage = MemoryStorage()
    oauth = provider(url, storage, user)
    http = httpx2.AsyncClient(auth=oauth, timeout=httpx2.Timeout(30))
    async with http, Client(streamable_http_client(url, http_client=http)) as client:
        yield client, storage, oauth


def expire_access_token(oauth: OAuthClientProvider) -> None:
    """Makes the SDK refresh before its next request: the access token counts as expired."""
    oauth.context.token_expiry_time = 1.0


async def list_and_read(client: Client) -> str:
    resources = (await client.list_resources()).resources
    uris = [str(resource.uri) for resource in resources]
    if EXPECTED_URI not in uris:
        raise RuntimeError(f"{EXPECTED_URI} is not listed: {uris}")
    contents = (await client.read_resource(EXPECTED_URI)).contents
    if not contents or not getattr(contents[0], "text", None):
        raise RuntimeError(f"reading {EXPECTED_URI} gave {contents!r}")
    return contents[0].text
