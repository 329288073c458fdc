// Trellis operator dashboard: everything the page does. It polls /dashboard/api/summary every
// POLL_MS (one request at a time: the next is scheduled when the last has settled), and draws the
// run's header, training plots, nodes, validation, relays and ledger verification from it; the
// submission and ledger lists page through their own endpoints and refresh their first page with
// each poll. The endpoints' JSON is described in the dashboard contract (server side:
// api_dashboard.cpp).
//
// Every string in that JSON may come from a stranger (CPU names, versions, agent states, rejection
// reasons, ledger bodies), and the page runs under a CSP without inline script or style. So the
// DOM is built only with createElement / textContent / setAttribute (never innerHTML), and looks
// come from classes in style.css. Rows are updated in place, keyed by their data-* attribute, so a
// poll keeps focus, open panels and expanded rows.
'use strict';

const POLL_MS = 2000;
const FETCH_TIMEOUT_MS = 10000; // a hung request must not stop the polling
const LOGS_TIMEOUT_MS = 25000; // the server fetches a log from the node's agent first
const PAGE_LIMIT = 50;
const LOG_LINES = 200;
const REASON_CHARS = 80;
const BODY_CHARS = 140;
const NODE_STATES = ['healthy', 'unhealthy', 'dead', 'stale', 'evicted', 'registered', 'invited'];
const SUBMISSION_STATUSES = ['assigned', 'pending', 'validating', 'accepted', 'rejected', 'dropped'];
const FINAL_STATUSES = new Set(['accepted', 'rejected', 'dropped']);
const SVG_NS = 'http://www.w3.org/2000/svg';

// ---------------------------------------------------------------------------------------------
// DOM helpers. Attributes and text only: a value from the JSON can never become markup.

const byId = (id) => document.getElementById(id);

function fill(node, children) {
  for (const child of children) {
    if (child === null || child === undefined || child === false) continue;
    node.append(child instanceof Node ? child : String(child));
  }
  return node;
}

function setAttrs(node, attrs) {
  for (const [name, value] of Object.entries(attrs || {})) {
    if (value === null || value === undefined || value === false) continue;
    node.setAttribute(name, value === true ? '' : String(value));
  }
}

// h('td', {class: 'num', title: t}, 'text', childNode)
function h(tag, attrs, ...children) {
  const node = document.createElement(tag);
  setAttrs(node, attrs);
  return fill(node, children);
}

function svg(tag, attrs, ...children) {
  const node = document.createElementNS(SVG_NS, tag);
  setAttrs(node, attrs);
  return fill(node, children);
}

// Writes only on change: no needless layout, and text selections survive a poll.
function setText(node, text) {
  text = String(text);
  if (node.textContent !== text) node.textContent = text;
}

function setAttr(node, name, value) {
  if (value === null || value === undefined || value === '') {
    if (node.hasAttribute(name)) node.removeAttribute(name);
  } else if (node.getAttribute(name) !== String(value)) {
    node.setAttribute(name, String(value));
  }
}

// A state word from the server as a class-name part: only known words, so hostile text cannot
// pick some other class.
function stateClass(word, known) {
  return known.includes(word) ? word : 'other';
}

function badge(text, kind) {
  return h('span', { class: `badge badge-${kind}` }, text);
}

// ---------------------------------------------------------------------------------------------
// Formatting.

const isNum = (v) => typeof v === 'number' && Number.isFinite(v);
const str = (v) => (typeof v === 'string' ? v : v === null || v === undefined ? '' : String(v));

// One formatter for grouping digits: toLocaleString builds a new one per call, which shows when
// a plot labels thousands of points.
const grouped = new Intl.NumberFormat('en-US', { maximumFractionDigits: 0 });

// Integers as they are (grouped), others to 3 significant digits.
function fmtNum(v) {
  if (!isNum(v)) return '–';
  if (Number.isInteger(v)) return grouped.format(v);
  const a = Math.abs(v);
  if (a >= 1000) return grouped.format(Math.round(v));
  if (a >= 1e-3) return String(Number(v.toPrecision(3)));
  return v.toExponential(2);
}

// Rates and sizes: 3 significant digits with a k / M / G suffix.
function fmtSI(v) {
  if (!isNum(v)) return '–';
  const a = Math.abs(v);
  for (const [scale, suffix] of [[1e9, 'G'], [1e6, 'M'], [1e3, 'k']]) {
    if (a >= scale) return `${Number((v / scale).toPrecision(3))}${suffix}`;
  }
  return fmtNum(v);
}

const fmtInt = (v) => (isNum(v) ? grouped.format(Math.round(v)) : '–');
const fmtPct = (v) => (isNum(v) ? `${Number((v * 100).toPrecision(3))}%` : '–');
// Sizes in the decimal units a plot's log-scale ticks use (10M, 100M): 12.3MB.
const fmtSIBytes = (v) => (isNum(v) ? `${fmtSI(v)}B` : '–');
const fmtGiB = (mib) => (isNum(mib) ? `${Number((mib / 1024).toPrecision(3))} GiB` : '–');

function fmtBytes(n) {
  if (!isNum(n)) return '–';
  const units = ['B', 'KiB', 'MiB', 'GiB', 'TiB'];
  let i = 0;
  while (Math.abs(n) >= 1024 && i < units.length - 1) {
    n /= 1024;
    i++;
  }
  return i === 0 ? `${n} B` : `${Number(n.toPrecision(3))} ${units[i]}`;
}

function fmtAge(seconds) {
  if (!isNum(seconds)) return '–';
  const s = Math.max(0, seconds);
  if (s < 100) return `${Math.round(s)}s ago`;
  if (s < 100 * 60) return `${Math.round(s / 60)}m ago`;
  if (s < 48 * 3600) return `${Math.round(s / 3600)}h ago`;
  return `${Math.round(s / 86400)}d ago`;
}

const pad2 = (n) => String(n).padStart(2, '0');

// Local wall time of unix seconds: "14:03:27", with the date when it is not today.
function fmtTime(unix) {
  if (!isNum(unix) || unix <= 0) return '–';
  const d = new Date(unix * 1000);
  const time = `${pad2(d.getHours())}:${pad2(d.getMinutes())}:${pad2(d.getSeconds())}`;
  if (d.toDateString() === new Date().toDateString()) return time;
  return `${d.getFullYear()}-${pad2(d.getMonth() + 1)}-${pad2(d.getDate())} ${time}`;
}

function truncate(text, n) {
  text = str(text);
  return text.length > n ? `${text.slice(0, n - 1)}…` : text;
}

// Addresses and hashes: the first 12 characters (the full one goes in a title).
const short = (hex) => (str(hex) === '' ? '–' : truncate(str(hex), 13));

function compactJson(value) {
  if (typeof value === 'string') return value; // the ledger gives a body's text when not JSON
  try {
    return JSON.stringify(value) ?? '';
  } catch (e) {
    return String(value);
  }
}

function prettyJson(value) {
  if (typeof value === 'string') return value;
  try {
    return JSON.stringify(value, null, 2) ?? '';
  } catch (e) {
    return String(value);
  }
}

// ---------------------------------------------------------------------------------------------
// Server clock. Ages ("12s ago") are measured against the server's `now`, advanced by the local
// clock since it arrived, so a skewed operator clock does not matter.

