// load.mjs: bounded load on loopback: `clients` concurrent streaming clients send `requests`
// requests in total (completions and chat alternating, random max_tokens). Pass: zero failed
// requests, every stream well-formed (chunks of the right object type, exactly one finish
// chunk, a final usage chunk whose completion_tokens matches the tokens asked for with
// ignore_eos), no KV page leak (pages used back to the start value), /health 200 after.
import assert from 'node:assert/strict';
import OpenAI from 'openai';
import { parseArgs, metrics, waitForMetrics } from './common.mjs';

const args = parseArgs(process.argv.slice(2));
const numClients = Number(args.clients ?? 64);
const numRequests = Number(args.requests ?? 500);
const client = new OpenAI({ baseURL: `${args.url}/v1`, apiKey: args['api-key'], maxRetries: 0, timeout: 300000 });

const before = await waitForMetrics(args.url, (m) => m.get('packserve_num_requests_running') === 0, 'idle before load');
let next = 0;
const failures = [];
let seed = 7;
const rand = (n) => { seed = (Math.imul(seed, 1664525) + 1013904223) >>> 0; return (seed >>> 8) % n; };

let totalAsked = 0;
async function one(i) {
  const maxTokens = 1 + rand(16);
  totalAsked += maxTokens;
  const chat = i % 2 === 1;
  const common = { model: 'tiny', max_tokens: maxTokens, stream: true, stream_options: { include_usage: true }, ignore_eos: true, temperature: 0.8, seed: i };
  const stream = chat
    ? await client.chat.completions.create({ ...common, messages: [{ role: 'user', content: `request ${i} ${'x'.repeat(rand(40))}` }] })
    : await client.completions.create({ ...common, prompt: `request ${i} shared prefix ${'y'.repeat(rand(40))}` });
  let finishChunks = 0;
  let usage;
  let n = 0;
  for await (const chunk of stream) {
    n++;
    assert.equal(chunk.object, chat ? 'chat.completion.chunk' : 'text_completion');
    assert.equal(usage, undefined, 'a chunk after the usage chunk');
    if (chunk.choices.length === 0) { usage = chunk.usage; continue; }
    assert.equal(chunk.usage, null);
    if (chunk.choices[0].finish_reason) {
      finishChunks++;
      assert.equal(chunk.choices[0].finish_reason, 'length');
    }
  }
  assert.equal(finishChunks, 1, `request ${i}: finish chunks`);
  assert.ok(usage, `request ${i}: no usage chunk`);
  assert.equal(usage.completion_tokens, maxTokens, `request ${i}: completion_tokens`);
  assert.equal(usage.total_tokens, usage.prompt_tokens + usage.completion_tokens);
  assert.ok(n >= 2);
}

async function worker() {
  for (;;) {
    const i = next++;
    if (i >= numRequests) return;
    try {
      await one(i);
    } catch (e) {
      failures.push(`request ${i}: ${e.stack || e}`);
    }
  }
}

const t0 = Date.now();
await Promise.all(Array.from({ length: numClients }, worker));
const seconds = (Date.now() - t0) / 1000;
console.log(`load: ${numRequests} requests, ${numClients} clients, ${seconds.toFixed(1)} s, ${failures.length} failed`);
for (const f of failures.slice(0, 10)) console.log(f);
assert.equal(failures.length, 0, 'failed requests');
const after = await waitForMetrics(args.url, (m) => m.get('packserve_num_requests_running') === 0 &&
  m.get('packserve_num_requests_waiting') === 0 &&
  m.get('packserve_kv_pages_used') === before.get('packserve_kv_pages_used'), 'no page leak after load');
assert.equal(after.get('packserve_kv_pages_used') + after.get('packserve_kv_pages_cached') + after.get('packserve_kv_pages_free'),
  after.get('packserve_kv_pages_total'), 'used + cached + free = total');
assert.equal((await fetch(`${args.url}/health`)).status, 200);
const m = await metrics(args.url);
const expectedTokens = before.get('packserve_generation_tokens_total') + totalAsked;
assert.equal(m.get('packserve_generation_tokens_total'), expectedTokens, 'generation tokens counted by the engine');
console.log(`load: ok; generation tokens total ${m.get('packserve_generation_tokens_total')}, prefix hit rate ${m.get('packserve_prefix_cache_hit_rate')}`);
