"""The depth explorer (evaluate.py --html, lab/explorer.py): the page holds what eval.json says and what the
checkpoint computes, stays small and self-contained, refuses bad input before writing, and runs in a real
browser (headless Chromium: the views are drawn, no script error; skipped where no chromium binary exists)."""

import json
import os
import re
import shutil
import subprocess

import pytest

import evaluate
import train
from lab import records

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
COMMITTED = [os.path.join(ROOT, "results", "chaos", "dyck", s, "seed100", "r0") for s in ("fixed", "rl", "window")]
# a dyck run of a few seconds with a ckpt.pt: 4 test samples a length, fewer than explorer.SAMPLES, so the
# sample view holds the whole test set and must reproduce eval.json's acc
TINY = ["--threads", "1", "--d_model", "16", "--n_head", "2", "--n_layer", "1", "--batch_size", "8", "--max_iters", "20",
        "--warmup_iters", "2", "--lr", "3e-3", "--eval_samples", "4", "--T_max", "8", "--T_test", "8",
        "--test_lengths", "2,3,25", "--log_interval", "5", "--eval_interval", "20", "--ckpt_interval", "20"]
BROWSER = shutil.which("chromium") or shutil.which("chromium-browser")
needs_browser = pytest.mark.skipif(BROWSER is None, reason="no chromium binary (apt-get install chromium): the page "
                                                           "is not opened in a browser")


@pytest.fixture(scope="module")
def tiny(tmp_path_factory) -> str:
    out = str(tmp_path_factory.mktemp("tiny") / "<b>tiny</b><!--")  # markup in a path is shown as text
    train.main(["--out_dir", out, *TINY])
    return out


def export(tmp_path, *dirs) -> tuple:
    """(the page's path, its inline data) for the runs below dirs."""
    path = str(tmp_path / "page.html")
    assert evaluate.cli([*dirs, "--html", path]) == 0
    html = open(path, encoding="utf-8").read()
    data = html.split('<script type="application/json" id="data">', 1)[1].split("</script>", 1)[0]
    return path, html, json.loads(data)


def test_the_page_holds_eval_json_and_the_checkpoints_answers(tmp_path, tiny):
    _, html, data = export(tmp_path, *COMMITTED, tiny)
    assert "http://" not in html and "https://" not in html and "<script src" not in html  # no network, no CDN
    runs = dict(zip(["fixed", "rl", "window", "tiny"], data["runs"]))
    e = json.load(open(os.path.join(COMMITTED[2], "eval.json")))
    w = runs["window"]
    assert w["acc"] == [[round(a, 3) for a in row] for row in e["acc"]] and w["n_max"] == e["n_max"] == 19
    assert w["ok"][8] == max(range(len(e["acc"][8])), key=lambda k: (e["acc"][8][k], -k))  # the oracle depth at n = 40
    assert w["samples"] is None and all(r["samples"] is None for r in data["runs"][:3])  # committed: no ckpt.pt
    # depth use (metrics.depth_use): the committed file predates it, the page has it as load_eval computes it
    m = records.load_eval(COMMITTED[2])["metrics"]
    assert "k1_ood" not in e["metrics"] and w["sum"]["k1_ood"] == round(m["k1_ood"], 3)
    for k in ("loop_gain_ood", "k1_hard_ood", "loop_gain_hard_ood", "settle_k_ood", "settle_k_hard_ood"):
        assert w["sum"][k] == round(m[k], 3) and m[k] is not None, k
    ood = [i for i, n in enumerate(e["lengths"]) if n > e["n_max"]]
    assert w["sum"]["k1_ood"] == pytest.approx(100 * sum(e["acc"][i][0] for i in ood) / len(ood), abs=1e-3)
    t, te = runs["tiny"], json.load(open(os.path.join(tiny, "eval.json")))
    assert any(a > 0 for row in te["acc"] for a in row)  # some sample right: the check below is not all zeros
    for i, n in enumerate(te["lengths"]):
        got = t["samples"][str(n)]
        assert len(got) == 4  # the whole test set of the length
        # right at K (the trajectory recomputed from ckpt.pt) averages to eval.json's acc[n][K]
        assert [sum(s["ok"][k] == "1" for s in got) / 4 for k in range(8)] == pytest.approx(te["acc"][i])
        for s in got:  # the segments cover K = 1..T_test, and an answer is right exactly where it equals the target
            ks = [k for k0, k1, _ in s["segs"] for k in range(k0, k1 + 1)]
            assert ks == list(range(1, 9))
            assert s["ok"] == "".join("1" if a == s["y"] else "0" for k0, k1, a in s["segs"] for _ in range(k0, k1 + 1))


