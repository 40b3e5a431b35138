// Drives Debian's chromium (playwright-core from npm) through the front's web pages and checks what
// they render against what the API says. Run by tests/web/web_ui_test.cc against a real ajet-swarm
// with real episodes; prints one line per check and exits 1 on the first failure.
//
//   node ui_pages.mjs --url http://127.0.0.1:PORT --token T --out DIR [--snapshot FILE] [--long-snapshot FILE]
//                     [--shapes-snapshot FILE]
//
// Needs NODE_MODULES (scripts/npm-deps.sh prints it) and CHROMIUM (default /usr/bin/chromium).
// Screenshots go to DIR (dashboard.png, episodes.png, episode.png, snapshot.png, long_run.png, shapes.png).
import { createRequire } from 'module';
import path from 'path';

const args = {};
for (let i = 2; i < process.argv.length; i += 2) args[process.argv[i].replace(/^--/, '')] = process.argv[i + 1];
for (const k of ['url', 'token', 'out']) if (!args[k]) { console.error(`ui_pages: --${k} is required`); process.exit(2); }
const require = createRequire(path.join(process.env.NODE_MODULES || '', 'x.js'));
const { chromium } = require('playwright-core');

let checks = 0;
function check(ok, what) {
  checks += 1;
  if (!ok) { console.log(`FAIL ${what}`); throw new Error(what); }
  console.log(`ok   ${what}`);
}
async function api(p) {
  const r = await fetch(args.url + p, { headers: { Authorization: 'Bearer ' + args.token } });
  if (!r.ok) throw new Error(`${p}: HTTP ${r.status} ${await r.text()}`);
  return r.json();
}
// docs/views.md: "name@task" series share the chart "name"; a numeric suffix belongs to the name (pass@4)
function chartKey(name) {
  const at = name.lastIndexOf('@');
  return at < 0 || /^\d+$/.test(name.slice(at + 1)) ? name : name.slice(0, at);
}

