// The official TypeScript SDK's OAuth client (`@modelcontextprotocol/sdk`, an OAuthClientProvider given to
// StreamableHTTPClientTransport) against hivegate's built-in authorization server.
//
// Connects to INTEROP_OAUTH_MCP_URL without a key: the SDK is answered 401, discovers the agent's Protected
// Resource Metadata and the authorization server's metadata, registers itself (Dynamic Client Registration)
// and sends the user to the authorize page. This script plays the user: it opens that page over HTTP, pastes
// the agent's `mcp` key (INTEROP_OAUTH_KEY) into the consent form, allows, and hands the redirect's code to
// `transport.finishAuth`, which exchanges it (PKCE). Then it lists and reads the agent's resources, refreshes
// through the SDK's `auth()` (rotation), lists and reads again, and checks the rotated refresh token is refused.

import { auth } from '@modelcontextprotocol/sdk/client/auth.js';

import { CALLBACK, Provider, authorize, env, listAndRead } from './oauth-common.mjs';

const url = new URL(env('INTEROP_OAUTH_MCP_URL'));
const key = env('INTEROP_OAUTH_KEY');

/** HTML character references as the consent page writes them. */
function unescape(text) {
  return text.replace(/&(#x[0-9a-fA-F]+|#[0-9]+|amp|lt|gt|quot);/g, (_, entity) => {
    if (entity.startsWith('#x')) return String.fromCodePoint(parseInt(entity.slice(2), 16));
    if (entity.startsWith('#')) return String.fromCodePoint(parseInt(entity.slice(1), 10));
    return { amp: '&', lt: '<', gt: '>', quot: '"' }[entity];
  });
}

/** The key's owner on the authorize page: opens it, pastes the key, allows; keeps the redirect's code. */
async function consent(authorizationUrl) {
  const page = await fetch(authorizationUrl, { redirect: 'manual' });
  const html = await page.text();
  if (page.status !== 200) throw new Error(`the authorize page answered ${page.status}: ${html.slice(0, 500)}`);
  const form = new URLSearchParams();
  for (const match of html.matchAll(/<input type="hidden" name="([^"]*)" value="([^"]*)">/g)) {
    form.append(unescape(match[1]), unescape(match[2]));
  }
  if (!form.has('form_token')) throw new Error(`the authorize page has no consent form: ${html.slice(0, 500)}`);
  form.append('api_key', key);
  form.append('decision', 'allow');
  const answer = await fetch(new URL('/oauth/authorize', authorizationUrl), {
    method: 'POST',
    body: form,
    redirect: 'manual'
  });
  const location = answer.headers.get('location') ?? '';
  if (answer.status !== 303 || !location.startsWith(CALLBACK)) {
    throw new Error(`consent answered ${answer.status} ${location}: ${(await answer.text()).slice(0, 500)}`);
  }
  return new URL(location).searchParams;
}

const provider = new Provider(consent);
await authorize(url, provider, url.origin);
const tokens = provider.tokens();
if (!tokens?.access_token?.startsWith('hgat_') || !tokens.refresh_token) {
  throw new Error(`unexpected tokens after the flow: ${JSON.stringify(Object.keys(tokens ?? {}))}`);
}
console.log(`flow ok: client ${provider.saved.client.client_id}, read ${JSON.stringify(await listAndRead(url, provider))}`);

// Refresh through the SDK: with a refresh token at hand, auth() rotates it.
const outcome = await auth(provider, { serverUrl: url });
const rotated = provider.tokens();
if (outcome !== 'AUTHORIZED' || rotated.access_token === tokens.access_token || rotated.refresh_token === tokens.refresh_token) {
  throw new Error(`the SDK did not refresh (or the refresh token was not rotated): ${outcome}`);
}
await listAndRead(url, provider);
if (provider.consents !== 1) throw new Error(`the user was asked ${provider.consents} times`);
console.log('refresh ok: new access and refresh tokens; list and read again');

const replay = await fetch(new URL('/oauth/token', url), {
  method: 'POST',
  body: new URLSearchParams({
    grant_type: 'refresh_token',
    refresh_token: tokens.refresh_token,
    client_id: provider.saved.client.client_id
  })
});
const body = await replay.json();
if (replay.status !== 400 || body.error !== 'invalid_grant') {
  throw new Error(`the rotated refresh token was not refused: ${replay.status} ${JSON.stringify(body)}`);
}
console.log('old refresh token refused: ok');
