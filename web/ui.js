// AgentJet web pages, served by ajet-swarm under /ui/ (and inlined into a classic run's
// reward_curve.html with window.AJET_SNAPSHOT as its data). Three views, chosen by the URL hash:
//   #/dashboard            held-out validation first → last and the model, engine status, batch
//                          progress, training curves (duplicates folded, rates on 0–1)
//   #/episodes?filters     the stored episodes, paged with the server's cursor
//   #/episode/<uuid>       one episode: its LLM calls and merged training samples, token by token
// Data comes from the front's routes (docs/protocol.md): /metrics_history, /episodes,
// /episodes/{uuid} (admin token), /get_current_batch_rollout_pool_information, /get_engine_status.
// Plain ES2017, no libraries: the charts are this file's own SVG.
'use strict';
(function () {
  const SNAP = window.AJET_SNAPSHOT || null;
  const POLL_MS = 2000;
  const PALETTE = ['#0b84a5', '#f6a600', '#6f4e7c', '#9dd866', '#ca472f', '#ffa056', '#8dddd0', '#3d5a80', '#e07a5f', '#81b29a'];

  // ---------------------------------------------------------------- helpers
  function esc(s) {
    return String(s).replace(/[&<>"]/g, (c) => ({ '&': '&amp;', '<': '&lt;', '>': '&gt;', '"': '&quot;' }[c]));
  }
  function el(tag, attrs, ...kids) {
    const e = document.createElement(tag);
    for (const [k, v] of Object.entries(attrs || {})) {
      if (v === null || v === undefined || v === false) continue;
      if (k === 'text') e.textContent = v;
      else if (k === 'html') e.innerHTML = v;
      else if (k.startsWith('on')) e.addEventListener(k.slice(2), v);
      else e.setAttribute(k, v === true ? '' : v);
    }
    for (const kid of kids) if (kid !== null && kid !== undefined) e.append(kid);
    return e;
  }
  function fmtNum(v, digits) {
    if (v === null || v === undefined || Number.isNaN(v)) return '–';
    if (typeof v !== 'number') return String(v);
    const a = Math.abs(v);
    if (a !== 0 && (a >= 1e6 || a < 1e-3)) return v.toExponential(2);
    return Number(v.toPrecision(digits || 4)).toString();
  }
  function fmtTime(unix) {
    if (!unix) return '–';
    const d = new Date(unix * 1000);
    const p = (n) => String(n).padStart(2, '0');
    return `${d.getFullYear()}-${p(d.getMonth() + 1)}-${p(d.getDate())} ${p(d.getHours())}:${p(d.getMinutes())}:${p(d.getSeconds())}`;
  }
  function shortId(s) { return s ? String(s).slice(0, 8) : '–'; }
  function lowerBound(arr, x) {
    let lo = 0, hi = arr.length;
    while (lo < hi) { const mid = (lo + hi) >> 1; if (arr[mid] < x) lo = mid + 1; else hi = mid; }
    return lo;
  }

  // ---------------------------------------------------------------- token and API
  const Auth = {
    token: null,
    init() {
      const url = new URL(location.href);
      const t = url.searchParams.get('token');
      if (t) {  // from the link the server printed; kept for this tab only, and out of the address bar
        sessionStorage.setItem('ajet_token', t);
        url.searchParams.delete('token');
        history.replaceState(null, '', url.pathname + url.search + url.hash);
      }
      this.token = sessionStorage.getItem('ajet_token');
    },
    set(t) { this.token = t || null; if (t) sessionStorage.setItem('ajet_token', t); else sessionStorage.removeItem('ajet_token'); },
    headers() { return this.token ? { Authorization: 'Bearer ' + this.token } : {}; },
  };
  class ApiError extends Error {
    constructor(status, message, path) { super(message); this.status = status; this.path = path; }
  }
  async function api(path) {
    let r;
    try {
      r = await fetch(path, { headers: Auth.headers(), cache: 'no-store' });
    } catch (e) {
      throw new ApiError(0, 'the server does not answer (' + e.message + ')', path);
    }
    const text = await r.text();
    let body = null;
    try { body = JSON.parse(text); } catch (e) { body = null; }
    if (!r.ok) {
      const msg = (body && body.error && body.error.message) || text.slice(0, 300) || r.statusText;
      throw new ApiError(r.status, msg, path);
    }
    if (body === null) throw new ApiError(r.status, 'the answer is not JSON', path);
    return body;
  }

  // ---------------------------------------------------------------- page frame
  let view = null;       // the element views render into
  let timers = [];       // polling of the current view
  let generation = 0;    // bumps on every navigation: late answers of an old view are dropped
  function stopTimers() { timers.forEach((t) => clearTimeout(t)); timers = []; }
  function later(fn, ms) {
    const g = generation;
    const t = setTimeout(() => { if (g === generation) fn(); }, ms);
    timers.push(t);
    return t;
  }

  function frame() {
    const app = document.getElementById('app');
    app.innerHTML = '';
    const nav = el('nav', {},
      el('a', { href: '#/dashboard', 'data-view': 'dashboard', text: 'Dashboard' }),
      SNAP ? null : el('a', { href: '#/episodes', 'data-view': 'episodes', text: 'Episodes' }));
    const status = el('div', { class: 'status', id: 'top-status' });
    if (!SNAP) {
      status.append(el('span', { id: 'top-engine' }), ' ',
        el('button', { type: 'button', title: 'the admin token this page sends', onclick: askToken, text: 'token' }));
    }
    app.append(el('header', { class: 'top' }, el('span', { class: 'brand', text: 'AgentJet' }), nav, status));
    view = el('main', { id: 'view' });
    app.append(view);
  }
  function markNav(name) {
    document.querySelectorAll('header.top nav a').forEach((a) => a.classList.toggle('on', a.dataset.view === name));
  }
  function showError(where, e) {
    where.append(el('div', { class: 'error', text: describeError(e) }));
  }
  function describeError(e) {
    if (e instanceof ApiError && e.status === 401) {
      return 'This server needs its admin token (' + e.path + ': ' + e.message + '). Use the "token" button, or open the link the server printed (…/ui/?token=…).';
    }
    if (e instanceof ApiError) return e.path + ' → ' + (e.status ? 'HTTP ' + e.status + ': ' : '') + e.message;
    return String(e && e.message || e);
  }
  function askToken() {
    const t = prompt('Admin token of this server (empty to clear):', Auth.token || '');
    if (t === null) return;
    Auth.set(t.trim());
    route();
  }
  function ready(name, extra) {
    view.dataset.ready = name;
    window.__ajet = Object.assign({ view: name, at: performance.now() }, extra || {});
  }

  // ---------------------------------------------------------------- router
  function route() {
    stopTimers();
    window.onresize = null;  // the dashboard's resize handler belongs to the dashboard
    generation += 1;
    if (!view) frame();
    view.innerHTML = '';
    delete view.dataset.ready;
    document.querySelectorAll('body > .tip').forEach((t) => t.remove());  // a token's tooltip lives on <body>
    const hash = location.hash || '#/dashboard';
    const q = hash.indexOf('?');
    const path = hash.slice(1, q < 0 ? undefined : q);
    const params = new URLSearchParams(q < 0 ? '' : hash.slice(q + 1));
    if (!SNAP && path.startsWith('/episode/')) { markNav('episodes'); showEpisode(decodeURIComponent(path.slice(9))); }
    else if (!SNAP && path === '/episodes') { markNav('episodes'); showEpisodes(params); }
    else { markNav('dashboard'); showDashboard(); }
  }

  // ================================================================ dashboard
  // Which curves come first; the rest follow by name. Names are the metric names of
  // /metrics_history; per-task (name@task) series share their chart.
  const ORDER = [/^val\/(greedy_success|sampled_success)$/, /^val\/(pass_at_\d+|pass@\d+)$/, /reward/, /success|pass@|pass_at_/, /^val\//, /loss/,
    /(^|\/)kl/, /entropy/, /grad/, /(^|\/)lr$|learning_rate/, /clip/, /token|throughput/, /time|_s$|seconds/, /merge|compression/, /stale/];
  // "rollout/success_rate@calc": chart "rollout/success_rate", series "calc". A numeric suffix is part
  // of the name ("val/pass@4"), so "val/pass@4@calc" is pass@4's series for calc.
  function taskAt(name) { const at = name.lastIndexOf('@'); return at < 0 || /^\d+$/.test(name.slice(at + 1)) ? -1 : at; }
  function chartKey(name) { const at = taskAt(name); return at < 0 ? name : name.slice(0, at); }
  function seriesLabel(name) { const at = taskAt(name); return at < 0 ? 'all' : name.slice(at + 1); }
  function rank(key) { for (let i = 0; i < ORDER.length; i++) if (ORDER[i].test(key)) return i; return ORDER.length; }
  // Rates (success, accuracy, pass@k, shares, fractions): drawn on a fixed 0–1 axis in percent, so a
  // 100 → 99% drop looks as small as it is. A chart is a rate only while every value lies in [0, 1].
  const RATE = /success(?!_tasks)|pass_at_\d|pass@\d|accura|(^|[/_])acc($|_)|correct|caller_right|(^|[/_])rate$|fraction|(^|[/_])share$/;
  // Validations are few points, each an average over many tasks: never smoothed. Neither is any
  // series of fewer than SPARSE points, where an average would hide the last value.
  const SPARSE = 20;
  function isSparse(key, n) { return n < SPARSE || /^val\//.test(key); }
  function fmtPct(v) {
    if (!Number.isFinite(v)) return '–';
    return Number((v * 100).toFixed(1)).toString() + '%';
  }
  function fmtValue(v, rate) { return rate ? fmtPct(v) : fmtNum(v); }

  const store = { series: new Map(), names: [], globalStep: null, checkpoint: null };  // name -> {steps, values, times}
  function addPoints(name, rows) {
    let s = store.series.get(name);
    if (!s) { s = { steps: [], values: [], times: [] }; store.series.set(name, s); }
    for (const [step, value, time] of rows) {
      // rows come sorted by step; a row for an older step (a rare late write) is put in place
      if (s.steps.length && step < s.steps[s.steps.length - 1]) {
        const i = lowerBound(s.steps, step + 1);
        s.steps.splice(i, 0, step); s.values.splice(i, 0, value); s.times.splice(i, 0, time);
      } else { s.steps.push(step); s.values.push(value); s.times.push(time); }
    }
  }

  function smoothing() {
    const v = parseFloat(localStorage.getItem('ajet_smoothing'));
    return Number.isFinite(v) ? v : 0.6;
  }

  function showDashboard() {
    const g = generation;
    if (SNAP) {
      view.append(el('div', { class: 'banner' },
        'A snapshot of ' + (SNAP.title ? '"' + SNAP.title + '"' : 'a run') + ' at global step ' + (SNAP.global_step ?? '–') +
        (SNAP.generated_at ? ', written ' + fmtTime(SNAP.generated_at) : '') +
        '. While a run goes, its front serves the live page at /ui/.'));
    }
    const headline = el('div', { class: 'card headline', id: 'headline' });
    view.append(headline);
    const statusCard = el('div', { class: 'card', id: 'run-status' });
    if (!SNAP) view.append(statusCard);
    const filter = el('input', { type: 'search', placeholder: 'filter curves', id: 'curve-filter' });
    const slider = el('input', { type: 'range', min: '0', max: '0.99', step: '0.01', value: String(smoothing()), id: 'smoothing' });
    const sval = el('span', { text: smoothing().toFixed(2) });
    view.append(el('div', { class: 'toolbar' },
      el('label', { title: 'for series of ' + SPARSE + ' points or more, validations excepted; the raw points stay drawn' }, 'smoothing ', slider, ' ', sval),
      filter,
      el('span', { class: 'muted', id: 'curve-count' })));
    const grid = el('div', { class: 'charts', id: 'charts' });
    view.append(grid);
    const charts = new Map();  // key -> Chart (a chart folded into another's stays here, out of the page)
    const signatures = new Map();  // key -> {n, sig}: the values of the chart, to fold duplicates
    let shownCharts = 0;

    // Every step and value of a chart's series, as text: charts with equal signatures are one chart.
    function signature(k, names) {
      let n = 0;
      for (const name of names) n += store.series.get(name).steps.length;
      const old = signatures.get(k);
      if (old && old.n === n) return old.sig;
      const sig = names.map((name) => {
        const d = store.series.get(name);
        return seriesLabel(name) + ':' + d.steps.join(',') + ':' + d.values.map((v) => (Number.isFinite(v) ? v.toPrecision(9) : 'x')).join(',');
      }).join('|');
      signatures.set(k, { n, sig });
      return sig;
    }

    function draw() {
      const keys = new Map();
      for (const name of store.series.keys()) {
        const k = chartKey(name);
        if (!keys.has(k)) keys.set(k, []);
        keys.get(k).push(name);
      }
      for (const names of keys.values()) names.sort();
      const f = filter.value.trim().toLowerCase();
      const sorted = [...keys.keys()].sort((a, b) => rank(a) - rank(b) || a.localeCompare(b));
      // duplicates fold into the first chart (in this order) with the same values at every step
      const groups = new Map();  // signature -> [keys], the first key's chart draws them
      for (const k of sorted) {
        const sig = signature(k, keys.get(k));
        if (!groups.has(sig)) groups.set(sig, []);
        groups.get(sig).push(k);
      }
      let shown = 0;
      const primaries = new Set();
      for (const group of groups.values()) {
        const k = group[0];
        primaries.add(k);
        let c = charts.get(k);
        if (!c) { c = new Chart(k); charts.set(k, c); }
        c.setKeys(group);
        const visible = !f || group.some((name) => name.toLowerCase().includes(f));
        if (visible) shown += 1;
        c.root.style.display = visible ? '' : 'none';
        grid.append(c.root);  // keeps the order
        c.set(keys.get(k).map((n) => ({ name: n, label: seriesLabel(n), data: store.series.get(n) })));
        if (visible) c.render(parseFloat(slider.value));
      }
      for (const [k, c] of charts) if (!primaries.has(k)) c.root.remove();
      shownCharts = groups.size;
      const folded = sorted.length - groups.size;
      document.getElementById('curve-count').textContent = sorted.length
        ? shown + ' of ' + groups.size + ' charts' + (folded ? ' (' + folded + ' duplicate series folded)' : '') +
          (store.globalStep !== null ? ' · global step ' + store.globalStep : '')
        : '';
      if (!sorted.length && !grid.querySelector('.empty')) {
        grid.append(el('div', { class: 'muted empty', text: SNAP ? 'This run recorded no metrics.' : 'No metrics yet: curves appear once the first batch is trained (or a client posts /log_metrics).' }));
      } else if (sorted.length) {
        grid.querySelectorAll('.empty').forEach((e) => e.remove());
      }
      renderHeadline(headline);
    }
    slider.addEventListener('input', () => {
      sval.textContent = parseFloat(slider.value).toFixed(2);
      localStorage.setItem('ajet_smoothing', slider.value);
      draw();
    });
    filter.addEventListener('input', draw);
    let resizeTimer = null;
    // a resize redraws this view only: route() removes the handler and drops its pending timer
    window.onresize = () => { clearTimeout(resizeTimer); resizeTimer = later(draw, 150); };

    if (SNAP) {
      store.series.clear();
      for (const [name, rows] of Object.entries(SNAP.series || {})) addPoints(name, rows);
      store.globalStep = SNAP.global_step ?? null;
      store.checkpoint = SNAP.latest_checkpoint || null;
      draw();
      ready('dashboard', { curves: shownCharts });
      return;
    }

    let firstDone = false;
    async function poll() {
      try {
        const index = await api('/metrics_history');
        if (g !== generation) return;
        store.globalStep = index.global_step ?? null;
        const want = [];
        for (const n of index.names || []) {
          const s = store.series.get(n.name);
          const have = s ? s.steps.length : 0;
          if (n.points > have) want.push([n.name, have ? s.steps[s.steps.length - 1] : -1]);
        }
        // names with the same "after" step go in one request, at most 32 per request
        const byAfter = new Map();
        for (const [name, after] of want) { if (!byAfter.has(after)) byAfter.set(after, []); byAfter.get(after).push(name); }
        for (const [after, names] of byAfter) {
          for (let i = 0; i < names.length; i += 32) {
            const chunk = names.slice(i, i + 32);
            const q = '/metrics_history?name=' + chunk.map(encodeURIComponent).join(',') + '&after_step=' + after;
            const ans = await api(q);
            if (g !== generation) return;
            for (const [name, rows] of Object.entries(ans.series || {})) addPoints(name, rows);
          }
        }
        draw();
        const old = view.querySelector('#metrics-error');
        if (old) old.remove();
      } catch (e) {
        if (g !== generation) return;
        if (!view.querySelector('#metrics-error')) {
          const box = el('div', { class: 'error', id: 'metrics-error' });
          view.insertBefore(box, grid);
        }
        view.querySelector('#metrics-error').textContent = describeError(e);
      }
      if (!firstDone) { firstDone = true; ready('dashboard', { curves: shownCharts }); }
      later(poll, document.hidden ? POLL_MS * 5 : POLL_MS);
    }
    async function pollStatus() {
      try {
        const [pool, eng] = await Promise.all([api('/get_current_batch_rollout_pool_information'), api('/get_engine_status')]);
        if (g !== generation) return;
        renderStatus(statusCard, pool, eng);
        if ((eng.latest_checkpoint || null) !== store.checkpoint) { store.checkpoint = eng.latest_checkpoint || null; renderHeadline(headline); }
      } catch (e) {
        if (g !== generation) return;
        statusCard.innerHTML = '';
        showError(statusCard, e);
      }
      later(pollStatus, document.hidden ? POLL_MS * 5 : POLL_MS);
    }
    poll();
    pollStatus();
  }

  // ---------------------------------------------------------------- headline
  // What the run did, first: held-out success (greedy, sampled, pass@k) at the first validation and
  // at the last, and which model it ended with. The names are the validation's (docs/operations.md
  // "Metrics"): a classic run posts val/greedy_success, val/sampled_success and val/pass_at_<k>, a
  // multi-model run the pair's val/greedy_success, val/sampled_success and val/*_caller_right.
  const HEADLINE = [
    ['val/greedy_success', 'held-out success, greedy', 'temperature 0'],
    ['val/sampled_success', 'held-out success, sampled (T=1)', 'at the rollout temperature'],
    [/^val\/pass(?:_at_|@)(\d+)$/, 'held-out pass@', 'unbiased pass@k over the sampled episodes'],
    ['val/greedy_caller_right', 'caller right, greedy', 'multi-model: the caller model\'s part'],
    ['val/sampled_caller_right', 'caller right, sampled (T=1)', 'multi-model: the caller model\'s part'],
  ];
  function headlineRows() {
    const names = [...store.series.keys()];
    const rows = [];
    for (const [match, label, what] of HEADLINE) {
      let base = null, title = label;
      if (typeof match === 'string') {
        if (names.some((n) => chartKey(n) === match)) base = match;
      } else {  // pass@k: the largest k
        let best = -1;
        for (const n of names) {
          const m = chartKey(n).match(match);
          if (m && Number(m[1]) > best) { best = Number(m[1]); base = chartKey(n); }
        }
        if (base) title = label + best;
      }
      if (!base) continue;
      // the whole run first, then each task of a cocktail (name@task)
      const own = names.filter((n) => chartKey(n) === base).sort((a, b) => (taskAt(a) < 0 ? -1 : taskAt(b) < 0 ? 1 : a.localeCompare(b)));
      for (const n of own) {
        const d = store.series.get(n);
        const i0 = d.values.findIndex(Number.isFinite);
        if (i0 < 0) continue;
        let i1 = d.values.length - 1;
        while (!Number.isFinite(d.values[i1])) i1 -= 1;
        const rate = RATE.test(base) && d.values.every((v) => !Number.isFinite(v) || (v >= 0 && v <= 1));
        rows.push({ name: n, label: title + (taskAt(n) < 0 ? '' : ' · ' + seriesLabel(n)), what, rate, d, i0, i1 });
      }
    }
    return rows;
  }
  function renderHeadline(card) {
    const rows = headlineRows();
    card.innerHTML = '';
    card.append(el('div', { class: 'head-title', text: 'Held-out validation: first → last' }));
    if (rows.length) {
      const t = el('table', { class: 'headline-table' });
      t.append(el('tr', {}, el('th', { text: '' }), el('th', { class: 'num', text: 'first' }), el('th', { class: 'num', text: 'last' }),
        el('th', { class: 'num', text: 'change' })));
      for (const r of rows) {
        const v0 = r.d.values[r.i0], v1 = r.d.values[r.i1], s0 = r.d.steps[r.i0], s1 = r.d.steps[r.i1];
        const one = r.i0 === r.i1;
        const diff = v1 - v0;
        const change = one ? 'one validation so far'
          : r.rate ? (diff >= 0 ? '+' : '−') + Number(Math.abs(diff * 100).toFixed(1)) + ' points' : (diff >= 0 ? '+' : '−') + fmtNum(Math.abs(diff));
        t.append(el('tr', { 'data-metric': r.name, 'data-before': String(v0), 'data-after': String(v1), title: r.name + ': ' + r.what },
          el('td', { text: r.label }),
          el('td', { class: 'num' }, el('b', { text: fmtValue(v0, r.rate) }), el('span', { class: 'muted', text: ' step ' + s0 })),
          el('td', { class: 'num' }, one ? el('span', { class: 'muted', text: '–' }) : el('b', { text: fmtValue(v1, r.rate) }),
            one ? null : el('span', { class: 'muted', text: ' step ' + s1 })),
          el('td', { class: 'num change' + (one ? ' muted' : diff > 0 ? ' up' : diff < 0 ? ' down' : ''), text: change })));
      }
      card.append(t);
    } else {
      card.append(el('div', { class: 'muted', text: 'No held-out validation recorded yet (val/ metrics: a classic run validates before training and every test_freq steps).' }));
    }
    const model = el('div', { class: 'model', id: 'headline-model' });
    if (store.checkpoint) {
      model.append('model: ', el('b', { text: store.checkpoint.replace(/\/+$/, '') + '/model' }),
        el('span', { class: 'muted', text: ' (the latest checkpoint' + (SNAP ? ' when this page was written' : '') + ')' }));
    } else {
      model.append(el('span', { class: 'muted', text: 'model: no checkpoint yet' }));
    }
    if (store.globalStep !== null && store.globalStep !== undefined) model.append(' · global step ', el('b', { text: String(store.globalStep) }));
    card.append(model);
  }

  function renderStatus(card, pool, eng) {
    card.innerHTML = '';
    const top = document.getElementById('top-engine');
    if (top) top.innerHTML = '<b>' + esc(eng.engine_status || '?') + '</b> · step <b>' + esc(eng.global_step ?? '–') + '</b>';
    const kv = el('div', { class: 'kv' });
    const add = (k, v) => kv.append(el('span', {}, k + ' ', el('b', { text: v === null || v === undefined ? '–' : String(v) })));
    add('engine', eng.engine_status);
    add('global step', eng.global_step);
    add('backbone', pool.backbone);
    add('trigger', pool.sample_collection_method);
    add('running episodes', (pool.registered_episodes || 0) + (pool.claimed_episodes || 0));
    add('active clients', ((pool.swarm_client_instruction || {}).active_clients || []).length);
    add('model', pool.training_model_path);
    if (eng.latest_checkpoint) add('checkpoint', eng.latest_checkpoint);
    card.append(kv);
    if (eng.engine_status_detail) card.append(el('div', { class: 'muted', text: eng.engine_status_detail }));
    const bars = el('div', { class: 'progress', id: 'batch-progress' });
    const bar = (name, cur, target, chosen) => {
      const pct = target > 0 ? Math.min(100, (100 * cur) / target) : 0;
      bars.append(el('div', { class: 'bar' + (chosen ? ' chosen' : ''), 'data-name': name },
        el('span', { class: 'name', text: name + (chosen ? ' ◀' : '') }),
        el('span', { class: 'track' }, el('span', { class: 'fill', style: 'display:block;width:' + pct.toFixed(1) + '%' })),
        el('span', { class: 'num', text: (cur ?? 0) + ' / ' + (target ?? 0) })));
    };
    const m = pool.sample_collection_method || '';
    bar('episodes', pool.completed_episodes, pool.completed_episode_target, /episode/.test(m));
    bar('tasks', pool.completed_tasks, pool.completed_task_target, /task/.test(m) && !/non_dummy/.test(m));
    bar('non-dummy tasks', pool.completed_non_dummy_tasks, pool.completed_non_dummy_task_target, /non_dummy/.test(m));
    card.append(bars);
  }

  // ---------------------------------------------------------------- charts (own SVG)
  function niceStep(range, count) {
    const raw = range / Math.max(1, count);
    const p = Math.pow(10, Math.floor(Math.log10(raw)));
    const f = raw / p;
    return (f < 1.5 ? 1 : f < 3 ? 2 : f < 7 ? 5 : 10) * p;
  }
  function ticks(lo, hi, count, minStep) {
    if (!(hi > lo)) return [lo];
    const step = Math.max(niceStep(hi - lo, count), minStep || 0);
    const out = [];
    for (let v = Math.ceil(lo / step) * step; v <= hi + step * 1e-9; v += step) out.push(Math.abs(v) < step * 1e-9 ? 0 : v);
    return out;
  }
  function tickText(v, step) {
    const a = Math.abs(v);
    if (a >= 1e4 && Number.isInteger(v)) return (v / 1000).toString().replace(/\.0+$/, '') + 'k';
    const decimals = Math.max(0, Math.min(6, -Math.floor(Math.log10(step) + 1e-9)));
    if (a !== 0 && (a < 1e-3 || a >= 1e6)) return v.toExponential(1);
    return v.toFixed(decimals);
  }
  // TensorBoard's smoothing: an exponential moving average, debiased at the start. The slider's
  // weight is per point up to 300 points; beyond, it is stretched so that the line looks as smooth
  // at 10,000 points as at 300 (a 0.6 weight then averages over ~1% of the run instead of ~3 points).
  function emaWeight(w, n) { return n > 300 ? Math.pow(w, 300 / n) : w; }
  function ema(values, w) {
    const out = new Array(values.length);
    let last = 0, n = 0;
    for (let i = 0; i < values.length; i++) {
      const v = values[i];
      if (!Number.isFinite(v)) { out[i] = v; continue; }
      last = last * w + (1 - w) * v;
      n += 1;
      out[i] = w > 0 ? last / (1 - Math.pow(w, n)) : v;
    }
    return out;
  }
  // At most ~4 points per pixel column: first, min, max, last of each column, in order.
  function downsample(xs, ys, x0, x1, columns) {
    const n = xs.length;
    if (n <= columns * 4) return { xs, ys };
    const ox = [], oy = [];
    const span = x1 - x0 || 1;
    let i = 0;
    while (i < n) {
      const col = Math.floor(((xs[i] - x0) / span) * columns);
      let j = i, lo = i, hi = i;
      while (j < n && Math.floor(((xs[j] - x0) / span) * columns) === col) {
        if (ys[j] < ys[lo]) lo = j;
        if (ys[j] > ys[hi]) hi = j;
        j += 1;
      }
      const keep = [...new Set([i, lo, hi, j - 1])].sort((a, b) => a - b);
      for (const k of keep) { ox.push(xs[k]); oy.push(ys[k]); }
      i = j;
    }
    return { xs: ox, ys: oy };
  }

  class Chart {
    constructor(key) {
      this.key = key;
      this.keys = [key];
      this.series = [];
      this.name = el('span', { class: 'names', text: key });
      this.legend = el('span', { class: 'legend' });
      this.last = el('span', { class: 'last' });
      this.svgHost = el('div');
      this.root = el('div', { class: 'chart', 'data-name': key, 'data-names': key },
        el('div', { class: 'title' }, this.name, this.legend, this.last), this.svgHost);
      this.tip = null;
      this.root.addEventListener('mousemove', (ev) => this.hover(ev));
      this.root.addEventListener('mouseleave', () => this.unhover());
    }
    // The names this chart stands for: its own and those of the charts folded into it (same values).
    setKeys(keys) {
      if (keys.join(' ') === this.keys.join(' ')) return;
      this.keys = keys.slice();
      this.name.textContent = keys.join(' = ');
      this.name.title = keys.length > 1 ? 'equal at every step: ' + keys.join(', ') : '';
      this.root.dataset.names = keys.join(' ');
    }
    set(series) { this.series = series; }
    render(w) {
      const W = Math.max(280, Math.round(this.root.clientWidth - 16) || 420), H = 220;
      const m = { l: 54, r: 10, t: 8, b: 34 };
      const pw = W - m.l - m.r, ph = H - m.t - m.b;
      let x0 = Infinity, x1 = -Infinity, y0 = Infinity, y1 = -Infinity, points = 0;
      for (const s of this.series) {
        const d = s.data;
        points += d.steps.length;
        if (!d.steps.length) continue;
        x0 = Math.min(x0, d.steps[0]); x1 = Math.max(x1, d.steps[d.steps.length - 1]);
        for (const v of d.values) if (Number.isFinite(v)) { if (v < y0) y0 = v; if (v > y1) y1 = v; }
      }
      // a rate keeps its 0–1 axis; anything else fits its values
      // (a folded chart: when its own name is a rate, or at least half of its names are)
      const rateNames = this.keys.filter((k) => RATE.test(k)).length;
      const rate = Number.isFinite(y0) && (RATE.test(this.key) || 2 * rateNames >= this.keys.length) && y0 >= 0 && y1 <= 1;
      this.rate = rate;
      if (!Number.isFinite(x0)) { x0 = 0; x1 = 1; }
      if (x1 === x0) { x0 -= 1; x1 += 1; }
      let ylo, yhi;
      if (rate) { ylo = 0; yhi = 1; y0 = -0.03; y1 = 1.03; } else {
        if (!Number.isFinite(y0)) { y0 = 0; y1 = 1; }
        if (y1 === y0) { const d = Math.abs(y0) * 0.1 || 1; y0 -= d; y1 += d; }
        const pad = (y1 - y0) * 0.06; y0 -= pad; y1 += pad;
        ylo = y0; yhi = y1;
      }
      const X = (s) => m.l + ((s - x0) / (x1 - x0)) * pw;
      const Y = (v) => m.t + (1 - (v - y0) / (y1 - y0)) * ph;
      this.geom = { X, x0, x1, m, pw, W, H };
      const parts = [];
      parts.push(`<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 ${W} ${H}" class="chart-svg" data-name="${esc(this.key)}" data-names="${esc(this.keys.join(' '))}" data-points="${points}"` +
        ` data-axis="${rate ? 'rate' : 'auto'}" data-y0="${ylo}" data-y1="${yhi}" preserveAspectRatio="none">`);
      const yt = rate ? [0, 0.2, 0.4, 0.6, 0.8, 1] : ticks(y0, y1, 5), ys = yt.length > 1 ? yt[1] - yt[0] : (y1 - y0);
      for (const v of yt) parts.push(`<line class="grid" x1="${m.l}" x2="${W - m.r}" y1="${Y(v).toFixed(1)}" y2="${Y(v).toFixed(1)}"/><text x="${m.l - 5}" y="${(Y(v) + 3.5).toFixed(1)}" text-anchor="end">${esc(rate ? Math.round(v * 100) + '%' : tickText(v, ys))}</text>`);
      const xt = ticks(x0, x1, Math.max(2, Math.floor(pw / 80)), 1);  // steps are whole numbers
      const xs = xt.length > 1 ? xt[1] - xt[0] : 1;
      for (const v of xt) parts.push(`<line class="grid" y1="${m.t}" y2="${m.t + ph}" x1="${X(v).toFixed(1)}" x2="${X(v).toFixed(1)}"/><text x="${X(v).toFixed(1)}" y="${H - m.b + 14}" text-anchor="middle">${esc(tickText(v, xs))}</text>`);
      parts.push(`<line class="axis" x1="${m.l}" x2="${W - m.r}" y1="${m.t + ph}" y2="${m.t + ph}"/><line class="axis" x1="${m.l}" x2="${m.l}" y1="${m.t}" y2="${m.t + ph}"/>`);
      parts.push(`<text class="label" x="${m.l + pw / 2}" y="${H - 3}" text-anchor="middle">step</text>`);
      parts.push(`<text class="label" transform="translate(11 ${m.t + ph / 2}) rotate(-90)" text-anchor="middle">${esc(this.key.split('/').pop())}</text>`);
      this.legend.innerHTML = this.series.length > 1
        ? this.series.map((s, i) => `<i style="background:${PALETTE[i % PALETTE.length]}"></i>${esc(s.label)}`).join('')
        : '';
      // the last value of each series, as it is (never the smoothed one)
      const lasts = [];
      this.smoothed = new Set();
      this.series.forEach((s, i) => {
        const color = PALETTE[i % PALETTE.length];
        const d = s.data;
        const n = d.steps.length;
        if (!n) return;
        const smooth = w > 0 && !isSparse(this.key, n);
        if (smooth) this.smoothed.add(s.name);
        const path = (vals) => {
          const ds = downsample(d.steps, vals, x0, x1, pw);
          let p = '';
          for (let k = 0; k < ds.xs.length; k++) {
            if (!Number.isFinite(ds.ys[k])) continue;
            p += (p ? 'L' : 'M') + X(ds.xs[k]).toFixed(1) + ' ' + Y(ds.ys[k]).toFixed(1);
          }
          return p;
        };
        parts.push(`<path class="raw" data-series="${esc(s.name)}" data-n="${n}" stroke="${color}" stroke-opacity="${smooth ? (n > 1000 ? 0.22 : 0.35) : 1}" stroke-width="${smooth ? 1 : 1.8}" d="${path(d.values)}"/>`);
        if (smooth) parts.push(`<path class="smooth" stroke="${color}" d="${path(ema(d.values, emaWeight(w, n)))}"/>`);
        if (n <= 40) {
          for (let k = 0; k < n; k++) {
            if (Number.isFinite(d.values[k])) parts.push(`<circle cx="${X(d.steps[k]).toFixed(1)}" cy="${Y(d.values[k]).toFixed(1)}" r="2.6" fill="${color}"/>`);
          }
        }
        let k = n - 1;
        while (k >= 0 && !Number.isFinite(d.values[k])) k -= 1;
        if (k < 0) return;
        parts.push(`<circle class="last" data-series="${esc(s.name)}" data-value="${d.values[k]}" cx="${X(d.steps[k]).toFixed(1)}" cy="${Y(d.values[k]).toFixed(1)}" r="3.6" fill="#fff" stroke="${color}" stroke-width="1.8"/>`);
        lasts.push({ label: s.label, value: d.values[k], step: d.steps[k] });
      });
      parts.push(`<line class="cursor" y1="${m.t}" y2="${m.t + ph}" x1="-10" x2="-10"/></svg>`);
      this.svgHost.innerHTML = parts.join('');
      this.last.textContent = lasts.length === 1
        ? 'last ' + fmtValue(lasts[0].value, rate) + ' at step ' + lasts[0].step
        : lasts.length ? 'last ' + lasts.map((l) => l.label + ' ' + fmtValue(l.value, rate)).join(' · ') : '';
      this.last.dataset.value = lasts.length === 1 ? String(lasts[0].value) : '';
      this.smoothW = w;
    }
    hover(ev) {
      if (!this.geom || !this.series.length) return;
      const svg = this.svgHost.firstChild;
      if (!svg) return;
      const rect = svg.getBoundingClientRect();
      const { x0, x1, m, pw, W } = this.geom;
      const px = ((ev.clientX - rect.left) / rect.width) * W;
      if (px < m.l || px > m.l + pw) { this.unhover(); return; }
      const step = x0 + ((px - m.l) / pw) * (x1 - x0);
      const lines = [];
      let at = null;
      this.series.forEach((s) => {
        const d = s.data;
        if (!d.steps.length) return;
        let i = lowerBound(d.steps, step);
        if (i >= d.steps.length || (i > 0 && step - d.steps[i - 1] < d.steps[i] - step)) i = Math.max(0, i - 1);
        if (at === null) at = d.steps[i];
        let line = (this.series.length > 1 ? s.label + ': ' : '') + (this.rate ? fmtPct(d.values[i]) + '  (' + fmtNum(d.values[i], 5) + ')' : fmtNum(d.values[i], 5));
        if (this.smoothed.has(s.name)) line += '  (smoothed ' + fmtNum(ema(d.values.slice(0, i + 1), emaWeight(this.smoothW, d.steps.length))[i], 5) + ')';
        lines.push(line);
      });
      if (at === null) return;
      const cursor = svg.querySelector('.cursor');
      const cx = this.geom.X(at);
      cursor.setAttribute('x1', cx); cursor.setAttribute('x2', cx);
      if (!this.tip) { this.tip = el('div', { class: 'tip' }); this.root.append(this.tip); }
      this.tip.textContent = 'step ' + at + '\n' + lines.join('\n');
      const left = ((cx / W) * rect.width) + 14;
      this.tip.style.left = Math.min(left, rect.width - 180) + 'px';
      this.tip.style.top = '28px';
    }
    unhover() {
      if (this.tip) { this.tip.remove(); this.tip = null; }
      const c = this.svgHost.querySelector('.cursor');
      if (c) { c.setAttribute('x1', -10); c.setAttribute('x2', -10); }
    }
  }

  // ================================================================ episodes
  const FILTERS = [
    ['step', 'step', 'narrow'], ['task', 'task', ''], ['client', 'client', ''], ['agent', 'agent', ''],
    ['status', 'status', ''], ['type', 'train / eval', 'narrow'], ['reward_min', 'reward ≥', 'narrow'],
    ['reward_max', 'reward ≤', 'narrow'], ['success', 'success', 'narrow'],
  ];
  function showEpisodes(params) {
    const g = generation;
    view.append(el('h1', { text: 'Episodes' }));
    const form = el('form', { class: 'filters card', id: 'episode-filters' });
    for (const [key, label, cls] of FILTERS) {
      let input;
      if (key === 'status') {
        input = el('select', { name: key });
        for (const v of ['', 'claimed', 'prepared', 'finished', 'aborted', 'reclaimed', 'dropped']) input.append(el('option', { value: v, text: v || 'any' }));
      } else if (key === 'type') {
        input = el('select', { name: key });
        for (const v of ['', 'train', 'eval']) input.append(el('option', { value: v, text: v || 'any' }));
      } else if (key === 'success') {
        input = el('select', { name: key });
        for (const v of ['', 'true', 'false']) input.append(el('option', { value: v, text: v || 'any' }));
      } else {
        input = el('input', { name: key, class: cls || null, type: 'text' });
      }
      input.value = params.get(key) || '';
      form.append(el('label', {}, label, input));
    }
    form.append(el('button', { type: 'submit', text: 'Filter' }),
      el('button', { type: 'button', text: 'Clear', onclick: () => { location.hash = '#/episodes'; } }));
    form.addEventListener('submit', (ev) => {
      ev.preventDefault();
      const p = new URLSearchParams();
      for (const [key] of FILTERS) { const v = form.elements[key].value.trim(); if (v) p.set(key, v); }
      location.hash = '#/episodes' + (p.toString() ? '?' + p : '');
    });
    view.append(form);
    const info = el('div', { class: 'pager' });
    const tableHost = el('div');
    view.append(info, tableHost);

    const q = new URLSearchParams();
    for (const [key] of FILTERS) if (params.get(key)) q.set(key, params.get(key));
    q.set('limit', params.get('limit') || '50');
    if (params.get('cursor')) q.set('cursor', params.get('cursor'));
    const page = parseInt(params.get('page') || '1', 10) || 1;
    api('/episodes?' + q).then((ans) => {
      if (g !== generation) return;
      const rows = ans.episodes || [];
      const total = ans.total === undefined ? '?' : ans.total.toLocaleString() + (ans.total_is_lower_bound ? '+' : '');
      info.append(el('span', { text: total + (ans.total === 1 ? ' episode' : ' episodes') + (page > 1 ? ' · page ' + page : '') }));
      const newer = el('button', { type: 'button', text: '← newer', disabled: page <= 1, onclick: () => history.back() });
      const older = el('button', {
        type: 'button', text: 'older →', disabled: !ans.next_cursor, id: 'older',
        onclick: () => {
          const p = new URLSearchParams(params);
          p.set('cursor', ans.next_cursor); p.set('page', String(page + 1));
          location.hash = '#/episodes?' + p;
        },
      });
      const newest = el('button', { type: 'button', text: 'newest', disabled: page <= 1, onclick: () => { const p = new URLSearchParams(params); p.delete('cursor'); p.delete('page'); location.hash = '#/episodes' + (p.toString() ? '?' + p : ''); } });
      info.append(newest, newer, older);
      const head = ['claimed', 'episode', 'step', 'task', 'type', 'status', 'reward', 'success', 'calls', 'tokens in / out', 'client', 'agents'];
      const numeric = new Set(['step', 'reward', 'calls', 'tokens in / out']);
      const html = ['<table class="list" id="episode-table"><thead><tr>', head.map((h) => `<th class="${numeric.has(h) ? 'num' : ''}">${esc(h)}</th>`).join(''), '</tr></thead><tbody>'];
      for (const r of rows) {
        const ok = r.is_success === true ? '<span class="pill ok">yes</span>' : r.is_success === false ? '<span class="pill bad">no</span>' : '–';
        html.push(`<tr data-uuid="${esc(r.uuid)}"><td>${esc(fmtTime(r.claimed_at))}</td><td><a href="#/episode/${encodeURIComponent(r.uuid)}">${esc(shortId(r.uuid))}</a></td>` +
          `<td class="num">${esc(r.global_step ?? '–')}</td><td>${esc(r.task_id)}</td><td>${esc(r.episode_type || '–')}</td><td>${esc(r.status)}</td>` +
          `<td class="num">${esc(fmtNum(r.reward))}</td><td>${ok}</td><td class="num">${esc(r.llm_calls ?? '–')}</td>` +
          `<td class="num">${esc((r.prompt_tokens ?? '–') + ' / ' + (r.completion_tokens ?? '–'))}</td><td title="${esc(r.client_uuid || '')}">${esc(shortId(r.client_uuid))}</td><td>${esc((r.agents || []).join(', '))}</td></tr>`);
      }
      html.push('</tbody></table>');
      tableHost.innerHTML = html.join('');
      if (!rows.length) tableHost.append(el('div', { class: 'muted', text: 'No episode matches.' }));
      tableHost.querySelector('tbody').addEventListener('click', (ev) => {
        const tr = ev.target.closest('tr');
        if (tr && !ev.target.closest('a')) location.hash = '#/episode/' + encodeURIComponent(tr.dataset.uuid);
      });
      ready('episodes', { rows: rows.length });
    }).catch((e) => { if (g === generation) { showError(view, e); ready('episodes', { error: true }); } });
  }

  // ================================================================ one episode: the token viewer
  // Upstream's colours: blue (#09ABCF) = in the loss, orange (#D98510) = masked; the opacity follows
  // the logprob, 0.333 at <= -7 up to 1 at 0.
  function alphaFor(lp) {
    if (!Number.isFinite(lp)) return 0.333;
    return 0.333 + 0.667 * Math.min(1, Math.max(0, (lp + 7) / 7));
  }
  // A token's text; control characters other than newline and tab show as \xNN (HTML would turn a
  // carriage return into a newline and a NUL into U+FFFD, so the page would not show what was trained).
  function pieceText(doc, pieces, ids, i) {
    if (pieces && pieces[i] !== undefined) return visibleControls(pieces[i]);
    return '⟨' + ids[i] + '⟩';
  }
  function visibleControls(s) {
    return s.replace(/[\u0000-\u0008\u000b-\u001f\u007f]/g, (c) => '\\x' + c.charCodeAt(0).toString(16).padStart(2, '0'));
  }
  function tokenHtml(ids, pieces, mask, logprobs, versions, doc) {
    const out = new Array(ids.length);
    for (let i = 0; i < ids.length; i++) {
      const generated = versions ? versions[i] >= 0 : mask[i] === 1;
      const cls = mask[i] === 1 ? 't' : generated ? 'g' : 'p';
      const style = cls === 'p' ? '' : ` style="--a:${alphaFor(logprobs[i]).toFixed(2)}"`;
      out[i] = `<span class="${cls}" data-i="${i}"${style}>${esc(pieceText(doc, pieces, ids, i))}</span>`;
    }
    return out.join('');
  }
  function contentText(content) {
    if (content === null || content === undefined) return '';
    if (typeof content === 'string') return content;
    if (Array.isArray(content)) {
      return content.map((p) => (typeof p === 'string' ? p : p && (p.text ?? (p.type ? '[' + p.type + ']' : JSON.stringify(p))))).join('');
    }
    return JSON.stringify(content, null, 2);
  }
  function prettyArgs(args) {
    if (typeof args !== 'string') return JSON.stringify(args, null, 2);
    try { return JSON.stringify(JSON.parse(args), null, 2); } catch (e) { return args; }
  }
  function messageNode(msg) {
    const role = msg.role || '?';
    const box = el('div', { class: 'msg ' + role });
    let head = role;
    if (msg.name) head += ' · ' + msg.name;
    if (msg.tool_call_id) head += ' · result of ' + msg.tool_call_id;
    box.append(el('div', { class: 'role', text: head }));
    const text = contentText(msg.content);
    if (msg.reasoning_content) box.append(el('pre', { class: 'muted', text: '(reasoning) ' + msg.reasoning_content }));
    if (text) box.append(el('pre', { text }));
    for (const tc of msg.tool_calls || []) {
      const f = tc.function || {};
      box.append(el('div', { class: 'toolcall', text: '→ ' + (f.name || tc.name || '?') + (tc.id ? '  [' + tc.id + ']' : '') + '\n' + prettyArgs(f.arguments ?? tc.arguments ?? '') }));
    }
    return box;
  }

  function showEpisode(uuid) {
    const g = generation;
    const t0 = performance.now();
    view.append(el('p', {}, el('a', { href: '#/episodes', text: '← episodes' })));
    api('/episodes/' + encodeURIComponent(uuid)).then((doc) => {
      if (g !== generation) return;
      const t1 = performance.now();
      renderEpisode(doc);
      // the time to build the page from the answer; the browser lays it out right after
      requestAnimationFrame(() => g === generation && ready('episode', { fetch_ms: t1 - t0, render_ms: performance.now() - t1, tokens: view.querySelectorAll('.tokens span').length }));
    }).catch((e) => { if (g === generation) { showError(view, e); ready('episode', { error: true }); } });
  }

  function renderEpisode(doc) {
    const samples = doc.samples || [];
    const calls = doc.calls || [];
    const d = doc.diagnostics || {};
    view.append(el('h1', { text: 'Episode ' + doc.episode_uuid }));
    const kv = el('div', { class: 'kv card' });
    const add = (k, v) => kv.append(el('span', {}, k + ' ', el('b', { text: v === null || v === undefined || v === '' ? '–' : String(v) })));
    add('task', doc.task_id); add('type', doc.episode_type); add('status', doc.status); add('reward', fmtNum(doc.reward));
    add('LLM calls', calls.length); add('training samples', samples.length);
    add('tokens before → after merging', (d.tokens_before ?? '–') + ' → ' + (d.tokens_after ?? '–'));
    if (d.compression_ratio) add('merge ratio', fmtNum(d.compression_ratio, 3) + '×');
    add('compare level', d.compare_level);
    view.append(kv);
    if (!doc.tokenizer) view.append(el('div', { class: 'banner', text: 'The front has no tokenizer loaded for this episode: tokens show as ⟨id⟩.' }));
    if (doc.calls_not_retained) view.append(el('div', { class: 'banner', id: 'calls-not-retained', text: doc.calls_not_retained.message }));

    // merge diagnostics
    if ((d.agents || []).length) {
      view.append(el('h2', { text: 'Merging' }));
      const rows = d.agents.map((a) => `<tr><td>${esc(a.agent_name)}${a.trainable ? '' : ' (not trained)'}</td><td>${a.calls}</td><td>${a.samples}</td><td>${a.tokens_before} → ${a.tokens_after}</td><td>${esc(fmtNum(a.compression_ratio, 3))}×</td><td>${a.generated_tokens}</td><td>${a.trained_tokens}</td><td>${a.duplicate_generated_tokens}</td><td>${a.untrained_generated_tokens}</td><td>${a.samples_dropped_by_cap}</td></tr>`);
      view.append(el('div', { class: 'card', html: '<table class="diag" id="merge-diagnostics"><thead><tr><th>agent</th><th>calls</th><th>samples</th><th>tokens before → after</th><th>ratio</th><th>generated</th><th>trained</th><th>duplicates</th><th>untrained</th><th>dropped</th></tr></thead><tbody>' + rows.join('') + '</tbody></table>' }));
      const branches = [];
      for (const a of d.agents) {
        for (const b of a.branches || []) {
          branches.push(`<li>${esc(a.agent_name)}: sample ${b.sample} branches from sample ${b.from_sample} at token ${b.position} — <b>${esc(b.kind)}</b>: ${esc(b.reason || '')}</li>`);
        }
      }
      if (branches.length) view.lastChild.append(el('ul', { class: 'branches', html: branches.join('') }));
    }

    // training samples, token by token
    view.append(el('h2', { text: 'Training samples' }));
    view.append(el('div', { class: 'legend-row' },
      el('span', {}, el('span', { class: 'sw', style: 'background:rgba(9,171,207,1)' }), 'trained (in the loss)'),
      el('span', {}, el('span', { class: 'sw', style: 'background:rgba(217,133,16,1)' }), 'generated, masked here (trained in another sample)'),
      el('span', {}, el('span', { class: 'sw', style: 'background:rgba(217,133,16,.13)' }), 'prompt / environment (masked)'),
      el('span', {}, 'opacity: logprob, faint at ≤ −7, full at 0 · hover or tap a token for its id, logprob, policy version and call')));
    samples.forEach((s) => {
      view.append(el('div', { class: 'sample-head' },
        el('b', { text: 'Sample ' + s.index }), el('span', { text: 'agent ' + s.agent_name + (s.trainable ? '' : ' (not trained)') }),
        el('span', { text: s.num_trained + ' of ' + s.num_tokens + ' tokens trained' }),
        el('span', { text: 'reward ' + fmtNum(s.reward) + ' · weight ' + fmtNum(s.weight) }),
        el('span', { text: 'from calls ' + (s.calls || []).join(', ') })));
      const box = el('div', { class: 'tokens', 'data-sample': String(s.index) });
      box.innerHTML = tokenHtml(s.token_ids || [], s.text_pieces, s.loss_mask || [], s.logprobs || [], s.policy_versions, doc);
      attachTokenTips(box, (i) => {
        const lp = (s.logprobs || [])[i];
        const pv = (s.policy_versions || [])[i];
        const masked = (s.loss_mask || [])[i] !== 1;
        return 'token ' + s.token_ids[i] + '  ' + JSON.stringify(pieceText(doc, s.text_pieces, s.token_ids, i)) +
          '\nloss mask ' + (masked ? '0 (masked)' : '1 (trained)') +
          '\nlogprob ' + (pv >= 0 ? fmtNum(lp, 4) + '  (p = ' + fmtNum(Math.exp(lp), 3) + ')' : 'n/a (not generated)') +
          '\npolicy version ' + (pv >= 0 ? pv : 'n/a') +
          '\ncall ' + ((s.source_calls || [])[i] ?? '–') + (pv >= 0 ? ' (generated it)' : ' (had it in its prompt)');
      });
      view.append(box);
    });
    if (!samples.length) view.append(el('div', { class: 'muted', text: 'No training samples (no calls, or the episode was retired and its calls deleted).' }));

    // the LLM calls as text
    view.append(el('h2', { text: 'LLM calls' }));
    calls.forEach((c) => {
      const det = el('details', { class: 'call', 'data-call': String(c.call_index) });
      det.append(el('summary', {
        text: 'Call ' + c.call_index + ' · ' + c.agent_name + ' · ' + (c.prompt_ids || []).length + ' prompt + ' + (c.completion_ids || []).length +
          ' completion tokens · finish ' + c.finish_reason + ' · ' + fmtNum(c.latency_ms, 4) + ' ms',
      }));
      const req = c.request || {};
      for (const msg of req.messages || []) det.append(messageNode(msg));
      if ((req.tools || []).length) det.append(el('div', { class: 'muted', text: 'tools: ' + req.tools.map((t) => (t.function || t).name).join(', ') }));
      det.append(el('div', { class: 'role muted', text: 'completion' }), el('pre', { class: 'text', text: c.completion_text || '' }));
      const comp = el('div', { class: 'tokens' });
      const n = (c.completion_ids || []).length;
      comp.innerHTML = tokenHtml(c.completion_ids || [], c.completion_pieces, new Array(n).fill(1), c.logprobs || [], c.policy_versions, doc);
      attachTokenTips(comp, (i) => 'token ' + c.completion_ids[i] + '  ' + JSON.stringify(pieceText(doc, c.completion_pieces, c.completion_ids, i)) +
        '\nlogprob ' + fmtNum((c.logprobs || [])[i], 4) + '\npolicy version ' + ((c.policy_versions || [])[i] ?? '–'));
      det.append(comp);
      view.append(det);
    });
  }

  // One listener per token box (not per token): 20,000 tokens stay cheap.
  function attachTokenTips(box, describe) {
    let tip = null, pinned = null;
    const place = (span, ev) => {
      if (!tip) { tip = el('div', { class: 'tip' }); document.body.append(tip); }
      tip.textContent = describe(parseInt(span.dataset.i, 10));
      const r = span.getBoundingClientRect();
      tip.style.left = Math.min(window.scrollX + r.left, window.scrollX + document.documentElement.clientWidth - 360) + 'px';
      tip.style.top = (window.scrollY + r.bottom + 6) + 'px';
    };
    box.addEventListener('mouseover', (ev) => {
      const span = ev.target.closest('span[data-i]');
      if (span && !pinned) place(span, ev);
    });
    box.addEventListener('mouseleave', () => { if (!pinned && tip) { tip.remove(); tip = null; } });
    box.addEventListener('click', (ev) => {  // tap on touch screens: pin, tap again to release
      const span = ev.target.closest('span[data-i]');
      if (pinned) pinned.classList.remove('sel');
      if (!span || span === pinned) { pinned = null; if (tip) { tip.remove(); tip = null; } return; }
      pinned = span; span.classList.add('sel');
      place(span, ev);
    });
  }

  // ---------------------------------------------------------------- start
  Auth.init();
  frame();
  window.addEventListener('hashchange', route);
  route();
})();