const browser = await chromium.launch({ executablePath: process.env.CHROMIUM || '/usr/bin/chromium', args: ['--no-sandbox'] });
let failed = false;
try {
  const context = await browser.newContext({ viewport: { width: 1400, height: 1000 } });
  const page = await context.newPage();
  const errors = [];
  page.on('console', (m) => { if (m.type() === 'error') errors.push(m.text()); });
  page.on('pageerror', (e) => errors.push('page error: ' + e.message));
  const noErrors = (where) => { check(errors.length === 0, `${where}: no console errors ${errors.length ? JSON.stringify(errors) : ''}`); };

  // ---- dashboard: one chart per metric (per-task series share one), every point drawn
  const index = await api('/metrics_history');
  check(index.names.length > 0, `the front has metrics (${index.names.length} names)`);
  await page.goto(`${args.url}/ui/?token=${encodeURIComponent(args.token)}#/dashboard`);
  await page.waitForSelector('#view[data-ready="dashboard"]');
  await page.waitForFunction(() => document.querySelectorAll('#batch-progress .bar').length === 3);
  check(!(await page.url()).includes('token='), 'the token leaves the address bar');
  const want = new Map();
  for (const n of index.names) want.set(chartKey(n.name), (want.get(chartKey(n.name)) || 0) + n.points);
  // a chart stands for every metric with the same values at every step (data-names lists them)
  await page.waitForFunction((keys) => {
    const have = new Set([...document.querySelectorAll('svg.chart-svg')].flatMap((s) => s.dataset.names.split(' ')));
    return keys.every((k) => have.has(k));
  }, [...want.keys()]);
  const drawn = await page.$$eval('svg.chart-svg', (ss) => ss.map((s) => ({ names: s.dataset.names.split(' '), points: Number(s.dataset.points) })));
  for (const [key, points] of want) {
    const holders = drawn.filter((c) => c.names.includes(key));
    const got = holders.length === 1 ? holders[0].points : -1;
    check(got === points, `chart ${key}: ${got} points drawn (in ${holders.length} chart), the API has ${points}`);
  }
  check(drawn.length <= want.size, `${drawn.length} charts for ${want.size} metrics (duplicates folded)`);
  // the headline: held-out greedy success at the first and the last validation, before the charts
  const greedy = index.names.find((n) => n.name === 'val/greedy_success');
  if (greedy) {
    const first = (await api('/metrics_history?name=val/greedy_success')).series['val/greedy_success'];
    const row = await page.$eval('#headline tr[data-metric="val/greedy_success"]', (r) => ({ before: Number(r.dataset.before), after: Number(r.dataset.after), text: r.textContent })).catch(() => null);
    check(row && Math.abs(row.before - first[0][1]) < 1e-9 && Math.abs(row.after - first[first.length - 1][1]) < 1e-9,
      `headline: greedy success ${row && row.before} → ${row && row.after}, the API has ${first[0][1]} → ${first[first.length - 1][1]}`);
    check(await page.$eval('#headline', (h) => !!(h.compareDocumentPosition(document.getElementById('charts')) & Node.DOCUMENT_POSITION_FOLLOWING)),
      'headline: above the charts');
  }
  const ticks = await page.$$eval('svg.chart-svg text', (ts) => ts.map((t) => t.textContent));
  check(ticks.includes('step'), 'charts label their step axis');
  const engine = await page.textContent('#run-status');
  check(/ENGINE\.[A-Z_]+/.test(engine), 'engine status shown: ' + (engine.match(/ENGINE\.[A-Z_]+/) || [''])[0]);
  // hover over the first chart: a tooltip with a step
  const first = await page.$('svg.chart-svg');
  const box = await first.boundingBox();
  await page.mouse.move(box.x + box.width * 0.6, box.y + box.height * 0.5);
  const tip = await page.waitForSelector('.chart .tip', { timeout: 5000 }).then((e) => e.textContent()).catch(() => '');
  check(/^step \d+/.test(tip), 'a chart tooltip names the step: ' + JSON.stringify(tip.split('\n')[0]));
  await page.screenshot({ path: path.join(args.out, 'dashboard.png'), fullPage: true });
  noErrors('dashboard');

  // ---- episode list: one page of rows, paging by cursor
  // A resize just before leaving the dashboard (a full-page screenshot is one) must not redraw the
  // dashboard's charts into the next view: CI once saw "Cannot set properties of null" here.
  await page.evaluate(() => { window.dispatchEvent(new Event('resize')); location.hash = '#/episodes'; });
  await page.waitForSelector('#view[data-ready="episodes"]');
  const listed = await api('/episodes?limit=50');
  await page.goto(`${args.url}/ui/#/episodes`);
  await page.waitForSelector('#view[data-ready="episodes"]');
  const rows = await page.$$eval('#episode-table tbody tr', (trs) => trs.map((t) => t.dataset.uuid));
  check(rows.length === listed.episodes.length && rows.length > 0, `episode list: ${rows.length} rows, the API has ${listed.episodes.length}`);
  check(rows[0] === listed.episodes[0].uuid, 'episode list: newest first, as the API');
  await page.screenshot({ path: path.join(args.out, 'episodes.png'), fullPage: true });
  const small = await api('/episodes?limit=2');
  if (small.next_cursor) {
    await page.goto(`${args.url}/ui/#/episodes?limit=2`);
    await page.waitForSelector('#view[data-ready="episodes"]');
    await page.click('#older');
    await page.waitForFunction(() => location.hash.includes('cursor='));
    await page.waitForSelector('#view[data-ready="episodes"]');
    const page2 = await page.$$eval('#episode-table tbody tr', (trs) => trs.map((t) => t.dataset.uuid));
    const api2 = await api('/episodes?limit=2&cursor=' + encodeURIComponent(small.next_cursor));
    check(JSON.stringify(page2) === JSON.stringify(api2.episodes.map((e) => e.uuid)), 'the older page is the API\'s next cursor page');
  }
  // a filter narrows the list to one task
  const task = listed.episodes[0].task_id;
  await page.goto(`${args.url}/ui/#/episodes`);
  await page.waitForSelector('#view[data-ready="episodes"]');
  await page.fill('#episode-filters input[name="task"]', task);
  await page.click('#episode-filters button[type="submit"]');
  await page.waitForFunction(() => location.hash.includes('task='));
  await page.waitForSelector('#view[data-ready="episodes"]');
  const tasks = await page.$$eval('#episode-table tbody tr td:nth-child(4)', (tds) => tds.map((t) => t.textContent));
  check(tasks.length > 0 && tasks.every((t) => t === task), `the task filter shows only ${task} (${tasks.length} rows)`);
  noErrors('episode list');

  // ---- one episode: tokens, their mask classes, hover details, calls as text
  const withCalls = listed.episodes.find((e) => e.llm_calls >= 2) || listed.episodes.find((e) => e.llm_calls >= 1);
  check(!!withCalls, 'an episode with LLM calls is listed');
  const doc = await api('/episodes/' + withCalls.uuid);
  await page.goto(`${args.url}/ui/#/episodes`);
  await page.waitForSelector('#view[data-ready="episodes"]');
  await page.click(`#episode-table tr[data-uuid="${withCalls.uuid}"] td:nth-child(3)`);
  await page.waitForSelector('#view[data-ready="episode"]');
  for (const s of doc.samples) {
    const got = await page.$eval(`.tokens[data-sample="${s.index}"]`, (b) => ({
      all: b.querySelectorAll('span').length, t: b.querySelectorAll('span.t').length,
      g: b.querySelectorAll('span.g').length, p: b.querySelectorAll('span.p').length, text: b.textContent,
    }));
    const trained = s.loss_mask.filter((m) => m === 1).length;
    const generatedMasked = s.loss_mask.filter((m, i) => m === 0 && s.policy_versions[i] >= 0).length;
    check(got.all === s.num_tokens, `sample ${s.index}: ${got.all} tokens rendered, ${s.num_tokens} in the sample`);
    check(got.t === trained, `sample ${s.index}: ${got.t} trained (blue) tokens, loss mask has ${trained}`);
    check(got.g === generatedMasked && got.p === s.num_tokens - trained - generatedMasked,
      `sample ${s.index}: ${got.g} generated-but-masked and ${got.p} prompt tokens`);
    // the page shows control characters other than \n and \t as \xNN (docs/views.md)
    const visible = (t) => t.replace(/[\u0000-\u0008\u000b-\u001f\u007f]/g, (c) => '\\x' + c.charCodeAt(0).toString(16).padStart(2, '0'));
    if (doc.tokenizer) check(got.text === visible(s.text_pieces.join('')), `sample ${s.index}: the text is the pieces' text`);
  }
  // the first trained token with a visible width (an untrained model may generate empty pieces)
  const visibleAt = await page.$$eval('.tokens span.t', (ss) => ss.findIndex((s) => s.getBoundingClientRect().width > 0));
  check(visibleAt >= 0, 'a trained token is visible');
  const firstTrained = (await page.$$('.tokens span.t'))[visibleAt];
  await firstTrained.hover();
  const tokTip = await page.waitForSelector('body > .tip', { timeout: 5000 }).then((e) => e.textContent());
  const i = Number(await firstTrained.getAttribute('data-i'));
  const s0 = doc.samples.find((s) => s.loss_mask[i] === 1) || doc.samples[0];
  check(tokTip.includes('token ' + s0.token_ids[i]) && /logprob -?\d/.test(tokTip) && /policy version \d+/.test(tokTip) && /call \d+/.test(tokTip),
    'hovering a trained token shows its id, logprob, policy version and call: ' + JSON.stringify(tokTip.split('\n')));
  const calls = await page.$$eval('details.call', (ds) => ds.length);
  check(calls === doc.calls.length, `${calls} LLM calls listed, the episode has ${doc.calls.length}`);
  const diag = await page.$$eval('#merge-diagnostics tbody tr', (trs) => trs.length);
  check(diag === doc.diagnostics.agents.length, 'merge diagnostics: one row per agent');
  const toolDoc = doc.calls.some((c) => (c.request.messages || []).some((m) => m.role === 'tool'));
  if (toolDoc) {
    await page.$$eval('details.call', (ds) => ds.forEach((d) => { d.open = true; }));
    const toolText = await page.$$eval('.msg.tool pre', (ps) => ps.map((p) => p.textContent).join('\n'));
    check(toolText.length > 0, 'tool results are shown as text');
  }
  await page.screenshot({ path: path.join(args.out, 'episode.png'), fullPage: false });
  noErrors('episode page');

  // ---- without the token: the page says what is missing
  const anon = await browser.newContext();
  const ap = await anon.newPage();
  await ap.goto(`${args.url}/ui/#/episodes`);
  await ap.waitForSelector('#view[data-ready="episodes"]');
  const msg = await ap.textContent('.error');
  check(/admin token/.test(msg), 'without the token the page asks for the admin token');
  await anon.close();

  // ---- the static snapshot a classic run writes: same charts from inlined data
  if (args.snapshot) {
    const sp = await context.newPage();
    const serrors = [];
    sp.on('console', (m) => { if (m.type() === 'error') serrors.push(m.text()); });
    sp.on('pageerror', (e) => serrors.push(e.message));
    await sp.goto('file://' + path.resolve(args.snapshot));
    await sp.waitForSelector('#view[data-ready="dashboard"]');
    const n = await sp.$$eval('svg.chart-svg', (ss) => ss.length);
    check(n === drawn.length, `snapshot: ${n} charts, the live dashboard has ${drawn.length}`);
    check(serrors.length === 0, 'snapshot: no console errors ' + JSON.stringify(serrors));
    await sp.screenshot({ path: path.join(args.out, 'snapshot.png'), fullPage: true });
  }

  // ---- 10,000 steps stay readable: lines downsampled to the pixels, round ticks, smoothing on
  if (args['long-snapshot']) {
    const lp = await context.newPage();
    await lp.goto('file://' + path.resolve(args['long-snapshot']));
    await lp.waitForSelector('#view[data-ready="dashboard"]');
    const c = await lp.$eval('svg.chart-svg', (svg) => ({
      points: Number(svg.dataset.points),
      width: svg.viewBox.baseVal.width,
      raw: (svg.querySelector('path.raw').getAttribute('d').match(/[ML]/g) || []).length,
      smooth: svg.querySelectorAll('path.smooth').length,
      xticks: [...svg.querySelectorAll('text[text-anchor="middle"]:not(.label)')].map((t) => t.textContent),
      yticks: [...svg.querySelectorAll('text[text-anchor="end"]')].map((t) => t.textContent),
    }));
    check(c.points === 10000, `long run: all ${c.points} points are in the chart`);
    check(c.raw > 0 && c.raw <= 4 * c.width, `long run: the line is drawn with ${c.raw} vertices for ${c.width} px (at most 4 per pixel)`);
    check(c.smooth === 1, 'long run: a smoothed line over the faint raw one');
    // ticks: equally spaced by 1, 2 or 5 x 10^k ("2k" is 2000); x ticks first, then y ticks
    const value = (t) => (t.endsWith('k') ? Number(t.slice(0, -1)) * 1000 : Number(t));
    const nice = (vals) => {
      if (vals.length < 3 || vals.some((v) => !Number.isFinite(v))) return false;
      const d = vals[1] - vals[0];
      const mant = d / 10 ** Math.floor(Math.log10(d) + 1e-9);
      return [1, 2, 5].some((m) => Math.abs(mant - m) < 1e-6) &&
        vals.every((v, i) => i === 0 || Math.abs(v - vals[i - 1] - d) < d * 1e-6);
    };
    const xs = c.xticks.map(value), ys = c.yticks.map(value);
    check(nice(xs), 'long run: round step ticks ' + JSON.stringify(xs));
    check(nice(ys), 'long run: round value ticks ' + JSON.stringify(ys));
    await lp.screenshot({ path: path.join(args.out, 'long_run.png') });
  }
  // ---- a calc run's shapes: duplicates folded, sparse validations drawn as they are, rates on 0–1,
  // the headline first (web_ui_test.cc writes the fixture)
  if (args['shapes-snapshot']) {
    const sp = await context.newPage();
    const serrors = [];
    sp.on('console', (m) => { if (m.type() === 'error') serrors.push(m.text()); });
    sp.on('pageerror', (e) => serrors.push(e.message));
    await sp.goto('file://' + path.resolve(args['shapes-snapshot']));
    await sp.waitForSelector('#view[data-ready="dashboard"]');
    const charts = await sp.$$eval('svg.chart-svg', (ss) => ss.map((s) => ({
      names: s.dataset.names.split(' '), axis: s.dataset.axis, y0: Number(s.dataset.y0), y1: Number(s.dataset.y1),
      title: s.closest('.chart').querySelector('.title').textContent,
    })));
    const same = ['rollout/reward_mean', 'train/reward_mean', 'rollout/success_rate', 'workflow/success'];
    const holding = charts.filter((c) => c.names.some((n) => same.includes(n)));
    check(holding.length === 1 && same.every((n) => holding[0].names.includes(n) && holding[0].title.includes(n)),
      `shapes: 4 series equal at every step are one chart titled with all their names (${holding.length} charts: ${JSON.stringify(holding.map((c) => c.names))})`);
    check(charts.some((c) => c.names.length === 1 && c.names[0] === 'train/reward_max'),
      'shapes: a series that differs at one step keeps its own chart');
    const one = (name) => sp.$eval(`svg.chart-svg[data-names~="${name}"]`, (svg) => {
      const raw = svg.querySelector('path.raw');
      const vs = raw.getAttribute('d').match(/[ML][^ML]+/g).map((p) => p.slice(1).trim().split(/\s+/).map(Number));
      const last = svg.querySelector('circle.last');
      return {
        smooth: svg.querySelectorAll('path.smooth').length, rawOpacity: Number(raw.getAttribute('stroke-opacity')),
        lastVertex: vs[vs.length - 1], lastDot: [Number(last.getAttribute('cx')), Number(last.getAttribute('cy'))],
        lastValue: Number(last.dataset.value), readout: svg.closest('.chart').querySelector('.title .last').textContent,
        dots: [...svg.querySelectorAll('circle:not(.last)')].map((c) => Number(c.getAttribute('cy'))),
        plotHeight: svg.viewBox.baseVal.height,
        yticks: [...svg.querySelectorAll('text[text-anchor="end"]')].map((t) => t.textContent),
        axis: svg.dataset.axis, y0: Number(svg.dataset.y0), y1: Number(svg.dataset.y1),
      };
    });
    const val = await one('val/sampled_success');
    check(val.smooth === 0 && val.rawOpacity === 1, `shapes: a 4-point validation is not smoothed (its line is the points: ${val.smooth} smoothed lines, opacity ${val.rawOpacity})`);
    check(Math.abs(val.lastVertex[0] - val.lastDot[0]) < 0.2 && Math.abs(val.lastVertex[1] - val.lastDot[1]) < 0.2 && val.lastValue === 0.98 && val.readout.includes('98%'),
      `shapes: the validation line ends at its last value 0.98 (line ends at ${val.lastVertex}, the last point is at ${val.lastDot}, reads "${val.readout}")`);
    const greedy = await one('val/greedy_success');
    check(greedy.axis === 'rate' && greedy.y0 === 0 && greedy.y1 === 1 && greedy.yticks[0] === '0%' && greedy.yticks[greedy.yticks.length - 1] === '100%',
      `shapes: a success rate is drawn on a 0–1 axis (${greedy.axis} ${greedy.y0}..${greedy.y1}, ticks ${JSON.stringify(greedy.yticks)})`);
    const spread = Math.max(...greedy.dots) - Math.min(...greedy.dots);
    check(spread < 0.03 * greedy.plotHeight, `shapes: 100 → 99% moves the line ${spread.toFixed(1)} px of ${greedy.plotHeight}`);
    const loss = await one('train/loss');
    check(loss.axis === 'auto' && loss.y0 < 0.6 && loss.y1 > 1.9 && loss.y1 < 2.5, `shapes: a loss keeps an axis fitted to its values (${loss.y0}..${loss.y1})`);
    const dense = await one('rollout/reward_mean');
    check(dense.smooth === 1 && dense.rawOpacity > 0 && Math.abs(dense.lastValue - 0.66) < 1e-9 && dense.readout.includes('66%'),
      `shapes: a 30-point series is smoothed over its visible raw line, and reads its last raw value ("${dense.readout}")`);
    // the headline: first, held-out greedy / sampled / the largest pass@k, first → last, and the model
    const head = await sp.$eval('#headline', (h) => ({
      first: h.compareDocumentPosition(document.getElementById('charts')) & Node.DOCUMENT_POSITION_FOLLOWING,
      rows: [...h.querySelectorAll('tr[data-metric]')].map((r) => ({ metric: r.dataset.metric, before: Number(r.dataset.before), after: Number(r.dataset.after), text: r.textContent })),
      model: h.querySelector('#headline-model').textContent,
    })).catch(() => null);
    check(!!head && !!head.first, 'shapes: a headline panel above the charts');
    const row = (m) => head.rows.find((r) => r.metric === m) || { text: '' };
    check(row('val/greedy_success').before === 1 && row('val/greedy_success').after === 0.99 && /100%.*99%.*−1 points/.test(row('val/greedy_success').text),
      'shapes: headline greedy success 100% → 99%: ' + JSON.stringify(row('val/greedy_success').text));
    check(/61\.5%.*98%.*\+36\.5 points/.test(row('val/sampled_success').text), 'shapes: headline sampled success 61.5% → 98%: ' + JSON.stringify(row('val/sampled_success').text));
    check(/pass@4/.test(row('val/pass_at_4').text) && !head.rows.some((r) => r.metric === 'val/pass_at_1'), 'shapes: headline pass@k at the largest k: ' + JSON.stringify(row('val/pass_at_4').text));
    check(head.model.includes('/runs/calc/saved_checkpoints/global_step_30/model') && head.model.includes('global step 31'), 'shapes: headline names the model: ' + JSON.stringify(head.model));
    check(serrors.length === 0, 'shapes: no console errors ' + JSON.stringify(serrors));
    await sp.screenshot({ path: path.join(args.out, 'shapes.png'), fullPage: true });
  }
} catch (e) {
  failed = true;
  console.log('ui_pages: ' + (e.stack || e));
} finally {
  await browser.close();
}
console.log(`ui_pages: ${checks} checks${failed ? ', FAILED' : ', all passed'}`);
process.exit(failed ? 1 : 0);
