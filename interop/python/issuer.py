"""A small external OAuth 2.1 authorization server for the interop run (`oauth.mode = "external"`).

    issuer.py --port-file FILE --subject SUB [--path /idp]

Listens on a free loopback port and writes the port to FILE once it accepts connections; its issuer
identifier is `http://127.0.0.1:PORT{path}`. It serves:

- RFC 8414 metadata at `/.well-known/oauth-authorization-server{path}`;
- `{issuer}/jwks`: the public halves of an EC P-256 key and an RSA key, both generated at start. Tokens from
  an authorization code are signed with the EC key (ES256), refreshed ones with the RSA key (RS256), so the
  resource server has to pick the key by `kid`;
- `{issuer}/register`: Dynamic Client Registration (RFC 7591) of public clients (`token_endpoint_auth_method`
  `none`);
- `{issuer}/authorize`: approves every request as the user SUB at once and redirects to the client's
  registered `redirect_uri` with a code, `state` and `iss` (RFC 9207). It requires PKCE with S256 and one
  `resource` (RFC 8707);
- `{issuer}/token`: the `authorization_code` grant (the PKCE verifier checked) and the `refresh_token` grant
  (each refresh token used once, a new one issued). Access tokens are JWTs with `iss`, `sub` (SUB),
  `aud` (the `resource` of the authorization), `exp` (5 minutes on), `iat`, `jti`, `client_id` and
  `scope` "mcp".

State is in memory; the server runs until it is stopped. Every request is logged to stderr.
"""

from __future__ import annotations

import argparse
import base64
import hashlib
import json
import secrets
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlencode, urlparse

import jwt
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from jwt.algorithms import ECAlgorithm, RSAAlgorithm

SCOPE = "mcp"
ACCESS_TOKEN_SECONDS = 300
CODE_SECONDS = 60
MAX_BODY = 64 * 1024


class OAuthError(Exception):
    """An error answer of the token or registration endpoint (RFC 6749 §5.2, RFC 7591 §3.2.2)."""

    def __init__(self, error: str, description: str, status: int = 400) -> None:
        super().__init__(description)
        self.error = error
        self.description = description
        self.status = status


