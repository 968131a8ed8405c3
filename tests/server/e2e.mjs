// e2e.mjs: the server on the tiny dummy model through the official `openai` npm client
// (driven by e2e.sh, which starts the servers). Every check compares with an oracle:
// prompt token counts with `packserve tokenize`, stop-string output with the greedy text of
// the same prompt, streams with the non-streamed result, n choices with the n = 1 result and
// the prefix cache's counters, pages with the /metrics baseline.
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import OpenAI from 'openai';
import { parseArgs, metrics, waitForMetrics, sleep, expectApiError } from './common.mjs';

const args = parseArgs(process.argv.slice(2));
const client = new OpenAI({ baseURL: `${args.url}/v1`, apiKey: args['api-key'], maxRetries: 0, timeout: 120000 });
const small = new OpenAI({ baseURL: `${args['small-url']}/v1`, apiKey: 'unused', maxRetries: 0, timeout: 120000 });
const MODEL = 'tiny';
let failures = 0;

async function check(name, fn) {
  const t0 = Date.now();
  try {
    await fn();
    console.log(`ok   ${name} (${Date.now() - t0} ms)`);
  } catch (e) {
    failures++;
    console.log(`FAIL ${name}: ${e.stack || e}`);
  }
}

// Token ids of `input` ({text} or {messages}) by packserve's own tokenizer CLI.
function tokenize(input, addSpecial) {
  const argv = ['tokenize', '--tokenizer', args.tokenizer];
  if (addSpecial) argv.push('--add-special-tokens');
  const r = spawnSync(args.packserve, argv, { input: JSON.stringify(input) + '\n', encoding: 'utf8' });
  assert.equal(r.status, 0, `packserve tokenize failed: ${r.stderr}`);
  return JSON.parse(r.stdout).ids;
}

async function collect(stream) {
  let text = '';
  const chunks = [];
  for await (const chunk of stream) {
    chunks.push(chunk);
    for (const c of chunk.choices) text += c.text ?? c.delta?.content ?? '';
  }
  return { text, chunks };
}

async function rawPost(path, body, headers = {}) {
  const res = await fetch(`${args.url}${path}`, {
    method: 'POST',
    headers: { 'Content-Type': 'application/json', Authorization: `Bearer ${args['api-key']}`, ...headers },
    body,
  });
  const text = await res.text();
  let json;
  try { json = JSON.parse(text); } catch { json = undefined; }
  return { status: res.status, json, text };
}

function checkRawError(r, status, type) {
  assert.equal(r.status, status, r.text);
  assert.ok(r.json && r.json.error, `error object expected, got ${r.text}`);
  assert.equal(r.json.error.type, type, r.text);
  assert.equal(typeof r.json.error.message, 'string');
}

const greedy = { temperature: 0, ignore_eos: true };

await check('models', async () => {
  const list = await client.models.list();
  assert.deepEqual(list.data.map((m) => m.id), [MODEL]);
});

await check('completion: token-id prompt, exact usage', async () => {
  const r = await client.completions.create({ model: MODEL, prompt: [1, 2, 3, 4], max_tokens: 5, ...greedy });
  assert.equal(r.object, 'text_completion');
  assert.equal(r.choices[0].finish_reason, 'length');
  assert.deepEqual([r.usage.prompt_tokens, r.usage.completion_tokens, r.usage.total_tokens], [4, 5, 9]);
});

await check('completion: text prompt usage = packserve tokenize', async () => {
  const prompt = 'The quick brown fox jumps over the lazy dog.';
  const r = await client.completions.create({ model: MODEL, prompt, max_tokens: 7, ...greedy });
  assert.equal(r.usage.prompt_tokens, tokenize({ text: prompt }, true).length);
  assert.equal(r.usage.completion_tokens, 7);
});

await check('chat: usage = tokenize(template(messages)), role and object', async () => {
  const messages = [{ role: 'system', content: 'Be brief.' }, { role: 'user', content: 'Hello there!' }];
  const r = await client.chat.completions.create({ model: MODEL, messages, max_completion_tokens: 6, ...greedy });
  assert.equal(r.object, 'chat.completion');
  assert.equal(r.choices[0].message.role, 'assistant');
  assert.equal(r.usage.prompt_tokens, tokenize({ messages }, false).length);
  assert.equal(r.usage.completion_tokens, 6);
  assert.equal(r.choices[0].finish_reason, 'length');
});

