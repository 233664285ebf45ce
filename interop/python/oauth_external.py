"""The official MCP Python SDK's OAuth client (PyPI `mcp`, `OAuthClientProvider`) against hivegate with an
external authorization server (`oauth.mode = "external"`): issuer.py, run beside it by interop/run.

First, as the operator, it grants the issuer's subject INTEROP_EXTERNAL_SUBJECT on the agent as its `mcp` key
INTEROP_EXTERNAL_KEY_ID (`PUT /admin/v1/agents/{agent}/oauth-subjects/{subject}`). Then it connects to
INTEROP_EXTERNAL_MCP_URL without a key: the SDK is answered 401, reads the agent's Protected Resource Metadata,
which names the external issuer (INTEROP_EXTERNAL_ISSUER), discovers that server's metadata, registers itself
there and sends the user to its authorize endpoint, which approves at once and redirects with a code; the SDK
exchanges it (PKCE, `resource` = the agent's MCP URL) for a JWT access token, which hivegate checks against
the issuer's JWKS. The script lists and reads the agent's resources with it, makes the SDK refresh (the issuer
signs refreshed tokens with its other key), lists and reads again, and finally withdraws the grant and checks
that hivegate refuses the subject's token from then on (403).
"""

from __future__ import annotations

import asyncio
import base64
import json
from typing import Any
from urllib.parse import quote, urlparse

import httpx2
from oauth_common import User, env, expire_access_token, list_and_read, session


class Approved(User):
    """The user at the issuer's authorize endpoint, which approves without asking."""

    def __init__(self, issuer: str) -> None:
        super().__init__()
        self.issuer = issuer

    async def open(self, authorization_url: str) -> None:
        if not authorization_url.startswith(f"{self.issuer}/authorize?"):
            raise RuntimeError(f"sent to {authorization_url}, not to the external issuer's authorize endpoint")
        async with httpx2.AsyncClient(timeout=30, follow_redirects=False) as http:
            answer = await http.get(authorization_url)
        if answer.status_code != 302:
            raise RuntimeError(f"the authorize endpoint answered {answer.status_code}: {answer.text}")
        self.redirected(answer.headers.get("location", ""))


def jwt_part(token: str, index: int) -> dict[str, Any]:
    """The header (0) or the claims (1) of a JWT, unverified: hivegate verified it."""
    part = token.split(".")[index]
    return json.loads(base64.urlsafe_b64decode(part + "=" * (-len(part) % 4)))


def check_token(token: str, issuer: str, subject: str, resource: str, alg: str) -> None:
    header, claims = jwt_part(token, 0), jwt_part(token, 1)
    seen = {"alg": header.get("alg"), "iss": claims.get("iss"), "sub": claims.get("sub"), "aud": claims.get("aud")}
    wanted = {"alg": alg, "iss": issuer, "sub": subject, "aud": resource}
    if seen != wanted:
        raise RuntimeError(f"the access token is not what the issuer should have made: {seen} != {wanted}")


async def main() -> None:
    url = env("INTEROP_EXTERNAL_MCP_URL")
    issuer = env("INTEROP_EXTERNAL_ISSUER")
    subject = env("INTEROP_EXTERNAL_SUBJECT")
    key_id = env("INTEROP_EXTERNAL_KEY_ID")
    agent = urlparse(url).path.strip("/").split("/")[0]
    grant_url = f"{env('INTEROP_EXTERNAL_ADMIN_URL')}/agents/{agent}/oauth-subjects/{quote(subject, safe='')}"
    operator = {"Authorization": f"Bearer {env('HIVEGATE_ADMIN_TOKEN')}"}

    async with httpx2.AsyncClient(timeout=30, headers=operator) as admin:
        answer = await admin.put(grant_url, json={"keyId": key_id})
        grant = answer.json() if answer.headers.get("content-type", "").endswith("json") else {}
        if answer.status_code not in (200, 201) or (grant.get("issuer"), grant.get("subject")) != (issuer, subject):
            raise RuntimeError(f"granting the subject answered {answer.status_code}: {answer.text}")
    print(f"grant ok: subject {subject!r} of {issuer} acts as key {key_id}")

    user = Approved(issuer)
    async with session(url, user) as (client, storage, oauth):
        text = await list_and_read(client)
        first = storage.tokens
        if first is None or not first.refresh_token:
            raise RuntimeError(f"unexpected tokens after the flow: {first!r}")
        check_token(first.access_token, issuer, subject, url, "ES256")
        print(f"flow ok: client {storage.client_info.client_id if storage.client_info else '?'}, read {text!r}")

        expire_access_token(oauth)
        await list_and_read(client)
        second = storage.tokens
        if second is None or second.access_token == first.access_token:
            raise RuntimeError("the SDK did not refresh")
        check_token(second.access_token, issuer, subject, url, "RS256")
        if user.visits != 1:
            raise RuntimeError(f"the user was sent to the authorize endpoint {user.visits} times")
        print("refresh ok: a token signed with the issuer's other key; list and read again")

    async with httpx2.AsyncClient(timeout=30) as plain:
        answer = await plain.delete(grant_url, headers=operator)
        if answer.status_code != 204:
            raise RuntimeError(f"withdrawing the grant answered {answer.status_code}: {answer.text}")
        answer = await plain.post(
            url,
            headers={
                "Authorization": f"Bearer {second.access_token}",
                "Accept": "application/json, text/event-stream",
                "Content-Type": "application/json",
            },
            json={"jsonrpc": "2.0", "id": 1, "method": "ping"},
        )
        if answer.status_code != 403:
            raise RuntimeError(f"a token of a withdrawn subject answered {answer.status_code}: {answer.text}")
    print("grant withdrawn: the subject's token is refused (403)")


if __name__ == "__main__":
    asyncio.run(main())
