// The interop steps both TypeScript clients run after connecting. The v1 (`@modelcontextprotocol/sdk`) and
// v2 (`@modelcontextprotocol/client`) `Client` classes share these method names; `era` ('legacy' or
// 'modern') selects the error codes that differ between protocol revisions.
//
// Steps that need more than requests live in the client scripts, since the two SDKs register notification
// handlers differently: the subscription step (subscribe or listen, change a resource through `admin`, wait
// for the notification) is in legacy.mjs and modern.mjs.

import { check, equal, expectRpcError, expected, sameBytes, sameSet } from './common.mjs';

async function listAll(client, method, field) {
  const items = [];
  let cursor;
  for (let page = 0; page < 50; page++) {
    const result = await client[method](cursor === undefined ? undefined : { cursor });
    check(Array.isArray(result?.[field]), `${method}: the result has no "${field}" array`);
    items.push(...result[field]);
    cursor = result.nextCursor;
    if (!cursor) return items;
  }
  throw new Error(`${method}: still paging after 50 pages`);
}

export function coreSteps(client, era) {
  return [
    [
      'resources/list',
      async () => {
        const resources = await listAll(client, 'listResources', 'resources');
        sameSet(
          resources.map((r) => r.uri),
          expected.listedResources,
          'resources/list URIs'
        );
        const text = resources.find((r) => r.uri === expected.textResource.uri);
        equal(text.mimeType, expected.textResource.mimeType, `mimeType of ${text.uri} in resources/list`);
        check(typeof text.name === 'string' && text.name.length > 0, `${text.uri} has no name in resources/list`);
      }
    ],
    [
      'resources/read (text)',
      async () => {
        const { uri, mimeType, text } = expected.textResource;
        const result = await client.readResource({ uri });
        equal(result.contents?.length, 1, `number of contents of ${uri}`);
        equal(
          { uri: result.contents[0].uri, mimeType: result.contents[0].mimeType, text: result.contents[0].text },
          { uri, mimeType, text },
          `contents of ${uri}`
        );
      }
    ],
    [
      'resources/read (binary, exact bytes)',
      async () => {
        for (const { uri, mimeType, blob } of expected.binaryResources) {
          const result = await client.readResource({ uri });
          equal(result.contents?.length, 1, `number of contents of ${uri}`);
          const [content] = result.contents;
          equal(content.uri, uri, `uri of the contents of ${uri}`);
          equal(content.mimeType, mimeType, `mimeType of ${uri}`);
          check(content.text === undefined, `${uri} was answered as text, not as a blob`);
          sameBytes(content.blob, blob, `bytes of ${uri}`);
        }
      }
    ],
    [
      'resources/templates/list',
      async () => {
        const templates = await listAll(client, 'listResourceTemplates', 'resourceTemplates');
        sameSet(
          templates.map((t) => t.uriTemplate),
          expected.listedTemplates,
          'resources/templates/list uriTemplates'
        );
      }
    ],
    [
      'resources/read (template)',
      async () => {
        const { uri, mimeType, text } = expected.templateRead;
        const result = await client.readResource({ uri });
        equal(result.contents?.length, 1, `number of contents of ${uri}`);
        equal(
          { uri: result.contents[0].uri, mimeType: result.contents[0].mimeType, text: result.contents[0].text },
          { uri, mimeType, text },
          `contents of ${uri}`
        );
      }
    ],
    [
      'prompts/list',
      async () => {
        const prompts = await listAll(client, 'listPrompts', 'prompts');
        sameSet(
          prompts.map((p) => p.name),
          expected.listedPrompts,
          'prompts/list names'
        );
        const withArgs = prompts.find((p) => p.name === expected.prompt.name);
        equal(
          withArgs.arguments?.map((a) => [a.name, a.required === true]),
          [
            ['arg1', true],
            ['arg2', true]
          ],
          `arguments of ${expected.prompt.name}`
        );
        check(
          withArgs.arguments.every((a) => a.completions === undefined),
          `prompts/list shows the admin-only "completions" of ${expected.prompt.name}`
        );
      }
    ],
    [
      'prompts/get (with arguments)',
      async () => {
        const { name, arguments: args, messages } = expected.prompt;
        const result = await client.getPrompt({ name, arguments: args });
        equal(
          result.messages?.map((m) => ({ role: m.role, content: m.content })),
          messages,
          `messages of ${name}`
        );
      }
    ],
    [
      'completion/complete (prompt argument)',
      async () => {
        const { ref, argument, values } = expected.promptCompletion;
        const result = await client.complete({ ref, argument });
        sameSet(result.completion?.values, values, `completions of ${ref.name}.${argument.name}="${argument.value}"`);
      }
    ],
    [
      'completion/complete (template variable)',
      async () => {
        const { ref, argument, values } = expected.templateCompletion;
        const result = await client.complete({ ref, argument });
        sameSet(result.completion?.values, values, `completions of ${ref.uri} {${argument.name}}="${argument.value}"`);
      }
    ],
    [
      'error: unknown resource',
      async () => {
        const uri = expected.missingResource;
        const code = expected.notFoundCode[era];
        const error = await expectRpcError(client.readResource({ uri }), code, `resources/read ${uri}`);
        equal(error.data?.uri, uri, 'data.uri of the not-found error');
      }
    ],
    [
      'error: missing prompt argument',
      async () => {
        const { name, arguments: args } = expected.promptMissingArgument;
        await expectRpcError(
          client.getPrompt({ name, arguments: args }),
          expected.invalidParamsCode,
          `prompts/get ${name} without arg2`
        );
      }
    ]
  ];
}
