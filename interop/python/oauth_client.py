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
from html.parser import HTMLParser
from urllib.parse import urljoin

import httpx2
from oauth_common import User, env, expire_access_token, list_and_read, session


class HiddenFields(HTMLParser):
    """The consent form's hidden inputs."""

    def __init__(self) -> None:
        super().__init__()
        self.fields: dict[str, str] = {}

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        values = dict(attrs)
        if tag == "input" and values.get("type") == "hidden" and values.get("name"):
            self.fields[values["name"] or ""] = values.get("value") or ""


class KeyOwner(User):
    """Plays the key's owner on the authorize page."""

    def __init__(self, key: str) -> None:
        super().__init__()
        self.key = key

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
        if answer.status_code != 303:
            raise RuntimeError(f"consent answered {answer.status_code} {location!r}: {answer.text[:500]}")
        self.redirected(location)


async def main() -> None:
    url = env("INTEROP_OAUTH_MCP_URL")
    user = KeyOwner(env("INTEROP_OAUTH_KEY"))
    async with session(url, user) as (client, storage, oauth):
        text = await list_and_read(client)
        first = storage.tokens
        if first is None or not first.access_token.startswith("hgat_") or not first.refresh_token:
            raise RuntimeError(f"unexpected tokens after the flow: {first!r}")
        print(f"flow ok: client {storage.client_info.client_id if storage.client_info else '?'}, read {text!r}")

        # Make the SDK refresh: the access token counts as expired, so the next request rotates it.
        expire_access_token(oauth)
        await list_and_read(client)
        second = storage.tokens
        if second is None or second.access_token == first.access_token or second.refresh_token == first.refresh_token:
            raise RuntimeError("the SDK did not refresh (or the refresh token was not rotated)")
        if user.visits != 1:
            raise RuntimeError(f"the user was asked {user.visits} times")
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