let greedyText = '';
const stopPrompt = 'Once upon a time';
await check('streaming completion equals the non-streamed greedy text, with usage', async () => {
  const whole = await client.completions.create({ model: MODEL, prompt: stopPrompt, max_tokens: 24, ...greedy });
  greedyText = whole.choices[0].text;
  const stream = await client.completions.create({
    model: MODEL, prompt: stopPrompt, max_tokens: 24, stream: true, stream_options: { include_usage: true }, ...greedy,
  });
  const { text, chunks } = await collect(stream);
  assert.equal(text, greedyText);
  const finish = chunks.filter((c) => c.choices.length && c.choices[0].finish_reason);
  assert.equal(finish.length, 1);
  assert.equal(finish[0].choices[0].finish_reason, 'length');
  const last = chunks[chunks.length - 1];
  assert.deepEqual(last.choices, []);
  assert.equal(last.usage.completion_tokens, 24);
  assert.equal(last.usage.prompt_tokens, whole.usage.prompt_tokens);
});

await check('streaming chat: role first, text equals non-streamed', async () => {
  const messages = [{ role: 'user', content: 'Tell me a story.' }];
  const whole = await client.chat.completions.create({ model: MODEL, messages, max_tokens: 12, ...greedy });
  const stream = await client.chat.completions.create({ model: MODEL, messages, max_tokens: 12, stream: true, ...greedy });
  const { text, chunks } = await collect(stream);
  assert.equal(chunks[0].object, 'chat.completion.chunk');
  assert.equal(chunks[0].choices[0].delta.role, 'assistant');
  assert.equal(text, whole.choices[0].message.content);
  assert.equal(chunks[chunks.length - 1].choices[0].finish_reason, 'length');
});

await check('n choices of a long prompt: the prefill is computed once, every greedy choice = n=1', async () => {
  // 400 prompt tokens (25 pages of 16): the three copies behind the first wait for its pages
  // (scheduler prefix wait) and adopt them, so the engine's cached prompt tokens grow by
  // nearly 3 x 400 (/metrics: packserve_prefix_cache_hits_total).
  const prompt = Array.from({ length: 400 }, (_, i) => 1 + ((i * 37) % 400));
  const cached = (m) => m.get('packserve_prefix_cache_hits_total');
  const before = await metrics(args.url);
  const r = await client.completions.create({ model: MODEL, prompt, n: 4, max_tokens: 8, ...greedy });
  const after = await metrics(args.url);
  assert.equal(r.choices.length, 4);
  assert.deepEqual(r.choices.map((c) => c.index), [0, 1, 2, 3]);
  assert.deepEqual([r.usage.prompt_tokens, r.usage.completion_tokens], [400, 32]);
  assert.equal(r.usage.prompt_tokens_details.cached_tokens, 0);
  assert.equal(after.get('packserve_prompt_tokens_total') - before.get('packserve_prompt_tokens_total'), 1600);
  const reused = cached(after) - cached(before);
  assert.ok(reused >= 3 * (400 - 32), `cached prompt tokens grew by ${reused}, expected >= ${3 * 368}`);
  const one = await client.completions.create({ model: MODEL, prompt, max_tokens: 8, ...greedy });
  for (const c of r.choices) assert.equal(c.text, one.choices[0].text);
});

await check('streamed batch of prompts x n: every chunk names its choice, texts equal the non-streamed ones', async () => {
  const body = { model: MODEL, prompt: ['Alpha beta', 'Gamma'], n: 2, max_tokens: 6, ...greedy };
  const whole = await client.completions.create(body);
  assert.equal(whole.choices.length, 4);
  assert.equal(whole.usage.prompt_tokens, tokenize({ text: 'Alpha beta' }, true).length + tokenize({ text: 'Gamma' }, true).length);
  assert.equal(whole.usage.completion_tokens, 24);
  assert.equal(whole.choices[0].text, whole.choices[1].text);
  assert.equal(whole.choices[2].text, whole.choices[3].text);
  const stream = await client.completions.create({ ...body, stream: true, stream_options: { include_usage: true } });
  const texts = ['', '', '', ''];
  const finishes = [0, 0, 0, 0];
  let usage;
  for await (const chunk of stream) {
    if (chunk.usage) usage = chunk.usage;
    for (const c of chunk.choices) {
      texts[c.index] += c.text;
      if (c.finish_reason) finishes[c.index]++;
    }
  }
  assert.deepEqual(texts, whole.choices.map((c) => c.text));
  assert.deepEqual(finishes, [1, 1, 1, 1]);
  assert.deepEqual([usage.prompt_tokens, usage.completion_tokens], [whole.usage.prompt_tokens, 24]);
});

