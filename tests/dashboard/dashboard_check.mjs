#!/usr/bin/env node
// Browser check of the orchestrator's operator dashboard, run by the C++ test harness against a
// real `trellis run` (the contract it checks: ids and data-* attributes of
// src/orchestrator/dashboard/). It drives Debian's chromium through playwright-core (installed
// beside this file by `npm ci --prefix tests/dashboard`; no Playwright browser download) and:
//   a. without credentials, /dashboard and /dashboard/api/summary answer 401, also to a browser;
//   b. with the trainer token as Basic password, every --nodes address gets a row, with no
//      uncaught page error and no Content-Security-Policy violation at any point;
//   c. the reward plot gains a point while we watch (the run trains on), and the broadcast plot
//      shows each step's download beside the whole file's size;
//   d. a rejected submission opens with its reason (containing --reason-contains) and checks;
//   e. a node's logs button shows its log (or the server's error) in #node-logs;
//   f. the ledger verifies and lists entries;
//   g. no hostile string from the server ran as script (window.__pwned stays undefined), and the
//      --injected text (a node's agent state that is markup), when given, shows as plain text.
// Screenshots of each part go to --screenshots. Prints "dashboard: ..." progress lines; on the
// first failure prints "dashboard check failed: ..." and exits 1; exits 0 when all pass.
//
//   node tests/dashboard/dashboard_check.mjs --url http://127.0.0.1:PORT --token TOKEN \
//     --nodes ADDR1,ADDR2 --reason-contains TEXT --screenshots DIR \
//     [--injected TEXT] [--chromium /usr/bin/chromium] [--timeout-s 240]

import { mkdirSync } from 'node:fs';
import { createRequire } from 'node:module';
import path from 'node:path';

const USAGE = `usage: node dashboard_check.mjs --url URL --token TOKEN --nodes ADDR[,ADDR...]
       --reason-contains TEXT --screenshots DIR [--injected TEXT] [--chromium PATH]
       [--timeout-s SECONDS]`;
const LOGS_WAIT_MS = 30000;

function log(line) {
  console.log(`dashboard: ${line}`);
}

class CheckFailure extends Error {}

function fail(what) {
  throw new CheckFailure(what);
}

// ---- Arguments ------------------------------------------------------------------------------

function parseArgs(argv) {
  const opts = { chromium: '/usr/bin/chromium', 'timeout-s': '240' };
  const known = new Set(['url', 'token', 'nodes', 'reason-contains', 'screenshots', 'injected', 'chromium', 'timeout-s']);
  for (let i = 0; i < argv.length; i++) {
    const arg = argv[i];
    if (arg === '--help' || arg === '-h') {
      console.log(USAGE);
      process.exit(0);
    }
    const m = /^--([a-z-]+)(?:=(.*))?$/s.exec(arg);
    if (!m || !known.has(m[1])) fail(`unknown argument ${JSON.stringify(arg)}\n${USAGE}`);
    let value = m[2];
    if (value === undefined) {
      if (i + 1 >= argv.length) fail(`${arg} needs a value\n${USAGE}`);
      value = argv[++i];
    }
    opts[m[1]] = value;
  }
  for (const name of ['url', 'token', 'nodes', 'reason-contains', 'screenshots']) {
    if (!opts[name]) fail(`--${name} is required\n${USAGE}`);
  }
  const timeoutS = Number(opts['timeout-s']);
  if (!(timeoutS > 0)) fail(`--timeout-s must be a positive number of seconds, not ${opts['timeout-s']}`);
  const nodes = opts.nodes.split(',').map((s) => s.trim()).filter(Boolean);
  if (!nodes.length) fail('--nodes names no address');
  return {
    url: opts.url.replace(/\/+$/, ''),
    token: opts.token,
    nodes,
    reasonContains: opts['reason-contains'],
    screenshots: opts.screenshots,
    injected: opts.injected || '',
    chromium: opts.chromium,
    timeoutMs: timeoutS * 1000,
  };
}

// ---- Time budget: every wait takes what is left of --timeout-s --------------------------------

let deadline = 0;

function leftMs(what) {
  const left = deadline - Date.now();
  if (left <= 0) fail(`ran out of the --timeout-s budget before ${what}`);
  return left;
}