const clock = { serverNow: null, localAt: 0 };

function serverNow() {
  if (clock.serverNow === null) return Date.now() / 1000;
  return clock.serverNow + (performance.now() - clock.localAt) / 1000;
}

const ago = (unix) => (isNum(unix) && unix > 0 ? fmtAge(serverNow() - unix) : 'never');

// ---------------------------------------------------------------------------------------------
// HTTP. Same origin: the browser re-sends the operator's Basic credentials itself. Errors come
// back as Error objects whose message says what went wrong (the server's {"error"} when given).

async function request(path, timeoutMs = FETCH_TIMEOUT_MS) {
  const abort = new AbortController();
  const timer = setTimeout(() => abort.abort(), timeoutMs);
  try {
    let res;
    try {
      res = await fetch(path, { credentials: 'same-origin', cache: 'no-store', signal: abort.signal });
    } catch (e) {
      throw new Error(abort.signal.aborted ? `no answer in ${timeoutMs / 1000}s` : str(e.message));
    }
    const body = await res.text();
    if (!res.ok) {
      let why = body.trim();
      try {
        const parsed = JSON.parse(body);
        if (parsed && typeof parsed.error === 'string') why = parsed.error;
      } catch (e) {
        // not JSON: show its text
      }
      if (res.status === 401) why += ' (reload the page to sign in with the trainer token)';
      throw new Error(`HTTP ${res.status}${why ? `: ${truncate(why, 300)}` : ''}`);
    }
    return body;
  } finally {
    clearTimeout(timer);
  }
}

async function getJson(path) {
  const body = await request(path);
  try {
    return JSON.parse(body);
  } catch (e) {
    throw new Error(`${path} did not answer JSON`);
  }
}

function query(params) {
  const q = new URLSearchParams();
  for (const [k, v] of Object.entries(params)) {
    if (v !== null && v !== undefined && v !== '') q.set(k, String(v));
  }
  const s = q.toString();
  return s ? `?${s}` : '';
}

// ---------------------------------------------------------------------------------------------
// Tables. A row is a list of cell specs: a string, or {text, title, cls, num, node, sig}. A cell
// holding a built node (a badge, a button) is rebuilt only when its `sig` changes.

const cellSigs = new WeakMap();

function fillCell(td, spec) {
  if (typeof spec !== 'object' || spec === null) spec = { text: spec };
  const cls = [spec.num ? 'num' : '', spec.cls || ''].join(' ').trim();
  setAttr(td, 'class', cls);
  setAttr(td, 'title', spec.title);
  if (spec.node) {
    const sig = spec.sig ?? spec.node.textContent;
    if (cellSigs.get(td) !== sig) {
      td.replaceChildren(spec.node);
      cellSigs.set(td, sig);
    }
  } else {
    cellSigs.delete(td);
    setText(td, spec.text ?? '');
  }
}

function fillRow(tr, specs) {
  while (tr.cells.length < specs.length) tr.append(document.createElement('td'));
  specs.forEach((spec, i) => fillCell(tr.cells[i], spec));
}

// Makes tbody's rows match `items` in order, reusing the row whose `keyAttr` equals the item's
// key: `build(tr, item)` runs once for a new row, `update(tr, item)` on every call.
function syncRows(tbody, items, keyAttr, keyOf, build, update) {
  const old = new Map();
  for (const tr of Array.from(tbody.rows)) old.set(tr.getAttribute(keyAttr), tr);
  let prev = null;
  for (const item of items) {
    const key = String(keyOf(item));
    let tr = old.get(key);
    if (tr) {
      old.delete(key);
    } else {
      tr = document.createElement('tr');
      tr.setAttribute(keyAttr, key);
      if (build) build(tr, item);
    }
    update(tr, item);
    const want = prev ? prev.nextSibling : tbody.firstChild;
    if (tr !== want) tbody.insertBefore(tr, want);
    prev = tr;
  }
  for (const tr of old.values()) tr.remove();
}

// A small tile: label, value, optional line below.
function stat(label, value, sub, cls) {
  return h('div', { class: `stat${cls ? ` ${cls}` : ''}` },
    h('div', { class: 'stat-label' }, label),
    h('div', { class: 'stat-value' }, value),
    sub ? h('div', { class: 'stat-sub' }, sub) : null);
}

// Draws one section; a bug or an odd field there shows in that section instead of stopping the
// others (and the polling).
function safely(sectionId, draw) {
  const section = byId(sectionId);
  let note = section.querySelector(':scope > .section-error');
  try {
    draw();
    if (note) note.remove();
  } catch (e) {
    console.error(`dashboard: drawing ${sectionId}:`, e);
    if (!note) {
      note = h('p', { class: 'section-error' });
      section.querySelector('h2').after(note);
    }
    setText(note, `could not draw this section: ${str(e && e.message)}`);
  }
}

// ---------------------------------------------------------------------------------------------
// Header and overview (summary.status).

function drawHeader(status) {
  const step = status.step;
  const steps = status.steps;
  const runId = str(status.run_id) || '–';
  setText(byId('run-id'), runId);
  setAttr(byId('run-id'), 'title', runId);
  setText(byId('run-step'), isNum(steps) && steps > 0 ? `${fmtInt(step)} / ${fmtInt(steps)}` : fmtInt(step));
  const progress = byId('run-progress');
  setAttr(progress, 'max', isNum(steps) && steps > 0 ? steps : 1);
  setAttr(progress, 'value', isNum(step) ? Math.max(0, step) : 0);
  setText(byId('run-policy'), isNum(status.policy_version) ? `v${status.policy_version}` : '–');
  const done = byId('run-done');
  setText(done, status.done ? 'done' : 'training');
  setAttr(done, 'class', `badge ${status.done ? 'badge-done' : 'badge-running'}`);
  document.title = `Trellis · ${runId} · step ${fmtInt(step)}${isNum(steps) ? `/${fmtInt(steps)}` : ''}`;
}

function drawOverview(summary) {
  const st = summary.status || {};
  const samples = st.samples || {};
  const nodes = Array.isArray(summary.nodes) ? summary.nodes : [];
  const byState = NODE_STATES.map((s) => [s, nodes.filter((n) => n.state === s).length])
    .filter(([, n]) => n > 0).map(([s, n]) => `${n} ${s}`).join(', ');
  const tiles = [
    stat('Nodes', fmtInt(nodes.length), byState || 'none yet'),
    stat('Submissions accepted', fmtInt(st.accepted),
      `${fmtInt(st.rejected)} rejected, ${fmtInt(st.dropped)} dropped`, st.rejected > 0 ? 'has-bad' : ''),
    stat('In flight', fmtInt((st.assigned || 0) + (st.pending || 0) + (st.validating || 0)),
      `${fmtInt(st.assigned)} assigned, ${fmtInt(st.pending)} pending, ${fmtInt(st.validating)} validating`),
    stat('Samples accepted', fmtInt(samples.accepted),
      `of ${fmtInt(samples.generated)} generated, ${fmtInt(samples.rejected)} rejected`),
    stat('Rollout throughput', `${fmtSI(st.rollout_tokens_per_s)} tok/s`,
      `judged ${fmtNum(st.judged_samples_per_s)} samples/s`),
    stat('Batch', `${fmtInt(st.batch_size)} × ${fmtInt(st.group_size)}`,
      `samples × group, async level ${fmtInt(st.async_level)}`),
    stat('Trainer key', short(st.trainer_public_key), null, 'mono-value'),
  ];
  byId('overview').replaceChildren(...tiles);
  byId('overview').lastChild.setAttribute('title', str(st.trainer_public_key));
}