class Issuer:
    """The server's keys, clients, codes and refresh tokens."""

    def __init__(self, issuer: str, subject: str) -> None:
        self.issuer = issuer
        self.subject = subject
        self.lock = threading.Lock()
        self.clients: dict[str, dict[str, Any]] = {}
        self.codes: dict[str, dict[str, Any]] = {}
        self.refresh_tokens: dict[str, dict[str, Any]] = {}
        self.ec_key = ec.generate_private_key(ec.SECP256R1())
        self.rsa_key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        self.ec_kid = "ec-" + secrets.token_hex(8)
        self.rsa_kid = "rsa-" + secrets.token_hex(8)

    def metadata(self) -> dict[str, Any]:
        return {
            "issuer": self.issuer,
            "authorization_endpoint": f"{self.issuer}/authorize",
            "token_endpoint": f"{self.issuer}/token",
            "registration_endpoint": f"{self.issuer}/register",
            "jwks_uri": f"{self.issuer}/jwks",
            "scopes_supported": [SCOPE],
            "response_types_supported": ["code"],
            "grant_types_supported": ["authorization_code", "refresh_token"],
            "token_endpoint_auth_methods_supported": ["none"],
            "code_challenge_methods_supported": ["S256"],
            "authorization_response_iss_parameter_supported": True,
        }

    def jwks(self) -> dict[str, Any]:
        ec_jwk = ECAlgorithm.to_jwk(self.ec_key.public_key(), as_dict=True)
        rsa_jwk = RSAAlgorithm.to_jwk(self.rsa_key.public_key(), as_dict=True)
        return {
            "keys": [
                dict(ec_jwk, kid=self.ec_kid, use="sig", alg="ES256"),
                dict(rsa_jwk, kid=self.rsa_kid, use="sig", alg="RS256"),
            ]
        }

    def register(self, body: Any) -> dict[str, Any]:
        if not isinstance(body, dict):
            raise OAuthError("invalid_client_metadata", "the body must be a JSON object")
        redirect_uris = body.get("redirect_uris")
        if (
            not isinstance(redirect_uris, list)
            or not redirect_uris
            or not all(isinstance(uri, str) and urlparse(uri).scheme in ("http", "https") for uri in redirect_uris)
        ):
            raise OAuthError("invalid_redirect_uri", "redirect_uris must be a non-empty list of http(s) URLs")
        method = body.get("token_endpoint_auth_method", "none")
        if method != "none":
            raise OAuthError("invalid_client_metadata", "only public clients (token_endpoint_auth_method none)")
        client = {
            "client_id": "client-" + secrets.token_urlsafe(16),
            "client_id_issued_at": int(time.time()),
            "client_name": str(body.get("client_name", "")),
            "redirect_uris": redirect_uris,
            "grant_types": ["authorization_code", "refresh_token"],
            "response_types": ["code"],
            "token_endpoint_auth_method": "none",
            "scope": SCOPE,
        }
        with self.lock:
            self.clients[client["client_id"]] = client
        return client

    def authorize(self, query: dict[str, list[str]]) -> tuple[int, dict[str, str], dict[str, Any] | None]:
        """The answer to an authorization request: a redirect, or a 400 when it cannot redirect."""

        def one(name: str) -> str | None:
            values = query.get(name, [])
            return values[0] if len(values) == 1 else None

        client = self.clients.get(one("client_id") or "")
        if client is None:
            return 400, {}, {"error": "invalid_request", "error_description": "unknown client_id"}
        redirect_uri = one("redirect_uri")
        if redirect_uri is None and len(client["redirect_uris"]) == 1:
            redirect_uri = client["redirect_uris"][0]
        if redirect_uri not in client["redirect_uris"]:
            return 400, {}, {"error": "invalid_request", "error_description": "redirect_uri is not registered"}

        def back(params: dict[str, str]) -> tuple[int, dict[str, str], None]:
            if one("state") is not None:
                params["state"] = one("state") or ""
            params["iss"] = self.issuer
            separator = "&" if urlparse(redirect_uri).query else "?"
            return 302, {"Location": f"{redirect_uri}{separator}{urlencode(params)}"}, None

        def refuse(description: str, error: str = "invalid_request") -> tuple[int, dict[str, str], None]:
            return back({"error": error, "error_description": description})

        if one("response_type") != "code":
            return refuse("response_type must be code", "unsupported_response_type")
        challenge = one("code_challenge")
        if one("code_challenge_method") != "S256" or not challenge:
            return refuse("PKCE with code_challenge_method S256 is required")
        resource = one("resource")
        if not resource:
            return refuse("one resource (RFC 8707) is required", "invalid_target")
        scopes = (one("scope") or SCOPE).split()
        if SCOPE not in scopes:
            return refuse(f"scope must include {SCOPE}", "invalid_scope")
        code = secrets.token_urlsafe(32)
        with self.lock:
            self.codes[code] = {
                "client_id": client["client_id"],
                "redirect_uri": redirect_uri,
                "challenge": challenge,
                "resource": resource,
                "expires": time.time() + CODE_SECONDS,
            }
        return back({"code": code})

    def token(self, form: dict[str, list[str]]) -> dict[str, Any]:
        def one(name: str) -> str | None:
            values = form.get(name, [])
            if len(values) > 1:
                raise OAuthError("invalid_request", f"{name} is repeated")
            return values[0] if values else None

        grant_type = one("grant_type")
        client_id = one("client_id")
        if client_id not in self.clients:
            raise OAuthError("invalid_client", "unknown client_id", 401)
        if grant_type == "authorization_code":
            with self.lock:
                granted = self.codes.pop(one("code") or "", None)
            if granted is None or granted["expires"] < time.time() or granted["client_id"] != client_id:
                raise OAuthError("invalid_grant", "unknown, used or expired code")
            if one("redirect_uri") != granted["redirect_uri"]:
                raise OAuthError("invalid_grant", "redirect_uri differs from the authorization request's")
            verifier = one("code_verifier") or ""
            digest = base64.urlsafe_b64encode(hashlib.sha256(verifier.encode()).digest()).rstrip(b"=").decode()
            if not secrets.compare_digest(digest, granted["challenge"]):
                raise OAuthError("invalid_grant", "code_verifier does not match the code_challenge (S256)")
            key, kid, alg = self.ec_key, self.ec_kid, "ES256"
        elif grant_type == "refresh_token":
            with self.lock:
                granted = self.refresh_tokens.pop(one("refresh_token") or "", None)
            if granted is None or granted["client_id"] != client_id:
                raise OAuthError("invalid_grant", "unknown or used refresh token")
            key, kid, alg = self.rsa_key, self.rsa_kid, "RS256"
        else:
            raise OAuthError("unsupported_grant_type", "grant_type must be authorization_code or refresh_token")
        resource = one("resource")
        if resource is not None and resource != granted["resource"]:
            raise OAuthError("invalid_target", "resource differs from the authorized one")
        now = int(time.time())
        claims = {
            "iss": self.issuer,
            "sub": self.subject,
            "aud": granted["resource"],
            "exp": now + ACCESS_TOKEN_SECONDS,
            "iat": now,
            "jti": secrets.token_hex(16),
            "client_id": client_id,
            "scope": SCOPE,
        }
        access_token = jwt.encode(claims, key, algorithm=alg, headers={"kid": kid, "typ": "at+jwt"})
        refresh_token = secrets.token_urlsafe(32)
        with self.lock:
            self.refresh_tokens[refresh_token] = {"client_id": client_id, "resource": granted["resource"]}
        return {
            "access_token": access_token,
            "token_type": "Bearer",
            "expires_in": ACCESS_TOKEN_SECONDS,
            "refresh_token": refresh_token,
            "scope": SCOPE,
        }