// A CSS attribute-selector string literal for `value`.
const cssString = (value) => `"${value.replace(/["\\]/g, '\\$&').replace(/\n/g, '\\a ')}"`;

// ---- The check --------------------------------------------------------------------------------

async function main() {
  const args = parseArgs(process.argv.slice(2));
  deadline = Date.now() + args.timeoutMs;
  // A last resort should some call not honour its timeout: fail rather than hang the harness.
  setTimeout(() => {
    console.log(`dashboard check failed: still running ${args.timeoutMs / 1000 + 30}s after the start`);
    process.exit(1);
  }, args.timeoutMs + 30000).unref();
  mkdirSync(args.screenshots, { recursive: true });
  const shot = (name) => path.join(args.screenshots, name);

  // playwright-core from this script's own node_modules, wherever the harness runs us from
  const require = createRequire(import.meta.url);
  let chromium;
  try {
    ({ chromium } = require('playwright-core'));
  } catch (e) {
    fail(`cannot load playwright-core beside ${path.dirname(new URL(import.meta.url).pathname)} ` +
      `(run: npm ci --prefix tests/dashboard): ${e.message}`);
  }

  // a. Without credentials: 401 to plain HTTP and to a browser.
  for (const p of ['/dashboard', '/dashboard/api/summary']) {
    let res;
    try {
      res = await fetch(args.url + p, { signal: AbortSignal.timeout(Math.min(30000, leftMs(`GET ${p}`))) });
    } catch (e) {
      fail(`GET ${args.url}${p} without credentials: ${e.cause ? e.cause.message || e.cause : e.message}`);
    }
    await res.arrayBuffer();
    if (res.status !== 401) fail(`GET ${p} without credentials answered ${res.status}, not 401`);
    if (p === '/dashboard' && !/^\s*basic\b/i.test(res.headers.get('www-authenticate') || '')) {
      fail(`the 401 of GET ${p} has no "WWW-Authenticate: Basic ..." header (saw ` +
        `${JSON.stringify(res.headers.get('www-authenticate'))}), so a browser would not ask for the token`);
    }
  }
  log('without credentials: /dashboard and /dashboard/api/summary answer 401');

  let browser;
  try {
    browser = await chromium.launch({
      executablePath: args.chromium,
      headless: true,
      args: ['--no-sandbox', '--disable-dev-shm-usage'],
      timeout: Math.min(60000, leftMs('launching chromium')),
    });
  } catch (e) {
    fail(`cannot launch chromium at ${args.chromium}: ${e.message.split('\n')[0]}`);
  }
  try {
    await checkInBrowser(browser, args, shot);
  } finally {
    await browser.close().catch(() => {});
  }
  log('all checks passed');
}

