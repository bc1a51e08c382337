"""Issue 12 item 1: the wheel works anywhere. Build it, install it into a fresh venv outside
the checkout, and run ingest, runs, classify, diagnose, classify train, plot and report there.

The fresh venv gets the wheel only (pip install --no-deps); its dependencies (polars,
scikit-learn, ...) come from the test's own environment through a path entry, which adds no
`forensics` (the dev install is editable, its finder is not loaded from a plain path), so
every forensics module and data file the commands use is the wheel's.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path

import pytest

from forensics_parsers.sglang import native
from tests.conftest import FIXTURES, ROOT

SETUPTOOLS_WARNINGS = ("SetuptoolsDeprecationWarning", "SetuptoolsWarning", "warning: ")


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("wheel")
    src = out / "src"  # a copy: pip builds in place, and the checkout gets no build/ folder
    src.mkdir()
    for name in ("pyproject.toml", "setup.py", "README.md", "LICENSE"):
        if (ROOT / name).exists():
            shutil.copy(ROOT / name, src / name)
    for pkg in ("forensics", "parsers"):
        shutil.copytree(ROOT / pkg, src / pkg, ignore=shutil.ignore_patterns("__pycache__"))
    p = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(out), str(src)],
        capture_output=True,
        text=True,
        timeout=280,
    )
    assert p.returncode == 0, p.stdout + p.stderr
    noise = [
        ln for ln in (p.stdout + p.stderr).splitlines() if any(w in ln for w in SETUPTOOLS_WARNINGS)
    ]
    assert noise == [], noise  # the build prints no setuptools warning
    (whl,) = out.glob("forensics-*.whl")
    return whl


def test_the_wheel_holds_every_package_and_its_data(wheel):
    names = set(zipfile.ZipFile(wheel).namelist())
    for init in sorted((ROOT / "forensics").rglob("__init__.py")):
        rel = init.relative_to(ROOT).as_posix()
        assert rel in names, f"{rel} is not in the wheel (list it in pyproject's packages)"
    assert "forensics_parsers/__init__.py" in names and not any(
        n.startswith("parsers/") for n in names
    )  # the parsers install under the project's name, never as a generic `parsers`
    assert "forensics/data/phase-model.json" in names
    assert any(n.startswith("forensics/data/corpus/") for n in names)
    if native._linescan is not None:  # a compiler here: the wheel has the compiled reader
        assert any(n.startswith("forensics_parsers/sglang/_linescan.") for n in names)
    assert not any(n.endswith(".c") for n in names)  # its source stays out


def test_the_wheel_works_outside_the_checkout(wheel, tmp_path):
    venv = tmp_path / "venv"
    # a fresh venv without its own pip (ensurepip cost ~5 s of CPU): this environment's pip
    # installs the wheel into it (--python), as the venv's own would
    subprocess.run(
        [sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120
    )
    py = venv / "bin" / "python"
    pip = subprocess.run(
        [sys.executable, "-m", "pip", "--python", str(py), "install", "-q", "--no-deps",
         "--no-index", str(wheel)],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert pip.returncode == 0, pip.stderr
    site = subprocess.run(
        [str(py), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        capture_output=True, text=True, check=True,
    ).stdout.strip()  # fmt: skip
    deps = sysconfig.get_paths()["purelib"]  # this environment's: polars, scikit-learn, ...
    Path(site, "zz_test_deps.pth").write_text(deps + "\n")
    work = tmp_path / "elsewhere"
    work.mkdir()
    for f in ("sglang_baseline.log", "sglang_fail_capture.log", "sglang_eagle3_cg_5dt.log"):
        shutil.copy(FIXTURES / f, work / f)
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "FORENSICS_HOME")} | {
        "FORENSICS_HOME": str(tmp_path / "home"),
        "COLUMNS": "120",
    }
    exe = venv / "bin" / "forensics"

    def run(*args: str) -> str:
        p = subprocess.run(
            [str(exe), *args], cwd=work, env=env, capture_output=True, text=True, timeout=240
        )
        assert p.returncode == 0, (args, p.stdout[-2000:], p.stderr[-2000:])
        assert "Traceback" not in p.stderr, p.stderr
        return p.stdout

    where = subprocess.run(
        [str(py), "-c", "import forensics, forensics_parsers; print(forensics.__file__)"],
        cwd=work, env=env, capture_output=True, text=True, check=True,
    ).stdout.strip()  # fmt: skip
    assert where.startswith(site) and not where.startswith(str(ROOT)), where
    compiled = subprocess.run(
        [str(py), "-c", "from forensics_parsers.sglang import native; print(native._linescan)"],
        cwd=work, env=env, capture_output=True, text=True, check=True,
    ).stdout  # fmt: skip
    assert (site in compiled) == (native._linescan is not None), compiled  # the wheel's own
    no_parsers = subprocess.run([str(py), "-c", "import parsers"], cwd=work, env=env)
    assert no_parsers.returncode != 0  # no generic top-level name claimed
    run("ingest", "*.log")
    assert "sglang_fail_capture" in run("runs", "--json")
    assert "capture" in run("classify", "sglang_fail_capture.log")
    assert "capture" in run("diagnose", "sglang_fail_capture")
    run("classify", "train", "--json")
    assert (tmp_path / "home" / "models" / "phase-model.json").is_file()
    run("plot", "trend", "-o", "trend.png")
    run("report", "-o", "report.html")
    assert (work / "trend.png").stat().st_size > 0
    assert "<html" in (work / "report.html").read_text()
