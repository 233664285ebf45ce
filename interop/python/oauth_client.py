"""The official MCP Python SDK's OAuth client (PyPI `mcp`, `OAuthClientProvider`) against hivegate's built-in
authorization server.

Connects to INTEROP_OAUTH_MCP_URL without a key: the SDK is answered 401, discovers the agent's Protected
Resource Metadata and the authorization server's metadata, registers itself (Dynamic Client Registration) and
sends the user to the authorize page. This script plays the user: it opens that page over HTTP, pastes the
agent's `mcp` key (INTEROP_OAUTH_KEY) into the consent form, allows, and hands the code of the redirect back to
the SDK, which exchanges it (PKCE) for tokens. Then it lists and reads the agent's resources, makes the SDK
refresh its token (the access token marked expired), and lists and reads again with the rotated one.
"""

from __future__ import annotations

import asyncio
import os
import sys
from html.parser import HTMLParser
from urllib.parse import parse_qs, urljoin, urlparse

import httpx2
from mcp import Client
from mcp.client.auth import AuthorizationCodeResult, OAuthClientProvider
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.auth import OAuthClientInformationFull, OAuthClientMetadata, OAuthToken

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


class HiddenFields(HTMLParser):
    """The consent form's hidden inputs."""

    def __init__(self) -> None:
        super().__init__()
        self.fields: dict[str, str] = {}

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        values = dict(attrs)
        if tag == "input" and values.get("type") == "hidden" and values.get("name"):
            self.fields[values["name"] or ""] = values.get("value") or ""


class User:
    """Plays the key's owner on the authorize page."""

    def __init__(self, key: str) -> None:
        self.key = key
        self.result: AuthorizationCodeResult | None = None
        self.consents = 0

    async def open(self, authorization_url: str) -> None:
        async with httpx2.AsyncClient(timeout=30, follow_redirects=False) as http:
            page = await http.get(authorization_url)
            if page.status_code != 200:
                raise RuntimeError(f"the authorize page answered {page.status_code}: {page.text[:500]}")
            parser = HiddenFields()
            parser.feed(page.text)
            if "form_token" not in parser.fields:
                raise RuntimeError(f"the authorize page has no consent form: {page.text[:500]}")
            form = dict(parser.fields, api_key=self.key, decision="allow")
            answer = await http.post(urljoin(authorization_url, "/oauth/authorize"), data=form)
        location = answer.headers.get("location", "")
        if answer.status_code != 303 or not location.startswith(CALLBACK):
            raise RuntimeError(f"consent answered {answer.status_code} {location!r}: {answer.text[:500]}")
        query = parse_qs(urlparse(location).query)
        self.consents += 1
        self.result = AuthorizationCodeResult(
            code=query["code"][0], state=query.get("state", [None])[0], iss=query.get("iss", [None])[0]
        )

    async def callback(self) -> AuthorizationCodeResult:
        if self.result is None:
            raise RuntimeError("the callback was asked for before the user consented")
        return self.result


async def list_and_read(client: Client) -> str:
    resources = (await client.list_resources()).resources
    uris = [str(resource.uri) for resource in resources]
    if EXPECTED_URI not in uris:
        raise RuntimeError(f"{EXPECTED_URI} is not listed: {uris}")
    contents = (await client.read_resource(EXPECTED_URI)).contents
    if not contents or not getattr(contents[0], "text", None):
        raise RuntimeError(f"reading {EXPECTED_URI} gave {contents!r}")
    return contents[0].text


async def main() -> None:
    url = env("INTEROP_OAUTH_MCP_URL")
    user = User(env("INTEROP_OAUTH_KEY"))
    storage = MemoryStorage()
    provider = OAuthClientProvider(
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
    http = httpx2.AsyncClient(auth=provider, timeout=httpx2.Timeout(30))
    async with http, Client(streamable_http_client(url, http_client=http)) as client:
        text = await list_and_read(client)
        first = storage.tokens
        if first is None or not first.access_token.startswith("hgat_") or not first.refresh_token:
            raise RuntimeError(f"unexpected tokens after the flow: {first!r}")
        print(f"flow ok: client {storage.client_info.client_id if storage.client_info else '?'}, read {text!r}")

        # Make the SDK refresh: the access token counts as expired, so the next request rotates it.
        provider.context.token_expiry_time = 1.0
        await list_and_read(client)
        second = storage.tokens
        if second is None or second.access_token == first.access_token or second.refresh_token == first.refresh_token:
            raise RuntimeError("the SDK did not refresh (or the refresh token was not rotated)")
        if user.consents != 1:
            raise RuntimeError(f"the user was asked {user.consents} times")
        print("refresh ok: new access and refresh tokens; list and read again")

    # The old refresh token is refused now.
    async with httpx2.AsyncClient(timeout=30) as plain:
        token_url = urljoin(url, "/oauth/token")
        answer = await plain.post(
            token_url,
            data={
                "grant_type": "refresh_token",
                "refresh_token": first.refresh_token or "",
                "client_id": storage.client_info.client_id if storage.client_info else "",
            },
        )
        if answer.status_code != 400 or answer.json().get("error") != "invalid_grant":
            raise RuntimeError(f"the rotated refresh token was not refused: {answer.status_code} {answer.text}")
    print("old refresh token refused: ok")


if __name__ == "__main__":
    asyncio.run(main())