// ---------------------------------------------------------------------------------------------
// Training plots (summary.training). Each plot is an SVG drawn from scratch when the rows change:
// axes with ticks, a polyline per series and a marker per point (data-step, a <title> tooltip).

const PLOTS = {
  reward: { id: 'reward-plot', title: 'Reward', unit: 'mean per step',
    series: [{ key: 'reward/mean', label: 'reward' }] },
  length: { title: 'Length', unit: 'mean tokens per sequence',
    series: [{ key: 'seq_len/mean', label: 'length' }] },
  mismatch: { title: 'Mismatch', unit: 'k3 KL, trainer vs. rollout',
    series: [{ key: 'mismatch/k3', label: 'k3' }] },
  staleness: { title: 'Staleness', unit: 'mean policy versions behind', zero: true,
    series: [{ key: 'staleness/mean', label: 'staleness' }] },
  throughput: { title: 'Throughput', unit: 'tokens/s, log scale', log: true, fmt: fmtSI,
    series: [{ key: 'throughput/rollout_tok_s', label: 'rollout' },
      { key: 'throughput/train_tok_s', label: 'train' }] },
  idle: { title: 'Trainer idle', unit: 'fraction of step time', fixed: [0, 1], fmt: fmtPct,
    tickFmt: fmtPct, series: [{ key: 'trainer/idle_frac', label: 'idle' }] },
  // What the newest published version costs to broadcast: what a worker holding the version
  // before downloads (its weight delta, or the whole file without one), beside the whole file;
  // and the share of the weights it left as they were (only versions published with a delta).
  broadcast: { id: 'broadcast-plot', title: 'Broadcast', unit: 'bytes, log scale', log: true,
    fmt: fmtSIBytes, series: [{ key: 'broadcast/bytes', label: 'download' },
      { key: 'broadcast/full_bytes', label: 'full' }] },
  unchanged: { title: 'Weights unchanged', unit: 'by the newest version', fixed: [0, 1],
    fmt: fmtPct, tickFmt: fmtPct, series: [{ key: 'broadcast/unchanged_frac', label: 'unchanged' }] },
};

// The metrics shown in the "latest" strip, in this order.
const LATEST = [
  ['reward/mean', 'reward', fmtNum], ['seq_len/mean', 'length', fmtNum],
  ['mismatch/k3', 'mismatch k3', fmtNum], ['staleness/mean', 'staleness', fmtNum],
  ['throughput/rollout_tok_s', 'rollout tok/s', fmtSI], ['throughput/train_tok_s', 'train tok/s', fmtSI],
  ['trainer/idle_frac', 'trainer idle', fmtPct], ['time/step', 'time/step', (v) => `${fmtNum(v)} s`],
  ['broadcast/bytes', 'broadcast', fmtSIBytes],
];

const W = 440;
const H = 190;
const M = { l: 48, r: 12, t: 10, b: 24 };

function niceStep(span, count) {
  const raw = span / count;
  const p = 10 ** Math.floor(Math.log10(raw));
  const f = raw / p;
  return (f < 1.5 ? 1 : f < 3 ? 2 : f < 7 ? 5 : 10) * p;
}

// Round-numbered ticks covering [lo, hi].
function niceTicks(lo, hi, count, integer) {
  let step = niceStep(hi - lo, count);
  if (integer) step = Math.max(1, Math.round(step));
  const ticks = [];
  const first = Math.floor(lo / step + 1e-9) * step;
  for (let v = first; v <= hi + step * (1 - 1e-9) && ticks.length < 50; v += step) {
    ticks.push(Number(v.toPrecision(12)));
    if (v >= hi - step * 1e-9) break;
  }
  return ticks;
}

// Ticks at 1, 2, 5 × 10^k (or just 10^k for wide ranges) covering [lo, hi] > 0.
function logTicks(lo, hi) {
  let a = Math.floor(Math.log10(lo));
  let b = Math.ceil(Math.log10(hi));
  if (a === b) b++;
  const mults = b - a <= 2 ? [1, 2, 5] : [1];
  const ticks = [];
  for (let k = a; k <= b; k++) {
    for (const m of mults) {
      const v = m * 10 ** k;
      if (v >= 10 ** a && v <= 10 ** b) ticks.push(Number(v.toPrecision(12)));
    }
  }
  // trim to the data's neighbourhood: one tick either side
  const inside = ticks.filter((t) => t >= lo && t <= hi);
  const below = ticks.filter((t) => t < lo).pop();
  const above = ticks.find((t) => t > hi);
  return [below, ...inside, above].filter((t) => t !== undefined);
}

// Tick labels: as many decimals as the tick spacing needs.
function tickLabel(v, step) {
  if (v === 0) return '0';
  const decimals = Math.max(0, -Math.floor(Math.log10(step) + 1e-9));
  if (decimals > 4) return v.toExponential(1);
  return v.toFixed(decimals);
}

const plotSigs = new WeakMap();

function drawTraining(training) {
  const rows = Array.isArray(training) ? training.filter((r) => r && isNum(r.step)) : [];
  const last = rows[rows.length - 1];
  setText(byId('training-note'), last
    ? `${fmtInt(rows.length)} steps shown, last step ${fmtInt(last.step)} trained ${ago(last.at)}`
    : 'no step trained yet');

  const sig = `${rows.length}:${rows[0] ? rows[0].step : ''}:${last ? last.step : ''}`;
  for (const fig of document.querySelectorAll('#section-training .plot')) {
    const def = PLOTS[fig.dataset.plot];
    if (!def || plotSigs.get(fig) === sig) continue;
    drawPlot(fig, def, rows);
    plotSigs.set(fig, sig);
  }
  drawLatest(rows);
}

function drawLatest(rows) {
  const box = byId('training-latest');
  if (!rows.length) {
    box.replaceChildren();
    return;
  }
  // the newest value of each metric (a metric may be missing from the last row)
  const latest = (key) => {
    for (let i = rows.length - 1; i >= 0; i--) {
      const v = rows[i].metrics && rows[i].metrics[key];
      if (isNum(v)) return [v, rows[i].step];
    }
    return null;
  };
  const last = rows[rows.length - 1];
  const tiles = [stat('step', fmtInt(last.step), `trained ${fmtTime(last.at)}`)];
  for (const [key, label, fmt] of LATEST) {
    const found = latest(key);
    if (!found) continue;
    const tile = stat(label, fmt(found[0]), found[1] === last.step ? null : `at step ${fmtInt(found[1])}`);
    tile.setAttribute('title', `${key} = ${found[0]}`);
    tiles.push(tile);
  }
  box.replaceChildren(...tiles);
}

// What a plot shows: its series' points, ascending step (missing metrics skipped).
function plotSeries(def, rows) {
  return def.series.map((s, i) => ({
    ...s,
    i,
    pts: rows
      .filter((r) => r.metrics && isNum(r.metrics[s.key]) && (!def.log || r.metrics[s.key] > 0))
      .map((r) => [r.step, r.metrics[s.key]]),
  }));
}

