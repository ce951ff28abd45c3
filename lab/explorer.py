"""
The depth explorer: `python evaluate.py DIR... --html FILE` writes one self-contained page of what a looped model
does at every depth: acc[n][K] (metrics.py), exact match at every test length n and loop count K. Three views, by
tab or by the URL's hash (`FILE#view=run&run=3&cmp=5`; `&tip=i,j` hovers a cell, for a screenshot or a test):

    runs     every run as a point per schedule (Oracle / val-K / policy OOD, K = 1 or the loop's gain; all samples
             and the hard subset); a click opens the run, shift-click compares with it
    run      acc[n][K] as a heatmap (the hard subset's beside it) with n_max, the policy, oracle and stable depths
             and the K = 1 column with what the loop adds; a second run beside it, and their difference
    sample   runs with a ckpt.pt only: a few fixed test samples of one length with the answer at every K

Plain HTML, SVG and a short inline script: no dependency, no network, a page of 169 runs is ~0.9 MB (plotly's bundle
alone is 3.5 MB). A page is passed around: each hash value is one the page allows or its default, and what the
views write into the page is escaped text or a number. Values are rounded to 3 decimals.
"""

import json
import os

import metrics
from tasks import eval_set
from lab import tables
from lab.files import atomic_write
from lab.records import load_run

SAMPLES = 6  # test samples per length in the sample view, half of them from the hard subset where there is one


def r3(v: float | None) -> float | None:
    return None if v is None else round(v, 3)


def group(e: dict) -> str:
    """The schedule and its depth knobs ("window w=5", "fixed c=20"): the column of a run in the runs view."""
    k = dict(tables.run_key(e))
    return " ".join([k["schedule"]] + [f"{f}={tables.value(k[f])}" for f in tables.PRIMARY.get(k["schedule"], ()) if f in k])


def run_data(e: dict) -> dict:
    """What the views draw of one eval.json: the matrices, the per-length marks and the run's summaries."""
    m, hard, cuts = e["metrics"], e.get("hard_acc"), e.get("shortcuts") or {}
    best = [max(((v[i], k) for k, v in cuts.items() if v[i] is not None), default=(None, None))
            for i in range(len(e["lengths"]))]  # the best shortcut at each length: (score, name)
    return {"dir": e["run_dir"], "group": group(e), "seed": e["seed"], "n_max": e["n_max"], "n": e["lengths"],
            "K": e["K"], "acc": [[r3(a) for a in row] for row in e["acc"]],
            "hard": hard and [row and [r3(a) for a in row] for row in hard],
            # the oracle depth: the column of max_K acc[n][K], the smallest K among ties (metrics.argmax_first)
            "ok": [metrics.argmax_first(row) for row in e["acc"]],
            "okh": hard and [row and metrics.argmax_first(row) for row in hard],
            "pd": [r3(d) for d in m.get("policy_depth", [])] or None, "stable": m["stable_interval"],
            "cut": [r3(s) for s, _ in best], "cutname": [k for _, k in best],
            "hard_frac": [r3(v) for v in m.get("hard_frac", [])] or None,
            "cut_hard": r3(m.get("shortcut_hard_ood")), "cut_hard_name": m.get("shortcut_hard_ood_name"),
            "sum": {k: r3(m.get(k)) for k in ("oracle_ood", "val_k_ood", "policy_ood", "oracle_hard_ood", "val_k_hard_ood",
                                              "policy_hard_ood", "shortcut_ood", "shortcut_hard_ood", "policy_id",
                                              # depth use (metrics.depth_use): K = 1, the loop's gain, settle K
                                              "k1_ood", "loop_gain_ood", "settle_k_ood", "k1_hard_ood",
                                              "loop_gain_hard_ood", "settle_k_hard_ood")}}


