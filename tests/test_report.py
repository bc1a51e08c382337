"""The HTML report, rendered in headless Chromium (issue 7)."""

from __future__ import annotations

import re
import shutil
import subprocess

import pytest
from click.testing import CliRunner

from forensics.cli import cli
from forensics.report import build_report, write_report
from tests.test_plots_story import STORY, story_store

CHROMIUM_FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
HOSTILE = "sglang_<img src=x onerror=alert(1)>_&_x"


def _chromium() -> str:
    exe = shutil.which("chromium") or shutil.which("chromium-browser")
    if exe is None:
        pytest.fail(
            "chromium is missing: the report is checked in a real browser "
            "(install it: apt-get install -y chromium)"
        )
    return exe


def _browser(tmp_path, *args, timeout=90):
    profile = tmp_path / f"chromium-profile-{len(list(tmp_path.iterdir()))}"
    cmd = [_chromium(), *CHROMIUM_FLAGS, f"--user-data-dir={profile}", *args]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)


@pytest.fixture
def story_with_hostile_run(tmp_path):
    runs = [*STORY, (HOSTILE, {"steps": 4, "fail": "load"})]
    return story_store(tmp_path, runs=runs)


def test_report_in_chromium(story_with_hostile_run, tmp_path):
    store = story_with_hostile_run
    page, _ = write_report(store, tmp_path / "report.html")
    html = page.read_text()
    assert "<script" not in html and "<img src=x" not in html
    assert "&lt;img src=x onerror=alert(1)&gt;_&amp;_x" in html
    assert "http://" not in html.split("</style>")[0] and "https://" not in html
    assert html.count('src="data:image/png;base64,') == 4
    # 1) the rendered DOM: content present, images decoded. The probe runs in a copy of the
    # page (the report itself forbids scripts by its Content-Security-Policy).
    probe = tmp_path / "probe.html"
    probe.write_text(
        re.sub(r'<meta http-equiv="Content-Security-Policy"[^>]*>', "", html).replace(
            "</body>",
            "<script>window.addEventListener('load', () => {"
            "const w = [...document.images].map(i => i.naturalWidth);"
            "document.body.setAttribute('data-img-widths', w.join(','));"
            # issue 13: the page never scrolls sideways; wide tables scroll inside their box
            "const over = document.documentElement.scrollWidth - window.innerWidth;"
            "const boxes = [...document.querySelectorAll('table.runs')].map("
            "t => t.parentElement.getBoundingClientRect().right <= window.innerWidth);"
            "document.body.setAttribute('data-overflow', String(over));"
            "document.body.setAttribute('data-boxes-fit', boxes.join(','));"
            "});</script></body>",
        )
    )
    res = _browser(
        tmp_path,
        "--virtual-time-budget=5000",
        "--window-size=900,1200",  # narrower than the runs table's natural width
        "--dump-dom",
        probe.as_uri(),
    )
    dom = res.stdout
    assert res.returncode == 0 and "<body" in dom, res.stderr[-2000:]
    overflow = re.search(r'data-overflow="(-?\d+)"', dom)
    assert overflow and int(overflow.group(1)) <= 0, "the page scrolls sideways"
    fits = re.search(r'data-boxes-fit="([a-z,]*)"', dom).group(1).split(",")
    assert len(fits) >= 2 and set(fits) == {"true"}, fits  # configurations + runs tables
    widths = re.search(r'data-img-widths="([\d,]*)"', dom)
    assert widths, "the load probe never ran"
    assert [int(w) > 300 for w in widths.group(1).split(",")] == [True] * 4
    for name in ("sglang_baseline", "sglang_eagle3_cg_5dt", "sglang_eagle3_cg_2step"):
        assert name in dom
    for figure in ("90.0", "53.2", "50.5", "74.9", "82.3"):
        assert f">{figure}<" in dom  # runs table cells
    assert "Tuning has reached its limit" in dom
    assert "needs accept len ≥ 2.60" in dom
    assert "died in capture" in dom and "Capture cuda graph failed" in dom
    assert "&lt;img src=x onerror=alert(1)&gt;" in dom  # shown as text, not an element
    assert "<img src=x" not in dom
    # 2) the screenshot of the real page: not blank, the plots' colours present
    shot = tmp_path / "shot.png"
    res = _browser(tmp_path, f"--screenshot={shot}", "--window-size=1400,3000", page.as_uri())
    assert shot.exists(), res.stderr[-2000:]
    import matplotlib.image as mpimg

    img = mpimg.imread(str(shot))[..., :3]
    assert img.shape[:2] == (3000, 1400)
    non_white = (img.min(axis=2) < 0.9).mean()
    assert non_white > 0.05, f"screenshot nearly blank ({non_white:.1%} drawn)"
    red_ish = ((img[..., 0] > 0.8) & (img[..., 1] < 0.3) & (img[..., 2] < 0.3)).sum()
    blue_ish = ((img[..., 2] > 0.6) & (img[..., 0] < 0.3)).sum()
    assert red_ish > 50 and blue_ish > 500  # failed markers and the throughput line


def test_report_sections_and_diagnoses(tmp_path):
    store = story_store(tmp_path)
    html = build_report(store)
    for anchor in ("verdict", "trend", "accept", "runs", "failed", "startup", "decode"):
        assert f'id="{anchor}"' in html
    assert html.count('<tr class="failed">') == 1
    assert "#6 sglang_eagle3_cg_2step: died in capture" in html
    assert "What to try next" in html and "Evidence:" in html
    assert "default-src &#x27;none&#x27;" not in html and "default-src 'none'" in html


def test_report_match_and_baseline(tmp_path):
    html = build_report(story_store(tmp_path), "cg_5dt", baseline="80")
    text = re.sub(r"<[^>]+>", "", html)
    assert "1 runs (0 failed)" in text and "80.0 tok/s from --baseline" in html
    assert "Speculation wins" in html and "No run failed." in html


def test_cli_report(tmp_path):
    store = story_store(tmp_path)
    runner = CliRunner()
    out = tmp_path / "r.html"
    res = runner.invoke(cli, ["--store", str(store.root), "report", "--out", str(out)])
    assert res.exit_code == 0 and res.output.strip() == str(out)
    assert out.read_text().startswith("<!DOCTYPE html>")
    res = runner.invoke(cli, ["--store", str(store.root), "report", "--json", "-o", str(out)])
    assert '"bytes":' in res.output
    from forensics.cli import main

    with pytest.raises(SystemExit) as exc:
        main(["--store", str(store.root), "report", "nosuch", "-o", str(out)])
    assert exc.value.code == 3
    with pytest.raises(SystemExit) as exc:
        main(["--store", str(store.root), "report", "-o", str(tmp_path / "no" / "r.html")])
    assert exc.value.code == 2