// Axes for the points: round-numbered domains and ticks, the scales, and a key that is the same
// exactly when two layouts draw every point at the same place.
function plotLayout(def, series) {
  const all = series.flatMap((s) => s.pts);
  let x0 = Math.min(...all.map((p) => p[0]));
  let x1 = Math.max(...all.map((p) => p[0]));
  if (x0 === x1) {
    x0 = Math.max(0, x0 - 1);
    x1 = x0 + 2;
  }
  const xTicks = niceTicks(x0, x1, 6, true);
  x0 = Math.min(x0, xTicks[0]);
  x1 = Math.max(x1, xTicks[xTicks.length - 1]);

  let lo = Math.min(...all.map((p) => p[1]));
  let hi = Math.max(...all.map((p) => p[1]));
  if (def.fixed) {
    lo = Math.min(lo, def.fixed[0]);
    hi = Math.max(hi, def.fixed[1]);
  }
  if (def.zero) lo = Math.min(lo, 0);
  let yTicks;
  let y0;
  let y1;
  if (def.log) {
    yTicks = logTicks(lo, hi);
    y0 = Math.log10(yTicks[0]);
    y1 = Math.log10(yTicks[yTicks.length - 1]);
  } else {
    if (lo === hi) {
      const pad = Math.abs(lo) * 0.1 || 1;
      lo -= pad;
      hi += pad;
    }
    yTicks = niceTicks(lo, hi, 4, false);
    y0 = yTicks[0];
    y1 = yTicks[yTicks.length - 1];
  }
  // markers shrink as points crowd, so a long run stays readable
  const radius = all.length > 400 ? 1.2 : all.length > 120 ? 1.8 : 2.6;
  const r2 = (v) => Math.round(v * 100) / 100;
  return {
    xTicks,
    yTicks,
    radius,
    key: [x0, x1, y0, y1, radius, series.map((s) => s.pts.length > 0)].join(':'),
    sx: (x) => r2(M.l + ((x - x0) / (x1 - x0)) * (W - M.l - M.r)),
    sy: (y) => {
      const v = def.log ? Math.log10(y) : y;
      return r2(H - M.b - ((v - y0) / (y1 - y0 || 1)) * (H - M.t - M.b));
    },
  };
}

// The caption: title, unit, the newest value of each series (coloured like its line).
function plotCaption(def, series) {
  const fmt = def.fmt || fmtNum;
  const values = h('span', { class: 'plot-latest' });
  for (const s of series) {
    const p = s.pts[s.pts.length - 1];
    values.append(h('span', { class: `legend s${s.i}` },
      series.length > 1 ? `${s.label} ` : '', h('b', {}, p ? fmt(p[1]) : '–')));
  }
  return h('figcaption', {}, h('span', { class: 'plot-title' }, def.title),
    h('span', { class: 'plot-unit' }, def.unit), values);
}

// A marker per point: a circle with data-step and a <title> tooltip. Cloned from one template,
// which is much cheaper than building each when a plot holds thousands.
function appendMarks(group, def, series, s, pts, layout) {
  const fmt = def.fmt || fmtNum;
  const template = svg('circle', { class: 'pt', r: layout.radius }, svg('title'));
  const label = series.length > 1 ? `${s.label} ` : '';
  const marks = document.createDocumentFragment();
  for (const [x, y] of pts) {
    const mark = template.cloneNode(true);
    mark.setAttribute('cx', layout.sx(x));
    mark.setAttribute('cy', layout.sy(y));
    mark.setAttribute('data-step', x);
    mark.firstChild.textContent = `step ${x}: ${label}${fmt(y)} (${y})`;
    marks.append(mark);
  }
  group.append(marks);
}

const linePoints = (pts, layout) => pts.map(([x, y]) => `${layout.sx(x)},${layout.sy(y)}`).join(' ');

// Per figure: its layout key, and per series its polyline, marker group and drawn steps.
const plotState = new WeakMap();

function drawPlot(fig, def, rows) {
  const series = plotSeries(def, rows);
  const caption = plotCaption(def, series);
  if (!series.some((s) => s.pts.length)) {
    const root = svg('svg', { viewBox: `0 0 ${W} ${H}`, class: 'chart', role: 'img', id: def.id },
      svg('text', { x: W / 2, y: H / 2, class: 'chart-empty', 'text-anchor': 'middle' }, 'no data yet'));
    fig.replaceChildren(caption, root);
    plotState.delete(fig);
    return;
  }
  const layout = plotLayout(def, series);
  const state = plotState.get(fig);
  if (state && state.key === layout.key && updateMarks(state, def, series, layout)) {
    fig.replaceChild(caption, fig.querySelector('figcaption'));
    return;
  }
  fig.replaceChildren(caption, drawChart(fig, def, series, layout));
}

// New steps on unchanged axes (the common case: one more step): drop the markers that left the
// window, add the new ones, redraw the lines. False when the points are not the drawn ones plus
// newer ones (then everything is drawn again).
function updateMarks(state, def, series, layout) {
  for (const s of series) {
    if (!s.pts.length) continue; // empty before too: the layout key says which series have points
    const drawn = state.series[s.i];
    if (!drawn) return false;
    const firstNew = s.pts[0][0];
    if (firstNew < drawn.steps[0] || s.pts[s.pts.length - 1][0] < drawn.steps[drawn.steps.length - 1]) return false;
  }
  for (const s of series) {
    const drawn = state.series[s.i];
    if (!drawn) continue;
    let gone = 0;
    while (gone < drawn.steps.length && drawn.steps[gone] < s.pts[0][0]) gone++;
    for (let k = 0; k < gone; k++) drawn.marks.firstChild.remove();
    drawn.steps.splice(0, gone);
    const lastDrawn = drawn.steps.length ? drawn.steps[drawn.steps.length - 1] : -Infinity;
    const fresh = s.pts.filter(([x]) => x > lastDrawn);
    appendMarks(drawn.marks, def, series, s, fresh, layout);
    drawn.steps.push(...fresh.map(([x]) => x));
    drawn.line.setAttribute('points', linePoints(s.pts, layout));
  }
  return true;
}