def sample_data(e: dict) -> dict | None:
    """{n: [sample]} of a run with a ckpt.pt (else None): SAMPLES samples of each length of eval.json's test set, each
    with input, target, policy depth, right/wrong at every K ("0110..") and its answers as segments [K0, K1, tokens]."""
    if not os.path.isfile(os.path.join(e["run_dir"], "ckpt.pt")):
        return None
    cfg, task, model, schedule = load_run(e["run_dir"], e["config"])
    if hasattr(schedule, "score_set"):  # ntp.py's baselines decode at one fixed depth: no trajectory to show
        return None
    out = {}
    for n, (x, y, _, Tn) in eval_set(task, e["lengths"], cfg["eval_samples"], cfg["eval_seed"]).items():
        items = list(metrics.samples({n: (x, y, None, None)}))  # (n, prompt, answer) without padding
        hard = [bool(task.hard(p)) for _, p, _ in items]
        pick = [i for i, h in enumerate(hard) if h][:SAMPLES // 2]
        pick = sorted(pick + [i for i in range(len(items)) if i not in pick][:SAMPLES - len(pick)])
        ok, preds, depth = metrics.trajectory_correct(model, schedule, x[pick], y[pick], Tn[pick], cfg["T_test"])
        out[n] = []
        for j, i in enumerate(pick):
            segs = []
            for k, p in enumerate(preds[:, j].tolist(), 1):  # p: the K-th answer, -1 at unscored positions
                a = [task.vocab[t] for t in p if t != -1]
                if segs and segs[-1][2] == a:
                    segs[-1][1] = k
                else:
                    segs.append([k, k, a])
            out[n].append({"x": [task.vocab[t] for t in items[i][1]], "y": [task.vocab[t] for t in items[i][2]],
                           "hard": hard[i], "depth": int(depth[j]), "ok": "".join("01"[c] for c in ok[:, j].tolist()),
                           "segs": segs})
    return out


def finite_json(v) -> bool:
    """Whether json.dumps(v, allow_nan=False) holds: no NaN or infinity anywhere in v."""
    try:
        json.dumps(v, allow_nan=False)
        return True
    except ValueError:
        return False


def write(path: str, evals: list, title: str) -> None:
    """The page of the runs (one task) to path, written atomically."""
    if len({e["task"] for e in evals}) > 1:
        raise ValueError(f"--html shows one task a page; these runs hold {', '.join(sorted({e['task'] for e in evals}))}: "
                         f"name the folders of one task")
    runs = [run_data(e) | {"samples": sample_data(e)} for e in evals]
    try:  # never NaN or Infinity in the page: JSON.parse rejects them, and every view would be blank
        data = json.dumps({"task": evals[0]["task"], "title": title, "runs": runs}, separators=(",", ":"), allow_nan=False)
    except ValueError:
        bad = [e["run_dir"] for e, r in zip(evals, runs) if not finite_json(r)]
        raise ValueError(f"--html: {', '.join(bad) or 'a run'} holds a non-finite number (NaN or Infinity), which "
                         f"the page's JSON cannot hold; nothing written") from None
    html = PAGE.replace("/*DATA*/", data.replace("<", "\\u003c"))  # a "</script>" or "<!--" in a string would end the block
    atomic_write(path, lambda f: f.write(html.encode()))


PAGE = """<!doctype html><html><head><meta charset="utf-8"><title>depth explorer</title><style>
body{font:13px system-ui,sans-serif;margin:10px 16px;color:#222} h2{margin:4px 0} .note{color:#555;margin:3px 0}
nav{margin:8px 0 10px} nav a,.len a{margin-right:6px;padding:3px 9px;border-radius:4px;background:#e8e8ee;cursor:pointer}
nav a.on,.len a.on{background:#334;color:#fff} section{display:none} section.on{display:block}
#tip{position:fixed;pointer-events:none;background:#fff;border:1px solid #888;padding:4px 7px;display:none}
.pair{display:flex;gap:12px;flex-wrap:wrap;align-items:flex-start} svg text{font-size:11px;fill:#333}
.smp{display:inline-block;vertical-align:top;width:660px;margin:0 14px 14px 0;font:12px monospace}
.lab{display:inline-block;width:78px;color:#666} .r{background:#c6eac6} .w{background:#f29a9a;color:#800;font-weight:bold}
#js-error{color:#b00;font-weight:bold}
</style></head><body><script>window.onerror = function (m) {  // an error marker a test finds in the DOM
  const p = document.createElement('p'); p.id = 'js-error'; p.textContent = 'script error: ' + m; document.body.prepend(p);
};</script>
<h2 id="title"></h2><p class="note" id="about"></p>
<nav><a id="tab-runs" onclick="go({view: 'runs'})">across runs</a><a id="tab-run" onclick="go({view: 'run'})">one run:
acc[n][K]</a><a id="tab-sample" onclick="go({view: 'sample'})">samples</a></nav>
<section id="runs"></section><section id="run"></section><section id="sample"></section><div id="tip"></div>
<script type="application/json" id="data">/*DATA*/</script><script>
const D = JSON.parse(document.getElementById('data').textContent), R = D.runs, $ = id => document.getElementById(id);
const pct = v => v == null ? '-' : (100 * v).toFixed(1) + '%', num = v => v == null ? '-' : v.toFixed(1) + '%';
// Everything the views write into innerHTML is escaped text or a number: the strings of the data here, once
// (a token when drawn), every number forced to a finite number or null, and the hash state checked in read()
const ESC = {'&': '&amp;', '<': '&lt;', '>': '&gt;', '"': '&quot;', "'": '&#39;'};
const esc = t => String(t).replace(/[&<>"']/g, c => ESC[c]);  // a token or a path as text, never as markup
const join = a => a.map(esc).join(a.every(t => t.length == 1) ? '' : ' ');  // one-character tokens without spaces
const nums = v => Array.isArray(v) ? v.map(nums) : typeof v == 'number' && isFinite(v) ? v : null;
R.forEach(r => {
  r.dir = esc(r.dir); r.group = esc(r.group); r.cutname = r.cutname.map(c => c && esc(c));
  r.cut_hard_name = r.cut_hard_name && esc(r.cut_hard_name);
  for (const k of ['seed', 'n_max', 'n', 'K', 'acc', 'ok', 'stable', 'cut']) r[k] = nums(r[k]);
  for (const k of ['hard', 'okh', 'pd', 'hard_frac']) r[k] = r[k] && r[k].map(v => v && nums(v));
  r.cut_hard = nums(r.cut_hard);
  for (const k in r.sum) r.sum[k] = nums(r.sum[k]);
  for (const n in r.samples || {}) for (const x of r.samples[n]) {
    x.depth = nums(x.depth); x.ok = String(x.ok).replace(/[^01]/g, '0'); x.segs = x.segs.map(([k0, k1, a]) => [nums(k0), nums(k1), a]);
  }
});
const VIRIDIS = [[68, 1, 84], [59, 82, 139], [33, 145, 140], [94, 201, 98], [253, 231, 37]];
const RED_BLUE = [[202, 0, 32], [247, 247, 247], [5, 113, 176]];
function mix(stops, t) {  // the colour at t in [0, 1] along the stops
  const u = Math.max(0, Math.min(1, t)) * (stops.length - 1), i = Math.min(Math.floor(u), stops.length - 2), f = u - i;
  return 'rgb(' + stops[i].map((c, j) => Math.round(c + f * (stops[i + 1][j] - c))).join(',') + ')';
}
const acc = a => a == null ? '#e4e4e4' : mix(VIRIDIS, a);
const diff = d => d == null ? '#e4e4e4' : mix(RED_BLUE, 0.5 + d);  // full colour at 50 pp

// the metrics of the runs view (k1: the accuracy at K = 1; loop_gain: Oracle minus it, in points)
const METRICS = {oracle: 'Oracle', val_k: 'val-K', policy: 'policy', k1: 'K = 1', loop_gain: "the loop's gain (points),"};
let S = {};  // the state, read from the hash: view, run, cmp (the run compared with), m (the metric), n (a length), tip
function read() {  // a page is a file people pass around: each value of the hash is one the page allows, or the default
  const h = new URLSearchParams(location.hash.slice(1)), int = k => /^[0-9]{1,9}$/.test(h.get(k) || '') ? +h.get(k) : null;
  const one = (k, allowed, dflt) => allowed.includes(h.get(k)) ? h.get(k) : dflt;
  const run = int('run'), cmp = int('cmp'), tip = h.get('tip') || '';
  S = {view: one('view', ['runs', 'run', 'sample'], R.length === 1 ? 'run' : 'runs'),  // one run: its acc[n][K]
       run: run != null && run < R.length ? run : 0,
       cmp: cmp != null && cmp < R.length ? cmp : null, m: one('m', Object.keys(METRICS), 'oracle'), n: int('n'),
       tip: /^[0-9]{1,4},[0-9]{1,4}$/.test(tip) ? tip : null};  // n: one of the run's lengths, checked where it is used
}
function go(change) {
  location.hash = Object.entries({...S, tip: null, ...change}).filter(e => e[1] != null).map(e => e.join('=')).join('&');
}

// --- one run: acc[n][K] -------------------------------------------------------------------------------------
// one heatmap: rows n, columns K, cell width w; marks: policy depth, oracle depth, stable K (the ID/OOD line always)
function heat(r, ri, which, M, colour, title, w, marks) {
  const L = 40, T = 32, H = 17, nK = r.K.length, X = j => L + j * w, loop = marks && nK > 1 && r.K[0] == 1;
  let s = `<svg width=${Math.max(X(nK) + (loop ? 150 : 70), 240)} height=${T + r.n.length * H + 8} data-run=${ri} ` +
    `data-which=${which}><text x=${L} y=11 font-weight=bold>${title}</text><text x=${L - 5} y=${T - 5} ` +
    `text-anchor=end>n↓ K→</text>` + (marks ? `<text x=${X(nK) + 4} y=${T - 5}>stable K</text>` : '') +
    (loop ? `<text x=${X(nK) + 92} y=${T - 5} text-anchor=middle>K=1</text>` +
            `<text x=${X(nK) + 126} y=${T - 5} text-anchor=middle>+loop</text>` : '');
  r.K.forEach((k, j) => {
    if (k == r.K[0] || k % 5 == 0) s += `<text x=${X(j) + w / 2} y=${T - 5} text-anchor=middle>${k}</text>`;
  });
  r.n.forEach((n, i) => {
    const y = T + i * H, row = M[i] || [];
    s += `<text x=${L - 5} y=${y + H - 5} text-anchor=end>${n}</text>`;
    r.K.forEach((_, j) => s += `<rect x=${X(j)} y=${y} width=${w} height=${H} fill="${colour(row[j])}" data-i=${i} data-j=${j} />`);
    if (!marks || !M[i]) return;
    const ok = (which == 'hard' ? r.okh : r.ok)[i], stable = which == 'hard' ? row.filter(a => a >= 0.9).length : r.stable[i];
    s += `<rect x=${X(ok) + 1} y=${y + 1} width=${w - 2} height=${H - 2} fill=none stroke="#e8178a" stroke-width=2 />`;
    if (r.pd) s += `<circle cx=${X(r.pd[i] - r.K[0]) + w / 2} cy=${y + H / 2} r=3.5 fill=#fff stroke=#000 />`;
    s += `<text x=${X(nK) + 22} y=${y + H - 5} text-anchor=middle>${stable}</text>`;
    // depth use at n: the K = 1 column's accuracy, and what the loop adds to it (best K minus K = 1, points)
    if (loop) s += `<text x=${X(nK) + 92} y=${y + H - 5} text-anchor=middle data-k1=${i}>${(100 * row[0]).toFixed(0)}%</text>` +
      `<text x=${X(nK) + 126} y=${y + H - 5} text-anchor=middle>+${(100 * (Math.max(...row) - row[0])).toFixed(0)}</text>`;
  });
  const y = T + r.n.filter(n => n <= r.n_max).length * H, line = `x1=${L - 30} x2=${X(nK) + 40} y1=${y} y2=${y}`;
  return s + `<line ${line} stroke=#fff stroke-width=3 /><line ${line} stroke=#000 stroke-dasharray=4,3 />` +
    `<text x=${X(nK) + 42} y=${y + 4}>OOD</text></svg>`;  // the ID/OOD boundary: n <= n_max above it
}
const same = (a, b) => JSON.stringify([a.n, a.K]) == JSON.stringify([b.n, b.K]);
const minus = (A, B) => A.map((row, i) => row && B[i] && row.map((a, j) => a == null || B[i][j] == null ? null : B[i][j] - a));
const options = (ids, x) => ids.map(i => `<option value=${i} ${i === x ? 'selected' : ''}>${R[i].dir}</option>`).join('');
function depthUse(r) {  // the run's depth use in words (metrics.py): what one loop step answers, what the loop adds
  const u = r.sum, d = v => v == null ? '-' : v.toFixed(1);
  if (u.k1_ood == null) return '';
  return `. <span class=depth>Depth use, OOD: K = 1 ${num(u.k1_ood)} → best ${num(u.oracle_ood)} (the loop adds ` +
    `${d(u.loop_gain_ood)} points; answers settle by K = ${u.settle_k_ood})` + (u.k1_hard_ood == null ? '' :
    `; hard subset ${num(u.k1_hard_ood)} → ${num(u.oracle_hard_ood)} (+${d(u.loop_gain_hard_ood)})`) + '</span>';
}
function runView() {
  const a = R[S.run], b = R[S.cmp], w = b ? 11 : 14, all = R.map((_, i) => i);
  const about = r => `<b>${r.dir}</b>: ${r.group}, seed ${r.seed}; ID ${num(r.sum.policy_id)}, ` +
    `Oracle OOD ${num(r.sum.oracle_ood)}` + (r.hard ? `, hard-subset Oracle OOD ${num(r.sum.oracle_hard_ood)} ` +
    `(shortcut ${num(r.sum.shortcut_hard_ood)})` : '') + depthUse(r);
  let s = `<p>run <select id=pick-run>${options(all, S.run)}</select> compare with <select id=pick-cmp>` +
    `<option value="">none</option>${options(all, S.cmp)}</select></p><p class=note>A: ${about(a)}</p>` +
    (b ? `<p class=note>B: ${about(b)}</p>` : '');
  for (const row of b ? [['acc'], ['hard']] : [['acc', 'hard']]) {  // one run: side by side; two: A, B and B - A a row
    s += '<div class=pair>';
    for (const k of row.filter(k => a[k])) {
      const name = k == 'acc' ? 'all samples' : 'hard subset';
      s += heat(a, S.run, k, a[k], acc, (b ? 'A: ' : '') + name, w, true);
      if (!b || !b[k]) continue;
      s += heat(b, S.cmp, k, b[k], acc, 'B: ' + name, w, true) + (same(a, b) ?
        heat(a, S.run, 'd' + k, minus(a[k], b[k]), diff, 'B - A (blue: B better)', w, false) :
        '<p class=note>B - A: the runs were tested on different grids</p>');
    }
    s += '</div>';
  }
  const bar = `<svg width=120 height=10><defs><linearGradient id=vir>` +
    VIRIDIS.map((c, i) => `<stop offset=${i / 4} stop-color="rgb(${c})" />`).join('') +
    '</linearGradient></defs><rect width=120 height=10 fill="url(#vir)" /></svg>';
  $('run').innerHTML = s + `<p class=note>Colour: accuracy 0 ${bar} 100%. White dot: the schedule's test-time depth ` +
    `(mean over the samples); pink box: the oracle depth (best K); dashed line: n_max = ${a.n_max}, OOD lengths below ` +
    `it; right columns: the stable interval (how many K give at least 90%), the accuracy at K = 1 and what the loop adds ` +
    `to it (the best K's minus K = 1's, points). ${b ? 'B - A: full colour at 50 pp. ' : ''}` +
    'Hover a cell for its numbers.</p>';
}

// --- across runs --------------------------------------------------------------------------------------------
function strip(key, title, cut) {  // every run a point, jittered within its schedule's column; mean and spread below
  const groups = [...new Set(R.map(r => r.group))], H = 320, T = 24, Y = v => T + (1 - v / 100) * (H - T - 74);
  const GW = Math.min(170, ((groups.length > 3 ? 1300 : 660) - 60) / groups.length), W = 50 + groups.length * GW;
  let s = `<svg width=${W + 10} height=${H} data-points=1><text x=50 y=12 font-weight=bold>${title}</text>`;
  for (const v of [0, 25, 50, 75, 100]) s += `<line x1=50 x2=${W} y1=${Y(v)} y2=${Y(v)} stroke=#e4e4e4 />` +
    `<text x=44 y=${Y(v) + 4} text-anchor=end>${v}%</text>`;
  const c = R.map(r => r.sum[cut]).find(v => v != null);  // fixed test sets: every run has the same shortcut score
  if (c != null) s += `<line x1=50 x2=${W} y1=${Y(c)} y2=${Y(c)} stroke=#c00 stroke-dasharray=5,4 />` +
    `<text x=52 y=${Y(c) - 3} fill=#c00>best shortcut ${c.toFixed(1)}%</text>`;
  groups.forEach((g, gi) => {
    const x0 = 50 + gi * GW + GW / 2, on = ri => ri === S.run || ri === S.cmp;  // the open runs: drawn last, on top
    const pts = R.map((r, ri) => [r.sum[key], ri]).filter(p => p[0] != null && R[p[1]].group == g);
    pts.sort((p, q) => on(p[1]) - on(q[1]));
    const vs = pts.map(p => p[0]), mean = vs.reduce((a, b) => a + b, 0) / (vs.length || 1);
    const sd = Math.sqrt(vs.reduce((a, v) => a + (v - mean) ** 2, 0) / Math.max(1, vs.length - 1));
    for (const [v, ri] of pts) s += `<circle cx=${x0 + ((ri * 37) % 61 - 30) / 30 * 0.3 * GW} cy=${Y(v)} ` +
      `r=${on(ri) ? 5.5 : 3.5} fill="${ri === S.run ? '#e8178a' : ri === S.cmp ? '#f28e00' : '#3b528b'}" ` +
      `fill-opacity=.75 data-ri=${ri} data-v=${v} style=cursor:pointer />`;
    if (vs.length) s += `<line x1=${x0 - 0.35 * GW} x2=${x0 + 0.35 * GW} y1=${Y(mean)} y2=${Y(mean)} stroke=#000 stroke-width=2 />`;
    const [sched, ...knobs] = g.split(' '), lines = [sched, knobs.join(' '), `${vs.length} run${vs.length == 1 ? '' : 's'}`,
      vs.length ? mean.toFixed(1) + (vs.length > 1 ? ' ± ' + sd.toFixed(1) : '') : '-'];  // label, runs, mean ± sd
    lines.forEach((l, i) => s += `<text x=${x0} y=${H - 48 + 13 * i} text-anchor=middle ${i ? '' : 'font-weight=bold'}>${l}</text>`);
  });
  return s + '</svg>';
}
function runsView() {
  const m = S.m, name = METRICS[m], gain = m == 'loop_gain';  // the loop's gain: no shortcut line (not an accuracy)
  $('runs').innerHTML = `<p>metric <select id=pick-m>` + Object.keys(METRICS).map(k =>
    `<option ${k == m ? 'selected' : ''}>${k}</option>`).join('') + `</select> <span class=note>click a point: open that ` +
    `run (pink); shift-click: compare with it (orange). Black bar: the mean of the column; below it, mean ± sd. ` +
    `k1: the accuracy at K = 1; loop_gain: Oracle OOD minus it (does the run use its loop?).</span></p>` +
    '<div class=pair>' + strip(m + '_ood', name + ' OOD, all samples', gain ? null : 'shortcut_ood') +
    (R.some(r => r.hard) ? strip(m + '_hard_ood', name + ' OOD, hard subset', gain ? null : 'shortcut_hard_ood') : '') + '</div>';
}

// --- samples ------------------------------------------------------------------------------------------------
function sampleView() {
  const has = R.map((r, i) => r.samples ? i : null).filter(i => i != null);
  if (!has.length) {
    $('sample').innerHTML = '<p class=note id=no-samples>No run on this page has a ckpt.pt (committed results keep ' +
      'eval.json only), so there are no per-sample answers: train a run (train.py --out_dir DIR) and export it.</p>';
    return;
  }
  const ri = has.includes(S.run) ? S.run : has[0], r = R[ri];
  const n = r.n.includes(S.n) ? S.n : r.n.find(m => m > r.n_max) || r.n[0];  // the first OOD length by default
  let s = `<p>run <select id=pick-srun>${options(has, ri)}</select> length n <span class=len>` +
    r.n.map(m => `<a class="${m == n ? 'on' : ''}" onclick="go({n: ${m}, run: ${ri}})">${m}</a>`).join('') +
    `</span></p><p class=note>The first test samples of length ${n} (eval.json's own test set), half of them from the ` +
    `hard subset where the task has one. Squares: right (green) or wrong (red) at K = 1..${r.K.length}, the schedule's ` +
    `depth outlined; below, the answer at each run of depths with the same answer, wrong tokens in red.</p>`;
  const line = (label, body) => `<div><span class=lab>${label}</span>${body}</div>`;
  r.samples[n].forEach((x, i) => {
    const squares = [...x.ok].map((c, k) => `<rect x=${k * 11 + 1} y=1 width=9 height=11 ` +
      `fill=${c == '1' ? '#4caf50' : '#e05050'} ${k + 1 == x.depth ? 'stroke=#000 stroke-width=2' : ''} />`).join('');
    s += `<div class=smp><b>${x.hard ? 'hard sample' : 'sample'} ${i + 1}</b>` + line('input', join(x.x)) +
      line('target', join(x.y)) + line('right at K', `<svg width=${x.ok.length * 11} height=13>${squares}</svg>`);
    for (const [k0, k1, a] of x.segs) s += line(`K ${k0 == k1 ? k0 : k0 + '-' + k1}`,
      a.map((t, p) => `<span class=${t == x.y[p] ? 'r' : 'w'}>${esc(t)}</span>`).join(a.every(t => t.length == 1) ? '' : ' '));
    s += '</div>';
  });
  $('sample').innerHTML = s;
}

// --- the page: every view drawn, the one of the hash shown; the tooltip ------------------------------------
function draw() {
  read(); runsView(); runView(); sampleView();
  for (const v of ['runs', 'run', 'sample']) {
    $(v).classList.toggle('on', v == S.view); $('tab-' + v).classList.toggle('on', v == S.view); $(v).dataset.ready = 1;
  }
  const [i, j] = (S.tip || '').split(','), c = S.tip && $('run').querySelector(`rect[data-i="${i}"][data-j="${j}"]`);
  if (c) {  // #tip=i,j: hover the cell (row i, column j) of the run's first heatmap, for a screenshot or a test
    const b = c.getBoundingClientRect();
    c.dispatchEvent(new MouseEvent('mousemove', {bubbles: true, clientX: b.x + b.width / 2, clientY: b.y + b.height / 2}));
  }
}
function tipText(t) {  // the tooltip of a point or a heatmap cell; '' elsewhere
  const g = t.closest && t.closest('svg');
  if (t.dataset.ri != null) return `${R[t.dataset.ri].dir}<br>${(+t.dataset.v).toFixed(1)}%`;
  if (!g || g.dataset.run == null || t.dataset.i == null) return '';
  const r = R[+g.dataset.run], i = +t.dataset.i, j = +t.dataset.j, w = g.dataset.which, b = R[S.cmp];
  const at = `n = ${r.n[i]} (${r.n[i] > r.n_max ? 'OOD' : 'ID'}), K = ${r.K[j]}<br>`;
  if (w[0] == 'd') {  // B - A
    const k = w.slice(1), A = (r[k][i] || [])[j], B = (b[k][i] || [])[j];
    return at + `A ${pct(A)}, B ${pct(B)}: B - A ${A == null || B == null ? '-' : (100 * (B - A)).toFixed(1) + ' pp'}`;
  }
  return at + `accuracy <b>${pct((r[w][i] || [])[j])}</b><br>` + (w == 'hard' ? `hard subset: ${pct(r.hard_frac[i])} ` +
    `of the samples at n<br>best shortcut on the hard subset (OOD mean): ${num(r.cut_hard)} (${r.cut_hard_name})` :
    `best shortcut at n: ${pct(r.cut[i])} (${r.cutname[i]})`) +
    `<br>policy depth ${r.pd ? r.pd[i] : '-'}, oracle depth K = ${r.K[(w == 'hard' ? r.okh : r.ok)[i]]}`;
}
document.addEventListener('mousemove', ev => {
  const h = tipText(ev.target);
  $('tip').innerHTML = h;
  Object.assign($('tip').style, {display: h ? 'block' : 'none', left: Math.min(ev.clientX + 14, innerWidth - 340) + 'px',
                                 top: ev.clientY + 14 + 'px'});
});
document.addEventListener('click', ev => {  // a point: open its run, or (shift) compare with it
  const ri = ev.target.dataset && ev.target.dataset.ri;
  if (ri != null) go(ev.shiftKey ? {cmp: +ri} : {view: 'run', run: +ri});
});
document.addEventListener('change', ev => {  // the selects
  const v = ev.target.value, id = ev.target.id;
  go(id == 'pick-m' ? {m: v} : id == 'pick-cmp' ? {cmp: v === '' ? null : +v} : {run: +v});
});
const k = R.filter(r => r.samples).length, runs = `run${R.length > 1 ? 's' : ''}`;
$('title').textContent = `depth explorer: ${D.task}, ${R.length} ${runs}`;
$('about').textContent = `from ${D.title}. ` + (k ? `${k} of ${R.length} ${runs} with a ckpt.pt: the samples view ` +
  'shows their answers at every K.' : 'No run has a ckpt.pt: the across-runs and run views only.');
window.addEventListener('hashchange', draw);
draw();
</script></body></html>
"""