await check('stop strings: output is the greedy text up to the first match', async () => {
  assert.ok(greedyText.length >= 4, `greedy text too short: ${JSON.stringify(greedyText)}`);
  // A stop string of plain ASCII from the middle of the greedy text, at its first occurrence.
  let k = -1;
  for (let i = 2; i + 2 <= greedyText.length; i++) {
    const s = greedyText.slice(i, i + 2);
    if (/^[\x21-\x7e ]{2}$/.test(s) && greedyText.indexOf(s) === i) { k = i; break; }
  }
  let stop;
  if (k < 0) {
    for (let i = 1; i < greedyText.length; i++) {
      const s = greedyText[i];
      if (/[\x21-\x7e]/.test(s) && greedyText.indexOf(s) === i) { k = i; break; }
    }
    assert.ok(k > 0, `no usable stop string in ${JSON.stringify(greedyText)}`);
    stop = greedyText[k];
  } else {
    stop = greedyText.slice(k, k + 2);
  }
  const expected = greedyText.slice(0, k);
  const r = await client.completions.create({ model: MODEL, prompt: stopPrompt, max_tokens: 24, stop: ['\u0001never', stop], ...greedy });
  assert.equal(r.choices[0].text, expected, `stop ${JSON.stringify(stop)}`);
  assert.equal(r.choices[0].finish_reason, 'stop');
  const { text, chunks } = await collect(await client.completions.create({
    model: MODEL, prompt: stopPrompt, max_tokens: 24, stop, stream: true, ...greedy,
  }));
  assert.equal(text, expected);
  assert.equal(chunks[chunks.length - 1].choices[0].finish_reason, 'stop');
});

await check('logprobs: one non-positive logprob per completion token', async () => {
  const r = await client.completions.create({ model: MODEL, prompt: 'x', max_tokens: 5, logprobs: 0, ...greedy });
  const lp = r.choices[0].logprobs;
  assert.equal(lp.token_logprobs.length, 5);
  assert.ok(lp.token_logprobs.every((v) => v <= 0), JSON.stringify(lp.token_logprobs));
});

await check('top logprobs: the greedy token is the most likely alternative, with its own logprob', async () => {
  const r = await client.completions.create({ model: MODEL, prompt: 'x', max_tokens: 5, logprobs: 3, ...greedy });
  const lp = r.choices[0].logprobs;
  assert.equal(lp.top_logprobs.length, 5);
  lp.top_logprobs.forEach((alts, i) => {
    const values = Object.values(alts);
    assert.ok(values.length >= 1 && values.length <= 3, JSON.stringify(alts));
    assert.equal(Math.max(...values), lp.token_logprobs[i]);
    assert.equal(alts[lp.tokens[i]], lp.token_logprobs[i]);
  });
  const messages = [{ role: 'user', content: 'Hi' }];
  const c = await client.chat.completions.create({ model: MODEL, messages, max_tokens: 4, logprobs: true, top_logprobs: 2, ...greedy });
  for (const t of c.choices[0].logprobs.content) {
    assert.equal(t.top_logprobs.length, 2);
    assert.equal(t.top_logprobs[0].token, t.token);
    assert.equal(t.top_logprobs[0].logprob, t.logprob);
    assert.ok(t.top_logprobs[1].logprob <= t.logprob);
  }
});

await check('penalties: the same first token, then fewer repeats than plain greedy', async () => {
  const ask = (extra) => client.completions.create({ model: MODEL, prompt: 'x', max_tokens: 24, logprobs: 0, ...greedy, ...extra });
  const repeats = (tokens) => tokens.length - new Set(tokens).size;
  const plain = (await ask({})).choices[0].logprobs;
  const penalized = (await ask({ presence_penalty: 2, frequency_penalty: 2 })).choices[0].logprobs;
  assert.equal(penalized.tokens.length, 24);
  assert.equal(penalized.tokens[0], plain.tokens[0]);
  assert.equal(penalized.token_logprobs[0], plain.token_logprobs[0]);  // raw logprobs
  assert.ok(repeats(plain.tokens) > 0, `plain greedy repeats nothing: ${JSON.stringify(plain.tokens)}`);
  assert.ok(repeats(penalized.tokens) < repeats(plain.tokens),
    `${JSON.stringify(penalized.tokens)} against ${JSON.stringify(plain.tokens)}`);
  // repetition_penalty (vLLM's extension) goes through too, and changes the text.
  const repeated = (await ask({ repetition_penalty: 1.5 })).choices[0].logprobs;
  assert.notDeepEqual(repeated.tokens, plain.tokens);
});