// The whole chart: grid, axes with tick labels, then per series a polyline and its markers.
function drawChart(fig, def, series, layout) {
  const root = svg('svg', { viewBox: `0 0 ${W} ${H}`, class: 'chart', role: 'img',
    'aria-label': `${def.title} by step`, id: def.id });
  const { xTicks, yTicks, sx, sy } = layout;
  const yStep = yTicks.length > 1 ? yTicks[1] - yTicks[0] : 1;
  const yLabel = def.log ? fmtSI : def.tickFmt || ((v) => tickLabel(v, yStep));

  const grid = svg('g', { class: 'grid' });
  const labels = svg('g', { class: 'tick-labels' });
  for (const t of yTicks) {
    const y = sy(t);
    grid.append(svg('line', { x1: M.l, x2: W - M.r, y1: y, y2: y }));
    labels.append(svg('text', { x: M.l - 6, y, 'text-anchor': 'end', 'dominant-baseline': 'middle' },
      yLabel(t)));
  }
  for (const t of xTicks) {
    const x = sx(t);
    grid.append(svg('line', { class: 'x-tick', x1: x, x2: x, y1: H - M.b, y2: H - M.b + 4 }));
    labels.append(svg('text', { x, y: H - M.b + 15, 'text-anchor': 'middle' }, fmtInt(t)));
  }
  labels.append(svg('text', { x: M.l - 6, y: H - M.b + 15, 'text-anchor': 'end', class: 'axis-name' },
    'step'));
  const axes = svg('g', { class: 'axes' },
    svg('line', { x1: M.l, x2: M.l, y1: M.t, y2: H - M.b }),
    svg('line', { x1: M.l, x2: W - M.r, y1: H - M.b, y2: H - M.b }));
  root.append(grid, axes, labels);

  const state = { key: layout.key, series: [] };
  for (const s of series) {
    if (!s.pts.length) continue;
    const line = svg('polyline', { class: `line s${s.i}`, points: linePoints(s.pts, layout) });
    const marks = svg('g', { class: `marks s${s.i}` });
    appendMarks(marks, def, series, s, s.pts, layout);
    root.append(line, marks);
    state.series[s.i] = { line, marks, steps: s.pts.map(([x]) => x) };
  }
  plotState.set(fig, state);
  return root;
}

// ---------------------------------------------------------------------------------------------
// Nodes (summary.nodes) and the logs panel.

// [CPU line, "16 cores · 62.5 GiB · 2× NVIDIA L4 22.5 GiB"]: identical GPUs counted once.
function hardwareLines(hw) {
  if (!hw || typeof hw !== 'object') return ['unknown', ''];
  const parts = [];
  if (isNum(hw.cpu_cores)) parts.push(`${hw.cpu_cores} cores`);
  if (isNum(hw.memory_mib)) parts.push(fmtGiB(hw.memory_mib));
  const gpus = Array.isArray(hw.gpus) ? hw.gpus : [];
  const groups = new Map();
  for (const g of gpus) {
    const label = `${str(g && g.name) || 'GPU'}${g && isNum(g.memory_mib) ? ` ${fmtGiB(g.memory_mib)}` : ''}`;
    groups.set(label, (groups.get(label) || 0) + 1);
  }
  for (const [label, n] of groups) parts.push(`${n}× ${label}`);
  if (!gpus.length) parts.push('no GPU');
  return [str(hw.cpu_model) || 'unknown CPU', parts.join(' · ')];
}

const NODE_COLUMNS = 9; // the cells of nodeCells(), before the logs button's

// A cell of two lines: the value, and a smaller muted one below (both may be cut in CSS).
function twoLines(first, second, firstCls) {
  return h('div', { class: 'lines' }, h('div', { class: firstCls || '' }, first),
    second ? h('div', { class: 'sub' }, second) : null);
}

// Node (and IP), state (and agent) and hardware take two lines each, so the table fits 1400px.
function nodeCells(n) {
  const state = str(n.state);
  const agent = str(n.agent_state);
  const evicted = str(n.evicted_reason);
  const hw = n.hardware;
  const hwLines = hardwareLines(hw);
  const hwAll = hw ? `${hwLines.join(' · ')}${isNum(hw.disk_mib) ? ` · disk ${fmtGiB(hw.disk_mib)}` : ''}` : '';
  const version = str(n.software_version);
  const accepted = h('span', {}, fmtInt(n.accepted));
  const rejected = h('span', { class: n.rejected > 0 ? 'bad-text' : '' }, fmtInt(n.rejected));
  return [
    { node: twoLines(short(n.address), str(n.ip) || 'no IP', 'mono'), sig: `${n.address}\u0000${str(n.ip)}`,
      title: `${str(n.address)}${n.ip ? `\nIP ${str(n.ip)}` : ''}`, cls: 'clip' },
    { node: h('div', { class: 'lines' }, badge(state || '?', stateClass(state, NODE_STATES)),
      h('div', { class: 'sub' }, evicted ? `evicted: ${evicted}` : agent ? `agent: ${agent}` : 'agent: –')),
      sig: `${state}\u0000${agent}\u0000${evicted}`, cls: 'clip',
      title: [agent ? `agent: ${agent}` : '', evicted ? `evicted: ${evicted}` : ''].filter(Boolean).join('\n') },
    { node: twoLines(hwLines[0], hwLines[1]), sig: hwAll, title: hwAll, cls: 'clip wide' },
    { text: version || '–', title: version, cls: 'clip' },
    { text: ago(n.heartbeat_at), title: isNum(n.heartbeat_at) && n.heartbeat_at > 0 ? fmtTime(n.heartbeat_at) : '',
      cls: `nowrap${n.heartbeat_at > 0 && serverNow() - n.heartbeat_at > 60 ? ' warn-text' : ''}` },
    { node: h('span', {}, accepted, ' / ', rejected), sig: `${n.accepted}/${n.rejected}`, num: true,
      title: `${fmtInt(n.accepted)} accepted, ${fmtInt(n.rejected)} rejected submissions` },
    { text: fmtInt(n.work_units), num: true, title: `${fmtInt(n.samples)} samples accepted` },
    { text: `${fmtNum(n.stake)} / ${fmtNum(n.slashed)}`, num: true, cls: n.slashed > 0 ? 'bad-text' : '',
      title: `staked ${fmtNum(n.staked)}, slashed ${fmtNum(n.slashed)}, stake now ${fmtNum(n.stake)}` },
    { text: truncate(n.last_rejection, 80) || '–', title: str(n.last_rejection),
      cls: `clip wide${n.last_rejection ? ' bad-text' : ''}` },
  ];
}

function drawNodes(nodes) {
  nodes = Array.isArray(nodes) ? nodes.filter((n) => n && typeof n.address === 'string') : [];
  const counts = NODE_STATES.map((s) => [s, nodes.filter((n) => n.state === s).length])
    .filter(([, c]) => c > 0).map(([s, c]) => `${c} ${s}`);
  setText(byId('nodes-count'), `${nodes.length} · ${counts.join(', ') || 'none yet'}`);
  const tbody = byId('nodes').tBodies[0];
  syncRows(tbody, nodes, 'data-address', (n) => n.address,
    (tr) => {
      // the logs button lives as long as its row, so a poll never swallows a click
      const button = h('button', { type: 'button', class: 'logs' }, 'logs');
      const cells = Array.from({ length: NODE_COLUMNS }, () => document.createElement('td'));
      tr.append(...cells, h('td', { class: 'actions' }, button));
    },
    (tr, n) => {
      fillRow(tr, nodeCells(n));
      const button = tr.querySelector('button.logs');
      button.disabled = !n.has_logs;
      setAttr(button, 'title', n.has_logs ? 'show the end of its task log' : 'no task log to fetch for this node');
      tr.classList.toggle('selected', logs.address === n.address && !byId('node-logs').hidden);
    });
}

const logs = { address: null, token: 0 };

