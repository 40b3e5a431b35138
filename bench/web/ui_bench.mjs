// Browser half of bench/web/ui_bench.py: opens the episode page of a small and a large episode `runs`
// times each (a fresh page every time) and times a naive renderer on the large one. Prints one JSON
// line: {small_total, small_render, large_total, large_render, naive_total, naive_render} (ms lists).
//   node ui_bench.mjs URL TOKEN SMALL_UUID LARGE_UUID RUNS   (NODE_MODULES, CHROMIUM from the env)
import { createRequire } from 'module';
import path from 'path';

const [url, token, small, large, runsText] = process.argv.slice(2);
const runs = Number(runsText || 5);
const require = createRequire(path.join(process.env.NODE_MODULES || '', 'x.js'));
const { chromium } = require('playwright-core');
const browser = await chromium.launch({ executablePath: process.env.CHROMIUM || '/usr/bin/chromium', args: ['--no-sandbox'] });
const out = { small_total: [], small_render: [], large_total: [], large_render: [], naive_total: [], naive_render: [] };

async function openEpisode(uuid) {
  const context = await browser.newContext({ viewport: { width: 1400, height: 1000 } });
  const page = await context.newPage();
  await page.goto(`${url}/ui/?token=${encodeURIComponent(token)}#/episode/${uuid}`);
  await page.waitForSelector('#view[data-ready="episode"]', { timeout: 60000 });
  const r = await page.evaluate(() => window.__ajet);
  if (r.error) throw new Error('the page showed an error');
  await context.close();
  return { total: r.at, render: r.render_ms, tokens: r.tokens };
}

// The same tokens, one element and three listeners per token, then a layout and a frame.
async function naive(uuid) {
  const context = await browser.newContext({ viewport: { width: 1400, height: 1000 } });
  const page = await context.newPage();
  await page.goto(`${url}/ui/?token=${encodeURIComponent(token)}#/dashboard`);
  const r = await page.evaluate(async ([uuid, token]) => {
    const t0 = performance.now();
    const doc = await (await fetch('/episodes/' + uuid, { headers: { Authorization: 'Bearer ' + token } })).json();
    const t1 = performance.now();
    const view = document.getElementById('view');
    view.innerHTML = '';
    for (const s of doc.samples) {
      const box = document.createElement('div');
      box.className = 'tokens';
      for (let i = 0; i < s.token_ids.length; i++) {
        const span = document.createElement('span');
        span.className = s.loss_mask[i] ? 't' : 'p';
        span.style.setProperty('--a', String(0.333 + 0.667 * Math.min(1, Math.max(0, (s.logprobs[i] + 7) / 7))));
        span.textContent = s.text_pieces ? s.text_pieces[i] : String(s.token_ids[i]);
        span.title = 'logprob ' + s.logprobs[i];
        span.addEventListener('mouseover', () => span.classList.add('sel'));
        span.addEventListener('mouseout', () => span.classList.remove('sel'));
        span.addEventListener('click', () => console.log(i));
        box.appendChild(span);
      }
      view.appendChild(box);
    }
    void document.body.offsetHeight;
    await new Promise((res) => requestAnimationFrame(() => res()));
    const t2 = performance.now();
    return { total: t2 - t0, render: t2 - t1 };
  }, [uuid, token]);
  await context.close();
  return r;
}

try {
  for (let i = 0; i < runs; i++) {
    const a = await openEpisode(small);
    out.small_total.push(a.total); out.small_render.push(a.render);
    const b = await openEpisode(large);
    out.large_total.push(b.total); out.large_render.push(b.render);
    const c = await naive(large);
    out.naive_total.push(c.total); out.naive_render.push(c.render);
  }
} finally {
  await browser.close();
}
console.log(JSON.stringify(out));
