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
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import { UnauthorizedError } from '@modelcontextprotocol/sdk/client/auth.js';

const CALLBACK = 'http://127.0.0.1:9/callback';
const EXPECTED_URI = 'test://static-text';

function env(name) {
  const value = process.env[name];
  if (!value) {
    console.error(`interop: ${name} is not set (interop/run sets it)`);
    process.exit(2);
  }
  return value;
}

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

/** The SDK's OAuthClientProvider, in memory. */
class Provider {
  constructor() {
    this.saved = {};
    this.consents = 0;
    this.redirect = undefined;
  }
  get redirectUrl() {
    return CALLBACK;
  }
  get clientMetadata() {
    return {
      client_name: 'hivegate interop (TypeScript SDK)',
      redirect_uris: [CALLBACK],
      grant_types: ['authorization_code', 'refresh_token'],
      response_types: ['code'],
      token_endpoint_auth_method: 'none',
      scope: 'mcp'
    };
  }
  state() {
    this.saved.state = crypto.randomUUID();
    return this.saved.state;
  }
  clientInformation() {
    return this.saved.client;
  }
  saveClientInformation(client) {
    this.saved.client = client;
  }
  tokens() {
    return this.saved.tokens;
  }
  saveTokens(tokens) {
    this.saved.tokens = tokens;
  }
  async redirectToAuthorization(authorizationUrl) {
    this.consents += 1;
    this.redirect = await consent(authorizationUrl);
  }
  saveCodeVerifier(verifier) {
    this.saved.verifier = verifier;
  }
  codeVerifier() {
    return this.saved.verifier;
  }
}

async function listAndRead(provider) {
  const client = new Client({ name: 'hivegate-interop-oauth', version: '1.0.0' });
  await client.connect(new StreamableHTTPClientTransport(url, { authProvider: provider }));
  const { resources } = await client.listResources();
  const uris = resources.map((resource) => resource.uri);
  if (!uris.includes(EXPECTED_URI)) throw new Error(`${EXPECTED_URI} is not listed: ${uris}`);
  const { contents } = await client.readResource({ uri: EXPECTED_URI });
  if (!contents[0]?.text) throw new Error(`reading ${EXPECTED_URI} gave ${JSON.stringify(contents)}`);
  await client.close();
  return contents[0].text;
}

const provider = new Provider();
const first = new StreamableHTTPClientTransport(url, { authProvider: provider });
try {
  await new Client({ name: 'hivegate-interop-oauth', version: '1.0.0' }).connect(first);
  throw new Error('connected without authorization');
} catch (error) {
  if (!(error instanceof UnauthorizedError)) throw error;
}
const redirect = provider.redirect;
if (!redirect?.get('code')) throw new Error('the user was not sent to the authorize page');
if (redirect.get('state') !== provider.saved.state) throw new Error(`state ${redirect.get('state')} is not ours`);
if (redirect.get('iss') !== url.origin) throw new Error(`iss ${redirect.get('iss')} is not ${url.origin}`);
await first.finishAuth(redirect.get('code'));
const tokens = provider.tokens();
if (!tokens?.access_token?.startsWith('hgat_') || !tokens.refresh_token) {
  throw new Error(`unexpected tokens after the flow: ${JSON.stringify(Object.keys(tokens ?? {}))}`);
}
console.log(`flow ok: client ${provider.saved.client.client_id}, read ${JSON.stringify(await listAndRead(provider))}`);

// Refresh through the SDK: with a refresh token at hand, auth() rotates it.
const outcome = await auth(provider, { serverUrl: url });
const rotated = provider.tokens();
if (outcome !== 'AUTHORIZED' || rotated.access_token === tokens.access_token || rotated.refresh_token === tokens.refresh_token) {
  throw new Error(`the SDK did not refresh (or the refresh token was not rotated): ${outcome}`);
}
await listAndRead(provider);
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