async function openLogs(address) {
  const token = ++logs.token;
  logs.address = address;
  const panel = byId('node-logs');
  const body = byId('node-logs-body');
  panel.hidden = false;
  panel.setAttribute('data-address', address);
  panel.setAttribute('data-state', 'loading');
  setText(byId('node-logs-title'), `Task log of ${address}`);
  body.replaceChildren(h('p', { class: 'muted' }, `fetching the last ${LOG_LINES} lines from the node's agent…`));
  for (const tr of byId('nodes').tBodies[0].rows) {
    tr.classList.toggle('selected', tr.getAttribute('data-address') === address);
  }
  let state;
  let content;
  try {
    const text = await request(`/dashboard/api/nodes/${encodeURIComponent(address)}/logs${query({ lines: LOG_LINES })}`,
      LOGS_TIMEOUT_MS);
    const lines = text === '' ? 0 : text.replace(/\n$/, '').split('\n').length;
    state = text.trim() === '' ? 'empty' : 'loaded';
    content = [h('p', { class: 'muted small' }, state === 'empty'
      ? `the log is empty (fetched ${fmtTime(Date.now() / 1000)})`
      : `last ${lines} lines, fetched ${fmtTime(Date.now() / 1000)}`)];
    if (state === 'loaded') content.push(h('pre', { class: 'log' }, text));
  } catch (e) {
    state = 'error';
    content = [h('p', { class: 'error' }, `could not fetch the log: ${e.message}`)];
  }
  if (token !== logs.token) return; // another node's log was asked for meanwhile
  body.replaceChildren(...content);
  panel.setAttribute('data-state', state);
  const pre = body.querySelector('pre');
  if (pre) pre.scrollTop = pre.scrollHeight; // the newest lines are what matter
}

function closeLogs() {
  logs.token++;
  logs.address = null;
  byId('node-logs').hidden = true;
  for (const tr of byId('nodes').tBodies[0].rows) tr.classList.remove('selected');
}

// ---------------------------------------------------------------------------------------------
// Paged lists (submissions, ledger): newest first, "Older" follows the server's cursor, and only
// the first page refreshes with the polls (an older page is a snapshot). `token` drops answers
// that a newer request overtook (a filter changed while a poll was in flight).

class Pager {
  constructor({ fetchPage, draw, olderButton, newestButton, label, noun }) {
    Object.assign(this, { fetchPage, draw, olderButton, newestButton, label, noun });
    this.cursors = [null]; // the "before" of each page shown so far; the last is the current one
    this.next = null;
    this.token = 0;
    olderButton.addEventListener('click', () => this.older());
    newestButton.addEventListener('click', () => this.first());
  }

  first() {
    this.cursors = [null];
    return this.load();
  }

  older() {
    if (this.next === null || this.next === undefined) return Promise.resolve();
    this.cursors.push(this.next);
    return this.load();
  }

  refresh() {
    return this.cursors.length === 1 ? this.load() : Promise.resolve();
  }

  async load() {
    const token = ++this.token;
    const before = this.cursors[this.cursors.length - 1];
    try {
      const page = await this.fetchPage(before);
      if (token !== this.token) return;
      this.next = page.next;
      this.draw(page);
      this.label.classList.remove('error');
      const n = this.cursors.length;
      setText(this.label, n === 1
        ? `newest ${this.noun}, refreshed with each poll`
        : `page ${n}: ${this.noun} below ${before} (not refreshed)`);
    } catch (e) {
      if (token !== this.token) return;
      this.label.classList.add('error');
      setText(this.label, `could not load ${this.noun}: ${e.message}`);
    }
    this.olderButton.disabled = this.next === null || this.next === undefined;
    this.newestButton.disabled = this.cursors.length === 1;
  }
}

// ---------------------------------------------------------------------------------------------
// Submissions: the list and the detail panel.

let submissions;
const detail = { id: null, status: null, token: 0 };

function statusBadge(status) {
  status = str(status);
  return badge(status || '?', stateClass(status, SUBMISSION_STATUSES));
}

function drawSubmissions(page) {
  const rows = page.rows;
  const tbody = byId('submissions').tBodies[0];
  syncRows(tbody, rows, 'data-id', (s) => s.id,
    (tr) => tr.setAttribute('tabindex', '0'),
    (tr, s) => {
      setAttr(tr, 'data-status', str(s.status));
      tr.classList.toggle('selected', String(s.id) === String(detail.id));
      fillRow(tr, [
        { text: fmtInt(s.id), num: true },
        { text: fmtInt(s.step), num: true },
        { text: short(s.node), title: str(s.node), cls: 'mono' },
        { text: fmtInt(s.submission), num: true },
        { node: statusBadge(s.status), sig: str(s.status) },
        { text: fmtInt(s.samples), num: true,
          title: isNum(s.signal_samples) ? `${s.signal_samples} with a learning signal` : '' },
        { text: str(s.validator) || '–' },
        { text: isNum(s.decided_at) && s.decided_at > 0 ? ago(s.decided_at) : '–',
          title: fmtTime(s.decided_at) },
        { text: truncate(s.reason, REASON_CHARS) || '', title: str(s.reason), cls: 'reason-cell' },
      ]);
    });
  byId('submissions-empty').hidden = rows.length > 0;
}

async function fetchSubmissions(before) {
  const status = byId('submission-status').value;
  const page = await getJson(`/dashboard/api/submissions${query({ status, limit: PAGE_LIMIT, before_id: before })}`);
  const rows = Array.isArray(page.submissions) ? page.submissions.filter((s) => s && isNum(s.id)) : [];
  return { rows, next: isNum(page.next_before_id) ? page.next_before_id : null };
}

async function openSubmission(id) {
  const token = ++detail.token;
  detail.id = id;
  const panel = byId('submission-detail');
  panel.hidden = false;
  panel.setAttribute('data-id', id);
  for (const tr of byId('submissions').tBodies[0].rows) {
    tr.classList.toggle('selected', tr.getAttribute('data-id') === String(id));
  }
  if (panel.getAttribute('data-loaded') !== String(id)) {
    panel.replaceChildren(detailHead(id), h('p', { class: 'muted' }, 'loading…'));
  }
  await loadDetail(token, id);
}

// Re-fetches the open submission while its fate is still open (assigned ... validating).
function refreshDetail() {
  if (detail.id === null || FINAL_STATUSES.has(detail.status)) return Promise.resolve();
  return loadDetail(detail.token, detail.id);
}

async function loadDetail(token, id) {
  const panel = byId('submission-detail');
  try {
    const s = await getJson(`/dashboard/api/submissions/${encodeURIComponent(id)}`);
    if (token !== detail.token) return;
    detail.status = str(s.status);
    panel.replaceChildren(...detailContent(id, s));
    panel.setAttribute('data-loaded', id);
  } catch (e) {
    if (token !== detail.token) return;
    detail.status = null;
    panel.replaceChildren(detailHead(id), h('p', { class: 'error' }, `could not load submission ${id}: ${e.message}`));
    panel.removeAttribute('data-loaded');
  }
}

function closeDetail() {
  detail.token++;
  detail.id = null;
  const panel = byId('submission-detail');
  panel.hidden = true;
  panel.removeAttribute('data-id');
  panel.removeAttribute('data-loaded');
  for (const tr of byId('submissions').tBodies[0].rows) tr.classList.remove('selected');
}

function detailHead(id) {
  const close = h('button', { type: 'button', class: 'close', 'aria-label': 'Close' }, 'Close');
  close.addEventListener('click', closeDetail);
  return h('div', { class: 'panel-head' }, h('h3', {}, `Submission ${id}`), close);
}