await check('logit_bias: +100 on one token makes every greedy token that token', async () => {
  const [id] = tokenize({ text: 'q' }, false);
  const r = await client.completions.create({ model: MODEL, prompt: 'x', max_tokens: 5, logprobs: 0, logit_bias: { [id]: 100 }, ...greedy });
  assert.deepEqual(r.choices[0].logprobs.tokens, Array(5).fill('q'));
  assert.equal(r.choices[0].text, 'qqqqq');
});

await check('tools: a named choice is its call, whole and streamed alike; required a list of one', async () => {
  const tools = [{ type: 'function', function: { name: 'get_weather',
    parameters: { type: 'object', properties: { city: { enum: ['Paris', 'Oslo'] } }, required: ['city'] } } }];
  const messages = [{ role: 'user', content: 'Weather?' }];  // the tools take most of the 512-token context
  const named = { type: 'function', function: { name: 'get_weather' } };
  // The random model would fill the JSON with the whitespace the grammar allows between tokens.
  const noSpace = Object.fromEntries([' ', '\n', '\r', '\t'].flatMap((c) => tokenize({ text: c }, false)).map((id) => [id, -100]));
  const ask = (extra) => client.chat.completions.create({ model: MODEL, messages, tools, max_tokens: 48, logit_bias: noSpace, ...greedy, ...extra });
  const whole = await ask({ tool_choice: named });
  const message = whole.choices[0].message;
  assert.equal(whole.choices[0].finish_reason, 'stop', JSON.stringify(whole.choices[0]));
  assert.equal(message.content, null);
  assert.equal(message.tool_calls.length, 1);
  assert.match(message.tool_calls[0].id, /^call_[A-Za-z0-9]{24}$/);
  assert.equal(message.tool_calls[0].type, 'function');
  assert.equal(message.tool_calls[0].function.name, 'get_weather');
  assert.ok(['Paris', 'Oslo'].includes(JSON.parse(message.tool_calls[0].function.arguments).city));
  let args = '';
  let names = [];
  for await (const chunk of await ask({ tool_choice: named, stream: true })) {
    for (const call of chunk.choices[0]?.delta?.tool_calls ?? []) {
      assert.equal(call.index, 0);
      if (call.function?.name) names.push(call.function.name);
      args += call.function?.arguments ?? '';
    }
  }
  assert.deepEqual(names, ['get_weather']);
  assert.equal(args, message.tool_calls[0].function.arguments);
  // The SDK's own stream accumulator assembles the same message from the deltas.
  const runner = client.chat.completions.stream({ model: MODEL, messages, tools, max_tokens: 48, logit_bias: noSpace, ...greedy, tool_choice: named });
  const final = await runner.finalChatCompletion();
  assert.equal(final.choices[0].message.tool_calls.length, 1);
  assert.equal(final.choices[0].message.tool_calls[0].id.length, 29);
  assert.equal(final.choices[0].message.tool_calls[0].function.name, 'get_weather');
  assert.equal(final.choices[0].message.tool_calls[0].function.arguments, message.tool_calls[0].function.arguments);
  // The call in the model's own syntax (ChatML: a <tool_call> block) takes more tokens: the rest of the context.
  const required = await ask({ tool_choice: 'required', parallel_tool_calls: false, max_tokens: undefined });
  assert.equal(required.choices[0].finish_reason, 'tool_calls');
  const calls = required.choices[0].message.tool_calls;
  assert.equal(calls.length, 1);
  assert.equal(calls[0].function.name, 'get_weather');
  assert.ok(['Paris', 'Oslo'].includes(JSON.parse(calls[0].function.arguments).city));
  // Streamed through the SDK's accumulator: the call whole once its block closes, the same one.
  const streamed = await client.chat.completions.stream({ model: MODEL, messages, tools, logit_bias: noSpace, ...greedy,
    tool_choice: 'required', parallel_tool_calls: false }).finalChatCompletion();
  assert.equal(streamed.choices[0].finish_reason, 'tool_calls');
  assert.deepEqual(streamed.choices[0].message.tool_calls.map((c) => c.function), calls.map((c) => c.function));
});

