// The official TypeScript SDK's OAuth client (`@modelcontextprotocol/sdk`, an OAuthClientProvider given to
// StreamableHTTPClientTransport) against hivegate with an external authorization server
// (`oauth.mode = "external"`): python/issuer.py, run beside it by interop/run.
//
// As the operator it grants the issuer's subject INTEROP_EXTERNAL_SUBJECT on the agent as its `mcp` key
// INTEROP_EXTERNAL_KEY_ID. Then it connects to INTEROP_EXTERNAL_MCP_URL without a key: the SDK is answered 401,
// reads the agent's Protected Resource Metadata, which names the external issuer (INTEROP_EXTERNAL_ISSUER),
// discovers that server's metadata, registers itself there and sends the user to its authorize endpoint, which
// approves at once and redirects with a code; `transport.finishAuth` exchanges it (PKCE, `resource` = the
// agent's MCP URL) for a JWT access token, which hivegate checks against the issuer's JWKS. The script lists
// and reads the agent's resources, refreshes through the SDK's `auth()` (the issuer signs refreshed tokens with
// its other key), lists and reads again, then withdraws the grant and checks the token is refused (403).

import { auth } from '@modelcontextprotocol/sdk/client/auth.js';

import { CALLBACK, Provider, authorize, env, listAndRead } from './oauth-common.mjs';

const url = new URL(env('INTEROP_EXTERNAL_MCP_URL'));
const issuer = env('INTEROP_EXTERNAL_ISSUER');
const subject = env('INTEROP_EXTERNAL_SUBJECT');
const keyId = env('INTEROP_EXTERNAL_KEY_ID');
const agent = url.pathname.split('/')[1];
const grantUrl = `${env('INTEROP_EXTERNAL_ADMIN_URL')}/agents/${agent}/oauth-subjects/${encodeURIComponent(subject)}`;
const operator = { Authorization: `Bearer ${env('HIVEGATE_ADMIN_TOKEN')}` };

/** The user at the issuer's authorize endpoint, which approves without asking: the redirect's query. */
async function visit(authorizationUrl) {
  if (!authorizationUrl.href.startsWith(`${issuer}/authorize?`)) {
    throw new Error(`sent to ${authorizationUrl}, not to the external issuer's authorize endpoint`);
  }
  const answer = await fetch(authorizationUrl, { redirect: 'manual' });
  const location = answer.headers.get('location') ?? '';
  if (answer.status !== 302 || !location.startsWith(CALLBACK)) {
    throw new Error(`the authorize endpoint answered ${answer.status} ${location}: ${await answer.text()}`);
  }
  return new URL(location).searchParams;
}

/** The token's header and claims, unverified (hivegate verified it), compared with what the issuer makes. */
function checkToken(token, alg) {
  const [header, claims] = token
    .split('.')
    .slice(0, 2)
    .map((part) => JSON.parse(Buffer.from(part, 'base64url').toString('utf8')));
  const seen = { alg: header.alg, iss: claims.iss, sub: claims.sub, aud: claims.aud };
  const wanted = { alg, iss: issuer, sub: subject, aud: url.href };
  if (JSON.stringify(seen) !== JSON.stringify(wanted)) {
    throw new Error(`the access token is not what the issuer should have made: ${JSON.stringify(seen)}`);
  }
}

const granted = await fetch(grantUrl, {
  method: 'PUT',
  headers: { ...operator, 'Content-Type': 'application/json' },
  body: JSON.stringify({ keyId })
});
const grant = await granted.json();
if (![200, 201].includes(granted.status) || grant.issuer !== issuer || grant.subject !== subject) {
  throw new Error(`granting the subject answered ${granted.status}: ${JSON.stringify(grant)}`);
}
console.log(`grant ok: subject ${JSON.stringify(subject)} of ${issuer} acts as key ${keyId}`);

const provider = new Provider(visit);
await authorize(url, provider, issuer);
const tokens = provider.tokens();
if (!tokens?.access_token || !tokens.refresh_token) {
  throw new Error(`unexpected tokens after the flow: ${JSON.stringify(Object.keys(tokens ?? {}))}`);
}
checkToken(tokens.access_token, 'ES256');
const text = await listAndRead(url, provider);
console.log(`flow ok: client ${provider.saved.client.client_id}, read ${JSON.stringify(text)}`);

const outcome = await auth(provider, { serverUrl: url });
const refreshed = provider.tokens();
if (outcome !== 'AUTHORIZED' || refreshed.access_token === tokens.access_token) {
  throw new Error(`the SDK did not refresh: ${outcome}`);
}
checkToken(refreshed.access_token, 'RS256');
await listAndRead(url, provider);
if (provider.consents !== 1) throw new Error(`the user was sent to the authorize endpoint ${provider.consents} times`);
console.log("refresh ok: a token signed with the issuer's other key; list and read again");

const withdrawn = await fetch(grantUrl, { method: 'DELETE', headers: operator });
if (withdrawn.status !== 204) throw new Error(`withdrawing the grant answered ${withdrawn.status}`);
const refused = await fetch(url, {
  method: 'POST',
  headers: {
    Authorization: `Bearer ${refreshed.access_token}`,
    Accept: 'application/json, text/event-stream',
    'Content-Type': 'application/json'
  },
  body: JSON.stringify({ jsonrpc: '2.0', id: 1, method: 'ping' })
});
if (refused.status !== 403) {
  throw new Error(`a token of a withdrawn subject answered ${refused.status}: ${await refused.text()}`);
}
console.log("grant withdrawn: the subject's token is refused (403)");