function timeWithAge(unix) {
  return isNum(unix) && unix > 0 ? `${fmtTime(unix)} (${ago(unix)})` : '–';
}

function detailContent(id, s) {
  const fields = [
    ['Status', statusBadge(s.status)],
    ['Step', fmtInt(s.step)],
    ['Node', h('span', { class: 'mono', title: str(s.node) }, short(s.node))],
    ['Submission', fmtInt(s.submission)],
    ['Samples', `${fmtInt(s.samples)} (${fmtInt(s.signal_samples)} with signal)`],
    ['Completion tokens', fmtInt(s.completion_tokens)],
    ['SHA-256', h('span', { class: 'mono break' }, str(s.sha256) || '–')],
    ['Size', isNum(s.size) ? `${fmtBytes(s.size)} (${fmtInt(s.size)} bytes)` : '–'],
    ['Created', timeWithAge(s.created_at)],
    ['Uploaded', timeWithAge(s.uploaded_at)],
    ['Decided', timeWithAge(s.decided_at)],
    ['Validator', str(s.validator) || '–'],
    ['Claimed by', str(s.claimed_by) || '–'],
  ];
  const dl = h('dl', { class: 'fields' });
  for (const [k, v] of fields) dl.append(h('dt', {}, k), h('dd', {}, v));

  const out = [detailHead(id), dl, h('h4', {}, 'Reason')];
  out.push(h('p', { class: `reason${s.reason ? '' : ' muted'}` }, str(s.reason) || 'none'));

  out.push(h('h4', {}, 'Checks'));
  const checks = Array.isArray(s.checks) ? s.checks : [];
  if (checks.length) {
    out.push(h('ul', { class: 'checks' }, ...checks.map((c) =>
      h('li', {}, h('b', {}, str(c && c.check) || '?'), ': ', str(c && c.finding)))));
  } else {
    out.push(h('p', { class: 'muted' }, 'no failed checks'));
  }

  out.push(h('h4', {}, 'Ledger entries naming it'));
  const entries = Array.isArray(s.ledger) ? s.ledger : [];
  if (entries.length) {
    const tbody = h('tbody');
    for (const e of entries) {
      tbody.append(h('tr', { 'data-seq': e.seq, title: compactJson(e.body) },
        h('td', {}, str(e.kind)),
        h('td', { class: 'num' }, fmtInt(e.seq)),
        h('td', { class: 'mono', title: str(e.author) }, short(e.author)),
        h('td', {}, isNum(e.time_ms) ? fmtTime(e.time_ms / 1000) : '–')));
    }
    out.push(h('table', { class: 'grid small-table' },
      h('thead', {}, h('tr', {}, h('th', {}, 'Kind'), h('th', { class: 'num' }, 'Seq'),
        h('th', {}, 'Author'), h('th', {}, 'Time'))), tbody));
  } else {
    out.push(h('p', { class: 'muted' }, 'none'));
  }
  return out;
}

// ---------------------------------------------------------------------------------------------
// Validation (summary.validation) and relays (summary.relays).

function drawValidation(v) {
  v = v || {};
  const behind = byId('validators-behind');
  behind.hidden = !v.validators_behind;
  setText(behind, `Validators are behind: ${fmtInt(v.backlog_samples)} samples wait for a verdict, ` +
    `the limit is ${fmtInt(v.max_backlog_samples)}.`);

  const backlog = h('progress', { max: Math.max(1, v.max_backlog_samples || 1),
    value: Math.max(0, Math.min(v.backlog_samples || 0, v.max_backlog_samples || 1)),
    class: v.validators_behind ? 'warn' : '' });
  const validators = Array.isArray(v.validators) ? v.validators.filter((x) => x && typeof x === 'object') : [];
  byId('validation-stats').replaceChildren(
    stat('Backlog samples', `${fmtInt(v.backlog_samples)} / ${fmtInt(v.max_backlog_samples)}`,
      backlog, v.validators_behind ? 'has-bad' : ''),
    stat('Backlog in steps', fmtNum(v.backlog_steps)),
    stat('Judged', `${fmtNum(v.judged_samples_per_s)} samples/s`),
    stat('Validators', fmtInt(validators.length),
      `${validators.filter((x) => x.holding > 0).length} holding work`));

  syncRows(byId('validators').tBodies[0], validators, 'data-name', (x) => str(x.name), null, (tr, x) => {
    fillRow(tr, [
      { text: str(x.name) || '–', cls: 'clip' , title: str(x.name) },
      { text: fmtInt(x.accepted), num: true },
      { text: fmtInt(x.rejected), num: true, cls: x.rejected > 0 ? 'bad-text' : '' },
      { text: fmtInt(x.samples), num: true },
      { text: fmtInt(x.samples_last_minute), num: true },
      { text: fmtInt(x.holding), num: true },
      { text: ago(x.last_verdict_at), title: fmtTime(x.last_verdict_at) },
    ]);
  });
}

function drawRelays(relays) {
  relays = Array.isArray(relays) ? relays.filter((r) => r && typeof r === 'object') : [];
  syncRows(byId('relays').tBodies[0], relays, 'data-name', (r) => str(r.name), null, (tr, r) => {
    const versions = Array.isArray(r.versions) ? r.versions.map(str).join(', ') : '';
    const stale = isNum(r.reported_at) && serverNow() - r.reported_at > 60;
    fillRow(tr, [
      { text: str(r.name) || '–' },
      { text: str(r.url) || '–', title: str(r.url), cls: 'mono clip wide' },
      { text: versions || 'none', cls: versions ? '' : 'muted' },
      { text: `${fmtInt(r.versions_pulled)} / ${fmtInt(r.shards_pulled)}`, num: true },
      { text: fmtInt(r.pull_failures), num: true, cls: r.pull_failures > 0 ? 'bad-text' : '' },
      { text: ago(r.reported_at), title: fmtTime(r.reported_at), cls: stale ? 'warn-text' : '' },
    ]);
  });
  byId('relays-empty').hidden = relays.length > 0;
}

// ---------------------------------------------------------------------------------------------
// Ledger: the chain's verification (summary.ledger) and its entries, newest first.

let ledger;
let ledgerKeeper = '';
let ledgerChecked = Infinity; // entries up to this seq were there when the chain was last verified
const expandedSeqs = new Set(); // rows whose full body is shown

function drawVerification(v) {
  const line = byId('ledger-verification');
  const checked = byId('ledger-checked');
  if (!v || typeof v !== 'object') {
    setText(line, 'no ledger');
    setAttr(line, 'class', 'verification');
    setText(checked, '');
    return;
  }
  noteVerification(v);
  // The check is cached on the server: entries appended since (seq > checked_seq) are not in it.
  const total = isNum(v.checked_seq) ? v.checked_seq : v.seq;
  if (v.ok) {
    setText(line, `verified: ${fmtInt(v.verified)} of ${fmtInt(total)} entries, chain intact`);
  } else {
    setText(line, `BROKEN at entry ${fmtInt(v.broken_seq)}: ${str(v.problem)} (${fmtInt(v.verified)} entries verify)`);
  }
  setAttr(line, 'class', `verification ${v.ok ? 'ok' : 'broken'}`);
  const newer = isNum(v.seq) && isNum(total) && v.seq > total ? ` · ${fmtInt(v.seq - total)} newer, not checked yet` : '';
  setText(checked, `checked ${ago(v.checked_at)}${newer} · head ${short(v.hash)} · keeper ${short(v.keeper)}`);
  setAttr(checked, 'title', `ledger ${str(v.id)}\nhead hash ${str(v.hash)}\nkeeper ${str(v.keeper)}`);
}