def handler_for(issuer: Issuer, path: str) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 (the base class's name)
            sys.stderr.write(f"issuer: {self.address_string()} {format % args}\n")

        def answer(self, status: int, body: Any = None, headers: dict[str, str] | None = None) -> None:
            data = b"" if body is None else json.dumps(body).encode()
            self.send_response(status)
            for name, value in (headers or {}).items():
                self.send_header(name, value)
            if body is not None:
                self.send_header("Content-Type", "application/json")
                self.send_header("Cache-Control", "no-store")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def body(self) -> bytes:
            try:
                length = int(self.headers.get("Content-Length") or 0)
            except ValueError as error:
                raise OAuthError("invalid_request", "Content-Length is not a number") from error
            if not 0 <= length <= MAX_BODY:
                raise OAuthError("invalid_request", f"the body is larger than {MAX_BODY} bytes", 413)
            return self.rfile.read(length)

        def do_GET(self) -> None:  # noqa: N802 (the base class's name)
            url = urlparse(self.path)
            if url.path == f"/.well-known/oauth-authorization-server{path}":
                self.answer(200, issuer.metadata())
            elif url.path == f"{path}/jwks":
                self.answer(200, issuer.jwks())
            elif url.path == f"{path}/authorize":
                status, headers, body = issuer.authorize(parse_qs(url.query))
                self.answer(status, body, headers)
            else:
                self.answer(404, {"error": "not_found"})

        def do_POST(self) -> None:  # noqa: N802 (the base class's name)
            url = urlparse(self.path)
            try:
                if url.path == f"{path}/register":
                    try:
                        registration = json.loads(self.body() or b"null")
                    except ValueError as error:
                        raise OAuthError("invalid_client_metadata", f"the body is not JSON: {error}") from error
                    self.answer(201, issuer.register(registration))
                elif url.path == f"{path}/token":
                    form = parse_qs(self.body().decode("utf-8", "replace"), keep_blank_values=True)
                    self.answer(200, issuer.token(form))
                else:
                    self.answer(404, {"error": "not_found"})
            except OAuthError as error:
                self.answer(error.status, {"error": error.error, "error_description": error.description})

    return Handler


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--port-file", required=True, help="where the bound port is written once listening")
    parser.add_argument("--subject", required=True, help="the sub of every token (the user who approves)")
    parser.add_argument("--path", default="/idp", help="the issuer identifier's path (default /idp)")
    args = parser.parse_args()
    path = "/" + args.path.strip("/") if args.path.strip("/") else ""
    server = ThreadingHTTPServer(("127.0.0.1", 0), BaseHTTPRequestHandler)
    port = server.server_address[1]
    issuer = Issuer(f"http://127.0.0.1:{port}{path}", args.subject)
    server.RequestHandlerClass = handler_for(issuer, path)
    with open(args.port_file, "w", encoding="utf-8") as out:
        out.write(f"{port}\n")
    print(f"issuer {issuer.issuer} listening", file=sys.stderr, flush=True)
    server.serve_forever()


if __name__ == "__main__":
    main()