async function checkInBrowser(browser, args, shot) {
  // Headless Chromium answers a Basic challenge it has no credentials for by failing the
  // navigation (net::ERR_INVALID_AUTH_CREDENTIALS) after the 401 arrives, so the 401 is read from
  // the response event, not from goto's result. A wrong token must get the 401 page itself.
  for (const [who, credentials] of [['without credentials', null],
    ['with a wrong token', { username: 'operator', password: `wrong-${args.token}` }]]) {
    const anon = await browser.newContext(credentials ? { httpCredentials: credentials } : {});
    const page = await anon.newPage();
    const target = `${args.url}/dashboard`;
    const timeout = Math.min(30000, leftMs(`loading /dashboard ${who}`));
    const responded = page.waitForResponse((r) => new URL(r.url()).pathname === '/dashboard', { timeout })
      .catch(() => null);
    let navError = null;
    const res = (await page.goto(target, { timeout }).catch((e) => {
      navError = e;
      return null;
    })) || (await responded);
    if (!res) fail(`a browser ${who} got no response for /dashboard: ${navError ? navError.message.split('\n')[0] : '?'}`);
    if (res.status() !== 401) fail(`a browser ${who} got ${res.status()} for /dashboard, not 401`);
    const how = navError ? `, then ${/ERR_[A-Z_]+/.exec(navError.message)?.[0] || 'a failed load'}` : '';
    log(`a browser ${who} gets 401 for /dashboard${how}`);
    await anon.close();
  }


  // b. Signed in: every node gets its row. From here on, any uncaught exception or CSP
  //    violation fails the check (whichever wait is running ends at once).
  const context = await browser.newContext({
    httpCredentials: { username: 'operator', password: args.token },
    viewport: { width: 1400, height: 1200 },
  });
  const page = await context.newPage();
  let reportProblem;
  const problem = new Promise((_, reject) => {
    reportProblem = (what) => reject(new CheckFailure(what));
  });
  problem.catch(() => {}); // observed by the races below
  page.on('pageerror', (e) => reportProblem(`uncaught exception in the page: ${e.message}`));
  page.on('console', (msg) => {
    if (/content[- ]security[- ]policy/i.test(msg.text())) {
      reportProblem(`Content-Security-Policy violation: ${msg.text()}`);
    }
  });
  // Violations also as DOM events: the console wording is Chromium's, the event is standard.
  await page.addInitScript(() => {
    document.addEventListener('securitypolicyviolation', (e) => {
      console.error(`Content-Security-Policy violation event: ${e.violatedDirective} blocked ` +
        `${e.blockedURI || 'inline'} at ${e.sourceFile || '?'}:${e.lineNumber || '?'}`);
    });
  });
  const guarded = (promise) => Promise.race([promise, problem]);

  // Waits until `predicate(arg)` holds in the page; on timeout fails with `what` and what
  // `seen(arg)` reports of the page then.
  async function waitFor(what, predicate, arg, seen, maxMs = Infinity) {
    try {
      await guarded(page.waitForFunction(predicate, arg,
        { timeout: Math.min(maxMs, leftMs(what)), polling: 250 }));
    } catch (e) {
      if (e instanceof CheckFailure) throw e;
      let saw = '';
      try {
        saw = await page.evaluate(seen, arg);
      } catch (e2) {
        saw = `(could not read the page: ${e2.message.split('\n')[0]})`;
      }
      fail(`${what}: ${e.name === 'TimeoutError' ? 'timed out' : e.message.split('\n')[0]}; saw ${saw}`);
    }
  }

  let res;
  try {
    res = await guarded(page.goto(`${args.url}/dashboard`, { timeout: Math.min(60000, leftMs('loading /dashboard')) }));
  } catch (e) {
    if (e instanceof CheckFailure) throw e;
    fail(`loading ${args.url}/dashboard with the token: ${e.message.split('\n')[0]}`);
  }
  if (!res || res.status() !== 200) fail(`GET /dashboard with the token answered ${res ? res.status() : 'nothing'}, not 200`);

  await waitFor(`a #nodes row for each of ${args.nodes.length} --nodes addresses`,
    (want) => {
      const have = new Set(Array.from(document.querySelectorAll('#nodes tr[data-address]'), (tr) => tr.getAttribute('data-address')));
      return want.every((a) => have.has(a));
    },
    args.nodes,
    (want) => {
      const have = Array.from(document.querySelectorAll('#nodes tr[data-address]'), (tr) => tr.getAttribute('data-address'));
      const missing = want.filter((a) => !have.includes(a));
      const b = document.getElementById('conn-banner');
      return `missing ${JSON.stringify(missing)}, rows for ${JSON.stringify(have)}` +
        (b && !b.hidden ? ` [banner: ${b.textContent}]` : '');
    });
  log(`signed in: #nodes has a row for each of the ${args.nodes.length} nodes`);

  // c. The reward plot gains a point while we watch.
  const markers = () => document.querySelectorAll('#reward-plot [data-step]').length;
  const runState = () => {
    const b = document.getElementById('conn-banner');
    return `${document.querySelectorAll('#reward-plot [data-step]').length} markers, ` +
      `step "${document.getElementById('run-step')?.textContent}", ` +
      `state "${document.getElementById('run-done')?.textContent}"` +
      (b && !b.hidden ? ` [banner: ${b.textContent}]` : '');
  };
  await waitFor('a first point in #reward-plot', () => document.querySelectorAll('#reward-plot [data-step]').length >= 1,
    null, runState);
  const n0 = await page.evaluate(markers);
  log(`#reward-plot has ${n0} point(s); waiting for another`);
  await waitFor(`#reward-plot to gain a point beyond ${n0}`,
    (n) => document.querySelectorAll('#reward-plot [data-step]').length > n, n0, runState);
  const n1 = await page.evaluate(markers);
  log(`the reward plot gained a point: ${n0} -> ${n1}`);

  // c'. The broadcast plot: per step, what a worker downloaded for the newest version beside the
  // whole file (each marker's tooltip ends with its exact value); a download is never larger.
  const broadcast = await page.evaluate(() => {
    const steps = {};
    for (const mark of document.querySelectorAll('#broadcast-plot [data-step]')) {
      const m = /^step (\d+): (download|full) .*\(([^()]+)\)$/.exec(mark.textContent);
      if (m) (steps[m[1]] ||= {})[m[2]] = Number(m[3]);
    }
    return steps;
  });
  const both = Object.entries(broadcast).filter(([, v]) => v.download > 0 && v.full > 0);
  if (!both.length) fail(`#broadcast-plot has no step with both a download and a full size: ${JSON.stringify(broadcast)}`);
  for (const [step, v] of both) {
    if (v.download > v.full) fail(`#broadcast-plot: step ${step} downloaded ${v.download} bytes, more than the whole file (${v.full})`);
  }
  log(`#broadcast-plot: ${both.length} step(s) with download <= full (last ${JSON.stringify(both[both.length - 1])})`);
  await guarded(page.screenshot({ path: shot('dashboard-overview.png'), fullPage: true, timeout: leftMs('screenshots') }));
  await guarded(page.locator('#section-training').screenshot({ path: shot('dashboard-training.png'), timeout: leftMs('screenshots') }));
  log('screenshots dashboard-overview.png, dashboard-training.png');

  // d. A rejected submission, in full.
  await guarded(page.selectOption('#submission-status', 'rejected', { timeout: leftMs('choosing "rejected"') }));
  await waitFor('a #submissions row with data-status="rejected" after choosing "rejected"',
    () => {
      const rows = document.querySelectorAll('#submissions tr[data-id]');
      return rows.length > 0 && Array.from(rows).every((tr) => tr.getAttribute('data-status') === 'rejected');
    },
    null,
    () => {
      const rows = Array.from(document.querySelectorAll('#submissions tr[data-id]'),
        (tr) => `${tr.getAttribute('data-id')}:${tr.getAttribute('data-status')}`);
      return `rows ${JSON.stringify(rows.slice(0, 20))}, page note "${document.getElementById('submissions-page')?.textContent}"`;
    });
  // by its id: a newer rejection arriving with a poll must not change which row is clicked
  const id = await guarded(page.locator('#submissions tr[data-status="rejected"]').first()
    .getAttribute('data-id', { timeout: leftMs('reading the rejected row') }));
  await guarded(page.locator(`#submissions tr[data-id=${cssString(id)}]`)
    .click({ timeout: leftMs('clicking the rejected row') }));
  const detailSel = `#submission-detail[data-id=${cssString(id)}]`;
  await waitFor(`${detailSel} .reason after clicking submission ${id}`,
    (sel) => document.querySelector(`${sel} .reason`) !== null,
    detailSel,
    () => {
      const d = document.getElementById('submission-detail');
      return d ? `#submission-detail hidden=${d.hidden} data-id=${d.getAttribute('data-id')} text "${d.textContent.slice(0, 300)}"` : 'no #submission-detail';
    });
  const reason = await page.locator(`${detailSel} .reason`).innerText({ timeout: leftMs('reading the reason') });
  if (!reason.includes(args.reasonContains)) {
    fail(`the reason of rejected submission ${id} does not contain ${JSON.stringify(args.reasonContains)}: ${JSON.stringify(reason)}`);
  }
  const checks = await page.locator(`${detailSel} .checks li`).count();
  if (checks < 1) fail(`rejected submission ${id} shows no checks (#submission-detail .checks li), reason ${JSON.stringify(reason)}`);
  log(`rejected submission ${id}: reason ${JSON.stringify(reason.length > 120 ? `${reason.slice(0, 117)}...` : reason)}, ${checks} check(s)`);
  await guarded(page.locator('#submission-detail').screenshot({ path: shot('dashboard-rejection.png'), timeout: leftMs('screenshots') }));
  log('screenshot dashboard-rejection.png');

  // e. The first node's log.
  const address = args.nodes[0];
  const rowSel = `#nodes tr[data-address=${cssString(address)}]`;
  const button = page.locator(`${rowSel} button.logs`);
  if ((await button.count()) !== 1) fail(`no button.logs in the #nodes row of ${address}`);
  if (await button.isDisabled()) fail(`the logs button of ${address} is disabled (the summary says has_logs: false)`);
  await guarded(button.click({ timeout: leftMs('clicking the logs button') }));
  await waitFor(`#node-logs to show the log of ${address} (or an error) within ${LOGS_WAIT_MS / 1000}s`,
    (a) => {
      const panel = document.getElementById('node-logs');
      if (!panel || panel.hidden || panel.getAttribute('data-address') !== a) return false;
      const pre = panel.querySelector('pre');
      const error = panel.querySelector('.error');
      return (pre && pre.textContent.trim() !== '') || (error && error.textContent.trim() !== '') ||
        panel.getAttribute('data-state') === 'empty';
    },
    address,
    (a) => {
      const panel = document.getElementById('node-logs');
      return panel ? `#node-logs hidden=${panel.hidden} data-address=${panel.getAttribute('data-address')} ` +
        `data-state=${panel.getAttribute('data-state')} text "${panel.textContent.trim().slice(0, 300)}"` : 'no #node-logs';
    },
    LOGS_WAIT_MS);
  const shown = await page.evaluate(() => {
    const panel = document.getElementById('node-logs');
    const pre = panel.querySelector('pre');
    if (pre && pre.textContent.trim() !== '') {
      return `its log (${pre.textContent.split('\n').filter(Boolean).length} lines)`;
    }
    const error = panel.querySelector('.error');
    if (error) return `an error: ${JSON.stringify(error.textContent)}`;
    return 'an empty log';
  });
  log(`logs of ${address.slice(0, 12)}: #node-logs shows ${shown}`);
  await guarded(page.locator('#section-nodes').screenshot({ path: shot('dashboard-nodes.png'), timeout: leftMs('screenshots') }));
  log('screenshot dashboard-nodes.png');

  // f. The ledger verifies and lists entries.
  await waitFor('#ledger-verification to read "verified ..." and #ledger to have a row',
    () => {
      const v = document.getElementById('ledger-verification');
      return v && v.classList.contains('ok') && v.textContent.includes('verified') &&
        document.querySelector('#ledger tr[data-seq]') !== null;
    },
    null,
    () => {
      const v = document.getElementById('ledger-verification');
      const b = document.getElementById('conn-banner');
      return `#ledger-verification "${v ? v.textContent : '(none)'}" (class "${v ? v.className : ''}"), ` +
        `${document.querySelectorAll('#ledger tr[data-seq]').length} #ledger rows, ` +
        `page note "${document.getElementById('ledger-page')?.textContent}"` +
        (b && !b.hidden ? ` [banner: ${b.textContent}]` : '');
    });
  const verification = await page.locator('#ledger-verification').innerText();
  const entries = await page.locator('#ledger tr[data-seq]').count();
  log(`ledger: "${verification}", ${entries} entries listed`);
  await guarded(page.locator('#section-ledger').screenshot({ path: shot('dashboard-ledger.png'), timeout: leftMs('screenshots') }));
  log('screenshot dashboard-ledger.png');

  // g. Hostile strings stayed text.
  const pwned = await page.evaluate(() => typeof window.__pwned);
  if (pwned !== 'undefined') fail(`window.__pwned is set (${pwned}): a string from the server ran as script`);
  const injected = await page.evaluate(() => document.querySelectorAll('img, iframe, object, embed, script:not([src="/dashboard/app.js"])').length);
  if (injected) fail(`the page holds ${injected} img/iframe/object/embed/extra script element(s): markup from the server's strings`);
  log('window.__pwned is undefined: no hostile string ran');
  if (args.injected) {
    const shown = await page.evaluate(() => document.getElementById('nodes').textContent);
    if (!shown.includes(args.injected)) {
      fail(`the injected agent state ${JSON.stringify(args.injected)} is not shown as text in #nodes`);
    }
    log('the injected agent state shows as text');
  }

  // any problem reported after the last wait still fails the run
  await Promise.race([problem, new Promise((resolve) => setTimeout(resolve, 100))]);
  await context.close();
}

main().then(
  () => process.exit(0),
  (e) => {
    const what = e instanceof CheckFailure ? e.message : `unexpected error: ${e && e.stack ? e.stack : e}`;
    console.log(`dashboard check failed: ${what}`);
    process.exit(1);
  },
);