function noteVerification(v) {
  ledgerKeeper = str(v.keeper);
  ledgerChecked = isNum(v.checked_seq) ? v.checked_seq : isNum(v.seq) ? v.seq : Infinity;
}

async function fetchLedger(before) {
  const page = await getJson(`/dashboard/api/ledger${query({ before_seq: before, limit: PAGE_LIMIT })}`);
  const rows = Array.isArray(page.entries) ? page.entries.filter((e) => e && isNum(e.seq)) : [];
  if (page.verification && typeof page.verification === 'object') noteVerification(page.verification);
  return { rows, next: isNum(page.next_before_seq) ? page.next_before_seq : null };
}

function ledgerBodyCell(e) {
  const json = compactJson(e.body);
  const open = expandedSeqs.has(e.seq);
  const node = open ? h('pre', { class: 'body-full' }, prettyJson(e.body)) : h('code', {}, truncate(json, BODY_CHARS));
  return { node, sig: `${open ? 1 : 0}${json}`, title: open ? '' : truncate(prettyJson(e.body), 4000), cls: 'body-cell' };
}

// ✓ within the verified chain, ○ appended since the last check, ✗ past a break.
function verifiedCell(e) {
  const hash = str(e.hash);
  if (e.verified !== false) return { text: `✓ ${short(hash)}`, title: `verified\n${hash}`, cls: 'mono nowrap ok-text' };
  if (e.seq > ledgerChecked) {
    return { text: `○ ${short(hash)}`, title: `appended after the last verification\n${hash}`, cls: 'mono nowrap muted' };
  }
  return { text: `✗ ${short(hash)}`, title: `does not verify\n${hash}`, cls: 'mono nowrap bad-text' };
}

function drawLedger(page) {
  syncRows(byId('ledger').tBodies[0], page.rows, 'data-seq', (e) => e.seq, null, (tr, e) => {
    const author = str(e.author);
    fillRow(tr, [
      { text: fmtInt(e.seq), num: true },
      { node: h('span', { class: 'kind' }, str(e.kind) || '?'), sig: str(e.kind) },
      { text: author && author === ledgerKeeper ? 'keeper' : short(author), title: author, cls: 'mono' },
      { text: isNum(e.time_ms) ? fmtTime(e.time_ms / 1000) : '–' },
      ledgerBodyCell(e),
      verifiedCell(e),
    ]);
    tr.classList.toggle('expanded', expandedSeqs.has(e.seq));
    tr.ledgerEntry = e; // for the click that expands it
  });
}

// ---------------------------------------------------------------------------------------------
// Polling and the connection state.

const conn = { okAt: null, error: null };

function drawConnection() {
  const banner = byId('conn-banner');
  banner.hidden = conn.error === null;
  if (conn.error !== null) {
    setText(banner, `connection lost: ${conn.error}${conn.okAt ? ' (showing the last data received)' : ''}`);
  }
  const updated = byId('updated');
  if (conn.okAt === null) {
    setText(updated, conn.error === null ? 'waiting for data…' : 'no data yet');
  } else {
    setText(updated, `updated ${fmtAge((performance.now() - conn.okAt) / 1000)}`);
  }
  updated.classList.toggle('stale', conn.okAt !== null && performance.now() - conn.okAt > 3 * POLL_MS + 1000);
}

function drawSummary(summary) {
  if (!summary || typeof summary !== 'object' || !summary.status) throw new Error('the summary has no status');
  if (isNum(summary.now)) {
    clock.serverNow = summary.now;
    clock.localAt = performance.now();
  }
  const status = summary.status;
  safely('section-overview', () => {
    drawHeader(status);
    drawOverview(summary);
  });
  safely('section-training', () => drawTraining(summary.training));
  safely('section-nodes', () => drawNodes(summary.nodes));
  safely('section-validation', () => drawValidation(summary.validation));
  safely('section-relays', () => drawRelays(summary.relays));
  safely('section-ledger', () => drawVerification(summary.ledger));
}

async function pollSummary() {
  try {
    const summary = await getJson('/dashboard/api/summary');
    drawSummary(summary);
    conn.okAt = performance.now();
    conn.error = null;
  } catch (e) {
    conn.error = str(e && e.message) || 'unknown error';
  }
  drawConnection();
}

// One round: the summary, the lists' first pages and an undecided open submission, side by side;
// the next round is scheduled only when all have settled, so requests never pile up.
async function poll() {
  try {
    await Promise.allSettled([pollSummary(), submissions.refresh(), ledger.refresh(), refreshDetail()]);
  } finally {
    setTimeout(poll, POLL_MS);
  }
}

// ---------------------------------------------------------------------------------------------
// Wiring.

function init() {
  submissions = new Pager({
    fetchPage: fetchSubmissions, draw: drawSubmissions, noun: 'submissions',
    olderButton: byId('submissions-older'), newestButton: byId('submissions-newest'),
    label: byId('submissions-page'),
  });
  ledger = new Pager({
    fetchPage: fetchLedger, draw: drawLedger, noun: 'entries',
    olderButton: byId('ledger-older'), newestButton: byId('ledger-newest'), label: byId('ledger-page'),
  });

  byId('submission-status').addEventListener('change', () => submissions.first());

  const subsBody = byId('submissions').tBodies[0];
  const openRow = (event) => {
    const tr = event.target.closest('tr[data-id]');
    if (tr) openSubmission(tr.getAttribute('data-id'));
  };
  subsBody.addEventListener('click', openRow);
  subsBody.addEventListener('keydown', (event) => {
    if (event.key === 'Enter' || event.key === ' ') {
      event.preventDefault();
      openRow(event);
    }
  });

  byId('nodes').tBodies[0].addEventListener('click', (event) => {
    const button = event.target.closest('button.logs');
    const tr = button && button.closest('tr[data-address]');
    if (tr && !button.disabled) openLogs(tr.getAttribute('data-address'));
  });
  byId('node-logs-close').addEventListener('click', closeLogs);
  byId('node-logs-refresh').addEventListener('click', () => {
    if (logs.address !== null) openLogs(logs.address);
  });

  byId('ledger').tBodies[0].addEventListener('click', (event) => {
    if (window.getSelection && String(window.getSelection()) !== '') return; // selecting text
    const tr = event.target.closest('tr[data-seq]');
    if (!tr || !tr.ledgerEntry) return;
    const seq = tr.ledgerEntry.seq;
    if (expandedSeqs.has(seq)) expandedSeqs.delete(seq);
    else expandedSeqs.add(seq);
    drawLedger({ rows: Array.from(tr.parentNode.rows, (r) => r.ledgerEntry) });
  });

  setInterval(drawConnection, 1000); // "updated Ns ago" ticks between polls
  poll();
}

init(); // the script is deferred: the document is parsed by now
