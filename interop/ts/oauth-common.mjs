// What the TypeScript SDK's OAuth clients (oauth.mjs, oauth-external.mjs) share: the SDK's OAuthClientProvider
// in memory, which hands the authorization URL to the script's user, and the list-and-read step that proves
// an access token works on the agent.

import { UnauthorizedError } from '@modelcontextprotocol/sdk/client/auth.js';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';

// Never listened on: the scripts play the user and read the redirect's Location themselves.
export const CALLBACK = 'http://127.0.0.1:9/callback';
export const EXPECTED_URI = 'test://static-text';

export function env(name) {
  const value = process.env[name];
  if (!value) {
    console.error(`interop: ${name} is not set (interop/run sets it)`);
    process.exit(2);
  }
  return value;
}

/**
 * The SDK's OAuthClientProvider, in memory. `visit(authorizationUrl)` plays the user and resolves to the query
 * of the redirect to CALLBACK, kept in `redirect`.
 */
export class Provider {
  constructor(visit) {
    this.visit = visit;
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
    this.redirect = await this.visit(authorizationUrl);
  }
  saveCodeVerifier(verifier) {
    this.saved.verifier = verifier;
  }
  codeVerifier() {
    return this.saved.verifier;
  }
}

/** Connects with the provider's tokens, lists the agent's resources and reads EXPECTED_URI; its text. */
export async function listAndRead(url, provider) {
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

/**
 * The authorization flow: a connection without tokens is refused (401), the SDK discovers the authorization
 * server and sends the user to it (`provider.visit`), and the redirect's code is exchanged (PKCE). The redirect
 * must carry our `state` and `iss` = `issuer` (RFC 9207).
 */
export async function authorize(url, provider, issuer) {
  const first = new StreamableHTTPClientTransport(url, { authProvider: provider });
  try {
    await new Client({ name: 'hivegate-interop-oauth', version: '1.0.0' }).connect(first);
    throw new Error('connected without authorization');
  } catch (error) {
    if (!(error instanceof UnauthorizedError)) throw error;
  }
  const redirect = provider.redirect;
  if (!redirect?.get('code')) throw new Error('the user was not sent to the authorization server');
  if (redirect.get('state') !== provider.saved.state) throw new Error(`state ${redirect.get('state')} is not ours`);
  if (redirect.get('iss') !== issuer) throw new Error(`iss ${redirect.get('iss')} is not ${issuer}`);
  await first.finishAuth(redirect.get('code'));
}
