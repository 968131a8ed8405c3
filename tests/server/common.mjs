// common.mjs: helpers shared by the server's e2e and load scripts.
import assert from 'node:assert/strict';

export function parseArgs(argv) {
  const args = {};
  for (let i = 0; i < argv.length; i += 2) {
    if (!argv[i].startsWith('--')) throw new Error(`unexpected argument ${argv[i]}`);
    args[argv[i].slice(2)] = argv[i + 1];
  }
  return args;
}

// Prometheus text -> Map of "name{labels}" -> number.
export async function metrics(url) {
  const res = await fetch(`${url}/metrics`);
  assert.equal(res.status, 200, '/metrics status');
  const out = new Map();
  for (const line of (await res.text()).split('\n')) {
    if (!line || line.startsWith('#')) continue;
    const cut = line.lastIndexOf(' ');
    out.set(line.slice(0, cut), Number(line.slice(cut + 1)));
  }
  return out;
}

export const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

// Polls /metrics until pred(metrics) holds; fails with `what` and the last values after timeout.
export async function waitForMetrics(url, pred, what, timeoutMs = 15000) {
  const t0 = Date.now();
  let m;
  while (Date.now() - t0 < timeoutMs) {
    m = await metrics(url);
    if (pred(m)) return m;
    await sleep(100);
  }
  const keys = ['packserve_kv_pages_used', 'packserve_num_requests_running',
                'packserve_num_requests_waiting'];
  throw new Error(`${what}: not reached in ${timeoutMs} ms; ${keys.map((k) => `${k}=${m.get(k)}`).join(' ')}`);
}

// Checks an OpenAI error thrown by the client: status, error type and param.
export function checkApiError(err, status, type, param) {
  assert.ok(err && err.status !== undefined, `expected an APIError, got ${err}`);
  assert.equal(err.status, status, `status of ${err.message}`);
  assert.equal(err.type, type, `error type of ${err.message}`);
  if (param !== undefined) assert.equal(err.param, param, `param of ${err.message}`);
}

export async function expectApiError(promise, status, type, param) {
  let err;
  try {
    await promise;
  } catch (e) {
    err = e;
  }
  assert.ok(err, `expected HTTP ${status} ${type}, the request succeeded`);
  checkApiError(err, status, type, param);
  return err;
}