await check('a client that aborts a stream: request cancelled, KV pages back to baseline', async () => {
  const base = await waitForMetrics(args.url, (m) => m.get('packserve_num_requests_running') === 0, 'idle before abort');
  const pagesBase = base.get('packserve_kv_pages_used');
  const cancelledBase = base.get('packserve_requests_finished_total{reason="cancelled"}');
  const stream = await client.completions.create({ model: MODEL, prompt: 'abort me', max_tokens: 400, stream: true, ...greedy });
  let n = 0;
  let midway;
  for await (const chunk of stream) {
    void chunk;
    if (++n === 3) {
      midway = await metrics(args.url);
      stream.controller.abort();
      break;
    }
  }
  assert.equal(n, 3);
  assert.ok(midway.get('packserve_kv_pages_used') > pagesBase, 'the stream held pages while running');
  await waitForMetrics(args.url, (m) => m.get('packserve_kv_pages_used') === pagesBase &&
    m.get('packserve_num_requests_running') === 0 &&
    m.get('packserve_requests_finished_total{reason="cancelled"}') === cancelledBase + 1, 'pages back after abort');
});

await check('errors: status, type and param for each case', async () => {
  checkRawError(await rawPost('/v1/completions', '{"model": "tiny", "prompt": '), 400, 'invalid_request_error');
  checkRawError(await rawPost('/v1/completions', '{"model":"tiny","prompt":"x","temperature":NaN}'), 400, 'invalid_request_error');
  await expectApiError(client.completions.create({ model: MODEL }), 400, 'invalid_request_error', 'prompt');
  await expectApiError(client.chat.completions.create({ model: MODEL }), 400, 'invalid_request_error', 'messages');
  await expectApiError(client.completions.create({ model: MODEL, prompt: 'x', max_tokens: 'ten' }), 400, 'invalid_request_error', 'max_tokens');
  await expectApiError(client.completions.create({ model: MODEL, prompt: 'x', max_tokens: 0 }), 400, 'invalid_request_error', 'max_tokens');
  await expectApiError(client.completions.create({ model: MODEL, prompt: 'x', temperature: -1 }), 400, 'invalid_request_error', 'temperature');
  await expectApiError(client.completions.create({ model: MODEL, prompt: Array(600).fill(1) }), 400, 'invalid_request_error', 'prompt');
  await expectApiError(client.completions.create({ model: MODEL, prompt: 'x', max_tokens: 600 }), 400, 'invalid_request_error', 'max_tokens');
  await expectApiError(client.completions.create({ model: MODEL, prompt: 'x', n: 129 }), 400, 'invalid_request_error', 'n');
  await expectApiError(client.completions.create({ model: MODEL, prompt: 'x', logprobs: 21 }), 400, 'invalid_request_error', 'logprobs');
  await expectApiError(client.chat.completions.create({ model: MODEL, messages: [{ role: 'user', content: 'x' }], top_logprobs: 2 }), 400, 'invalid_request_error', 'top_logprobs');
  await expectApiError(client.completions.create({ model: MODEL, prompt: ['x', 'y'], n: 2, best_of: 3 }), 400, 'invalid_request_error', 'best_of');
  await expectApiError(client.completions.create({ model: MODEL, prompt: [[1, 2], Array(600).fill(1)], n: 2 }), 400, 'invalid_request_error', 'prompt[1]');
  await expectApiError(client.completions.create({ model: MODEL, prompt: 'x', presence_penalty: 2.5 }), 400, 'invalid_request_error', 'presence_penalty');
  await expectApiError(client.chat.completions.create({ model: MODEL, messages: [{ role: 'user', content: 'x' }], frequency_penalty: -3 }), 400, 'invalid_request_error', 'frequency_penalty');
  await expectApiError(client.completions.create({ model: MODEL, prompt: 'x', repetition_penalty: 0 }), 400, 'invalid_request_error', 'repetition_penalty');
  await expectApiError(client.completions.create({ model: MODEL, prompt: 'x', logit_bias: { 10000000: 1 } }), 400, 'invalid_request_error', 'logit_bias[10000000]');
  await expectApiError(client.completions.create({ model: MODEL, prompt: 'x', logit_bias: { 5: 200 } }), 400, 'invalid_request_error', 'logit_bias[5]');
  await expectApiError(client.completions.create({ model: 'gpt-4o', prompt: 'x' }), 404, 'not_found_error', 'model');
  const wrongKey = new OpenAI({ baseURL: `${args.url}/v1`, apiKey: 'wrong', maxRetries: 0 });
  await expectApiError(wrongKey.completions.create({ model: MODEL, prompt: 'x' }), 401, 'authentication_error');
  checkRawError(await rawPost('/v1/completions', JSON.stringify({ model: MODEL, prompt: 'y'.repeat(100000) })), 413, 'invalid_request_error');
  const health = await fetch(`${args.url}/health`);
  assert.equal(health.status, 200);
});