def test_the_chaos_study_fits_in_a_small_page(tmp_path):
    _, html, data = export(tmp_path, os.path.join(ROOT, "results", "chaos", "dyck"))
    assert len(data["runs"]) >= 150 and len(html.encode()) < 2_000_000  # 169 runs: about 0.9 MB


@pytest.mark.smoke
@pytest.mark.parametrize("case", ["empty", "mixed", "damaged", "no folder", "a folder", "own file",
                                  "with --out"])
def test_bad_input_is_one_line_and_no_file(tmp_path, capsys, case):
    page, runs = tmp_path / "page.html", tmp_path / "runs"
    os.makedirs(runs / "a")
    e = json.load(open(os.path.join(COMMITTED[2], "eval.json")))
    if case == "mixed":  # a dyck run beside a copy run
        shutil.copy(os.path.join(COMMITTED[2], "eval.json"), runs / "a")
        os.makedirs(runs / "b")
        json.dump({**e, "task": "copy", "config": {**e["config"], "task": "copy"}}, open(runs / "b" / "eval.json", "w"))
    elif case == "damaged":
        open(runs / "a" / "eval.json", "w").write(json.dumps(e)[:-40])
    else:
        shutil.copy(os.path.join(COMMITTED[2], "eval.json"), runs / "a")
    args = {"empty": [str(runs / "a" / "x")], "no folder": ["--html", str(tmp_path / "nope" / "page.html")],
            "a folder": ["--html", str(tmp_path)],
            "own file": ["--html", str(tmp_path / "eval.json")], "with --out": ["--out", str(tmp_path / "t")]}.get(case, [])
    if case == "empty":
        os.makedirs(runs / "a" / "x")
    argv = (args if case == "empty" else [str(runs)] + args) + ([] if "--html" in args else ["--html", str(page)])
    assert evaluate.cli(argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("evaluate.py: error: "), err
    expect = {"empty": "no runs", "mixed": "one task a page", "damaged": "malformed eval.json", "no folder": "not a writable folder", "a folder": "a folder; name the page's file",
              "own file": "a run's own file", "with --out": "writes the page alone"}[case]
    assert expect in err, err
    assert not page.exists() and not (tmp_path / "eval.json").exists() and os.listdir(tmp_path) == ["runs"]


def chromium(tmp_path, url: str, *flags) -> subprocess.CompletedProcess:
    return subprocess.run([BROWSER, "--headless", "--disable-gpu", "--no-sandbox", "--enable-logging=stderr", "--v=0",
                           f"--user-data-dir={tmp_path / 'profile'}", *flags, url],
                          capture_output=True, text=True, timeout=120)


def no_script_error(r: subprocess.CompletedProcess) -> None:
    assert r.returncode == 0, r.stderr[-2000:]
    assert "Uncaught" not in r.stderr, [l for l in r.stderr.splitlines() if "Uncaught" in l]
    assert 'id="js-error"' not in r.stdout  # window.onerror's marker


@needs_browser
def test_the_page_runs_in_a_browser(tmp_path, tiny):
    path, _, data = export(tmp_path, *COMMITTED, tiny)
    # every view is drawn at load (one shown): the DOM after the scripts ran holds all three
    r = chromium(tmp_path, f"file://{path}#view=sample&run=3&n=3", "--dump-dom")
    no_script_error(r)
    dom = r.stdout  # (the script's own text is in it too: count the attributes as the browser writes them, quoted)
    for view in ("runs", "run", "sample"):
        assert re.search(f'<section id="{view}"[^>]*data-ready="1"', dom), view
    points = sum(r["sum"][k] is not None for r in data["runs"] for k in ("oracle_ood", "oracle_hard_ood"))
    assert len(re.findall(r'data-ri="\d+"', dom)) == points >= 7  # every run a point, in the all-samples and the hard-subset panels
    t = data["runs"][3]  # the run view shows the tiny run: a cell per length and K, all samples and hard subset
    assert len(re.findall(r'data-i="\d+"', dom)) == len(t["n"]) * len(t["K"]) * (1 + (t["hard"] is not None))
    # beside each heatmap row, its K = 1 column's accuracy and the loop's gain; the run's depth use in words above
    rows = t["acc"] + [h for h in t["hard"] or [] if h]
    k1 = re.findall(r'data-k1="\d+">(\d+)%</text><text[^>]*>\+(\d+)</text>', dom)
    assert [(int(a), int(g)) for a, g in k1] == [(round(100 * row[0]), round(100 * (max(row) - row[0]))) for row in rows]
    assert f"Depth use, OOD: K = 1 {t['sum']['k1_ood']:.1f}%" in dom
    assert dom.count('class="smp"') == 4  # the tiny run's 4 samples of length 3
    assert '<section id="sample" class="on"' in dom  # the hash picked the view
    assert "&lt;b&gt;tiny&lt;/b&gt;&lt;!--" in dom and "<b>tiny" not in dom  # the run's path as text, not markup
    # two runs and their difference, a hovered cell (#tip=i,j: row n = 40, column K = 4); the committed runs alone
    # have no sample view, and the page says so
    path2, _, data2 = export(tmp_path, *COMMITTED)
    url = f"file://{path2}#view=run&run=2&cmp=1&tip=8,3"
    r = chromium(tmp_path, url, "--dump-dom")
    no_script_error(r)
    assert "B - A" in r.stdout and 'id="no-samples"' in r.stdout
    # the runs view of the loop's gain: a point per run and panel, no shortcut line (a gain is not an accuracy)
    g = chromium(tmp_path, f"file://{path2}#view=runs&m=loop_gain", "--dump-dom")
    no_script_error(g)
    runs = re.search(r'<section id="runs"[^>]*>(.*?)</section>', g.stdout, re.S).group(1)
    assert len(re.findall(r'data-ri="\d+"', runs)) == 6 and "gain (points)" in runs and "best shortcut" not in runs
    w = data2["runs"][2]
    tip = r.stdout.split('<div id="tip"', 1)[1].split("</div>", 1)[0]
    assert "display: block" in tip and "n = 40 (OOD), K = 4" in tip, tip
    assert f"accuracy <b>{100 * w['acc'][8][3]:.1f}%</b>" in tip and f"best shortcut at n: {100 * w['cut'][8]:.1f}%" in tip, tip
    shot = tmp_path / "shot.png"
    no_script_error(chromium(tmp_path, url, f"--screenshot={shot}", "--window-size=1400,1000"))
    assert open(shot, "rb").read(8) == b"\x89PNG\r\n\x1a\n" and shot.stat().st_size > 20_000  # drawn, not blank


# --- hash state and the page's data reach innerHTML only as allowed values, escaped (issue 71: K / J1) ----------

NODE = shutil.which("node")
# the page's script on a stub DOM: every innerHTML it writes, for one URL hash (a page opened as FILE#HASH)
STUB = r"""
const fs = require('fs'), [page, hash] = process.argv.slice(-2), html = fs.readFileSync(page, 'utf8');
const data = html.split('<script type="application/json" id="data">')[1].split('</script>')[0];
const scripts = [...html.matchAll(/<script>([\s\S]*?)<\/script>/g)].map(m => m[1]), written = [], els = {};
const el = id => ({set innerHTML(v) { written.push(v); }, textContent: id == 'data' ? data : '', classList: {toggle() {}},
                   dataset: {}, style: {}, querySelector() { return null; }});
global.document = {getElementById: id => els[id] || (els[id] = el(id)), addEventListener() {}};
global.window = {addEventListener() {}}; global.location = {hash}; global.innerWidth = 1000;
eval(scripts.slice(1).join('\n') + '\nconsole.log(JSON.stringify({written, S}));');  // S: the page's own state
"""
HOSTILE = {"m": ["<img src=x onerror=alert(1)>", "constructor", "__proto__", "toString"],
           "view": ["<b>x</b>", "constructor"], "run": ["<img>", "1e9", "-1", "0x1"], "cmp": ["<i>"],
           "n": ["<b>3</b>"], "tip": ['"]x,1', "<img>"]}


def on_stub(path: str, hash_: str) -> dict:
    r = subprocess.run([NODE, "-e", STUB, path, hash_], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr[-2000:]
    return json.loads(r.stdout)


@pytest.mark.skipif(NODE is None, reason="no node binary: the page's script is not run")
def test_hash_state_is_checked_against_the_allowed_values(tmp_path):
    """K / J1 (issue 71): the page trusted its hash: `FILE#view=runs&m=...` put S.m into innerHTML (the red team's
    `<img src=x onerror=...>`), and a name any object inherits (m=constructor) passed the metric check and wrote
    `function Object() { [native code] }` into the page. Each value of the hash is now one the page allows, or its
    default, and nothing of the hash reaches the markup.
    Failed before its fix: AssertionError: ('m', '<img src=x onerror=alert(1)>', {'cmp': None, 'm': '<img src=x
    onerror=alert(1)>', 'n': None, 'run': 0, ...}) (the hash's markup kept as the page's state; m=constructor then
    wrote 'function Object() { [native code] }' into the runs view)."""
    from urllib.parse import quote
    path, _, _ = export(tmp_path, *COMMITTED)
    plain = on_stub(path, "#view=runs")
    assert plain["S"]["m"] == "oracle" and "<option selected>oracle</option>" in plain["written"][0]
    for key, values in HOSTILE.items():
        for v in values:
            got = on_stub(path, f"#view=run&{key}={quote(v)}" if key != "view" else f"#view={quote(v)}")
            page = "".join(got["written"])
            assert got["S"] == {"view": "run" if key != "view" else "runs", "run": 0, "cmp": None, "m": "oracle",
                                "n": None, "tip": None}, (key, v, got["S"])
            assert "<img" not in page and "<b>x" not in page and "<i>" not in page, (key, v)
            assert "function Object" not in page and "[object Object]" not in page, (key, v)
            assert "<option selected>oracle</option>" in got["written"][0], (key, v)
    # the page's data too: a string where a number belongs (eval.json's checks stop it; the page does not rely on
    # them) is drawn as nothing, and the strings are escaped, quotes included
    html = open(path, encoding="utf-8").read()
    data = html.split('<script type="application/json" id="data">', 1)[1].split("</script>", 1)[0]
    d = json.loads(data)
    d["runs"][0]["n"][0], d["runs"][0]["sum"]["oracle_ood"] = "<img src=x>", "<img src=y>"
    d["runs"][0]["dir"] = "a\" onmouseover=\"alert(1)"
    bad = tmp_path / "bad.html"
    bad.write_text(html.replace(data, json.dumps(d).replace("<", "\\u003c")), encoding="utf-8")
    for h in ("#view=runs", "#view=run"):
        page = "".join(on_stub(str(bad), h)["written"])
        assert "<img" not in page and '" onmouseover="' not in page and "&quot; onmouseover=&quot;" in page, h


@pytest.mark.skipif(NODE is None, reason="no node binary: the page's script is not run")
def test_the_page_opens_on_the_view_that_fits(tmp_path):
    """Issue 69: `evaluate.py out/dyck-window --html` opened a single run on the across-runs view (one dot). With no
    view in its hash, a page of one run opens on that run's acc[n][K], a page of several on the runs side by side.
    Failed before its fix: assert 'runs' == 'run'."""
    (tmp_path / "one").mkdir()
    one, _, _ = export(tmp_path / "one", COMMITTED[0])
    assert on_stub(one, "")["S"]["view"] == "run" and on_stub(one, "#view=runs")["S"]["view"] == "runs"
    many, _, _ = export(tmp_path, *COMMITTED)
    assert on_stub(many, "")["S"]["view"] == "runs"


@needs_browser
def test_a_hostile_hash_runs_no_script_in_a_browser(tmp_path):
    """K / J1 (issue 71): the red team's URL, opened in headless Chromium: no element of the hash in the page, the
    default metric shown, no script error. (Skipped without chromium; the stub-DOM test above runs with node.)"""
    path, _, _ = export(tmp_path, *COMMITTED)
    r = chromium(tmp_path, f"file://{path}#view=runs&m=<img src=x onerror=document.title='x'>", "--dump-dom")
    no_script_error(r)
    assert "<img" not in r.stdout and '<section id="runs" class="on"' in r.stdout
    assert re.search(r"<option selected=\"\">oracle</option>", r.stdout)


def test_the_page_never_holds_nan(tmp_path):
    """C / S30 (issue 71): acc[0][0] NaN gave a page whose data JSON.parse rejects (every view blank). load_eval
    refuses such a run (tests/test_records.py); the page's writer itself never writes NaN or Infinity either:
    one line naming the run, nothing written.
    Failed before its fix: Failed: DID NOT RAISE <class 'ValueError'>."""
    from lab import explorer
    e = records.load_eval(COMMITTED[2])
    e["acc"][0][0] = float("nan")  # past the reader (a caller's own dict)
    page = tmp_path / "page.html"
    with pytest.raises(ValueError, match=f"--html: {COMMITTED[2]} holds a non-finite number"):
        explorer.write(str(page), [e], "t")
    assert not page.exists()