await check('malformed bodies over HTTP: every answer 4xx with an error object', async () => {
  let seed = 12345;
  const rand = (n) => { seed = (Math.imul(seed, 1664525) + 1013904223) >>> 0; return (seed >>> 8) % n; };
  const valid = JSON.stringify({ model: MODEL, prompt: 'hi', max_tokens: 2, stop: ['a'] });
  for (let i = 0; i < 150; i++) {
    let body;
    switch (i % 5) {
      case 0: body = Buffer.from(Array.from({ length: rand(100) }, () => rand(256))); break;
      case 1: body = valid.slice(0, rand(valid.length)); break;
      case 2: { const d = 1 + rand(50000); body = '{"model":"tiny","prompt":' + '['.repeat(d) + ']'.repeat(d) + '}'; break; }
      case 3: body = Buffer.concat([Buffer.from('{"model":"tiny","prompt":"'), Buffer.from([0xff, 0xc3, rand(256)]), Buffer.from('"}')]); break;
      default: body = `{"model":"tiny","prompt":"x","max_tokens":1${'0'.repeat(12 + rand(400))}}`;
    }
    const r = await rawPost('/v1/completions', body);
    assert.ok(r.status >= 400 && r.status < 500, `case ${i}: status ${r.status}: ${r.text.slice(0, 200)}`);
    assert.ok(r.json && r.json.error, `case ${i}: no error object: ${r.text.slice(0, 200)}`);
  }
  assert.equal((await fetch(`${args.url}/health`)).status, 200);
});

await check('429 when the waiting queue is full (small server: 1 running, 1 waiting)', async () => {
  const streams = [];
  const results = await Promise.allSettled(Array.from({ length: 6 }, () =>
    small.completions.create({ model: MODEL, prompt: 'queue', max_tokens: 1500, stream: true, ...greedy })));
  let rejected = 0;
  for (const r of results) {
    if (r.status === 'fulfilled') { streams.push(r.value); continue; }
    assert.equal(r.reason.status, 429, String(r.reason));
    assert.equal(r.reason.type, 'rate_limit_error');
    rejected++;
  }
  for (const s of streams) s.controller.abort();
  assert.ok(rejected >= 1, 'no request was refused with 429');
  await waitForMetrics(args['small-url'], (m) => m.get('packserve_num_requests_running') === 0 &&
    m.get('packserve_num_requests_waiting') === 0 && m.get('packserve_kv_pages_used') === 0, 'small server idle after 429 test');
});

await check('SIGTERM: new requests 503 while a live stream finishes, then exit', async () => {
  const stream = await small.completions.create({ model: MODEL, prompt: 'drain', max_tokens: 1500, stream: true, ...greedy });
  const it = stream[Symbol.asyncIterator]();
  const first = await it.next();
  assert.ok(!first.done);
  process.kill(Number(args['small-pid']), 'SIGTERM');
  await sleep(300);
  await expectApiError(small.completions.create({ model: MODEL, prompt: 'late', max_tokens: 2 }), 503, 'service_unavailable_error');
  assert.equal((await fetch(`${args['small-url']}/health`)).status, 503);
  let last = first.value;
  for (let r = await it.next(); !r.done; r = await it.next()) last = r.value;
  assert.equal(last.choices[0].finish_reason, 'length', 'the in-flight stream finished within the grace period');
});

if (failures) {
  console.log(`${failures} check(s) failed`);
  process.exit(1);
}
console.log('e2e: all checks passed');
