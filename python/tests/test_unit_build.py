"""The in-tree build backend (forkbox_build.py): wheel, sdist, editable wheel, metadata,
and an offline ``pip install`` into a fresh venv."""

import base64
import csv
import hashlib
import io
import os
import subprocess
import sys
import tarfile
import zipfile

import pytest

PYTHON_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, PYTHON_DIR)
import forkbox_build  # noqa: E402

TREE_VERSION = os.path.join(PYTHON_DIR, os.pardir, "VERSION")


def expected_version() -> str:
    if os.path.exists(TREE_VERSION):
        return open(TREE_VERSION).read().strip()
    return forkbox_build.FALLBACK_VERSION


def test_no_build_requirements():
    assert forkbox_build.get_requires_for_build_wheel() == []
    assert forkbox_build.get_requires_for_build_sdist() == []
    assert forkbox_build.get_requires_for_build_editable() == []


def test_wheel(tmp_path):
    name = forkbox_build.build_wheel(str(tmp_path))
    v = expected_version()
    assert name == f"forkbox-{v}-py3-none-any.whl"
    with zipfile.ZipFile(tmp_path / name) as z:
        names = set(z.namelist())
        for f in ("forkbox/__init__.py", "forkbox/client.py", "forkbox/py.typed", "forkbox/_version.py",
                  f"forkbox-{v}.dist-info/METADATA", f"forkbox-{v}.dist-info/WHEEL",
                  f"forkbox-{v}.dist-info/RECORD"):
            assert f in names, f
        assert not any("__pycache__" in n or n.endswith(".pyc") for n in names)
        assert not any(n.startswith("tests/") for n in names)
        record = list(csv.reader(io.StringIO(z.read(f"forkbox-{v}.dist-info/RECORD").decode())))
        listed = {row[0] for row in record}
        assert listed == names
        for path, digest, size in record:
            if path.endswith("RECORD"):
                assert digest == "" and size == ""
                continue
            data = z.read(path)
            algo, b64 = digest.split("=", 1)
            assert algo == "sha256"
            assert base64.urlsafe_b64decode(b64 + "=" * (-len(b64) % 4)) == hashlib.sha256(data).digest()
            assert int(size) == len(data)
        meta = z.read(f"forkbox-{v}.dist-info/METADATA").decode()
        assert "Name: forkbox\n" in meta and f"Version: {v}\n" in meta and "Requires-Python: >=3.9" in meta
        wheel = z.read(f"forkbox-{v}.dist-info/WHEEL").decode()
        assert "Root-Is-Purelib: true" in wheel and "Tag: py3-none-any" in wheel
        assert f"__version__ = {v!r}" in z.read("forkbox/_version.py").decode()


def test_prepare_metadata(tmp_path):
    d = forkbox_build.prepare_metadata_for_build_wheel(str(tmp_path))
    assert d == f"forkbox-{expected_version()}.dist-info"
    assert (tmp_path / d / "METADATA").exists() and (tmp_path / d / "WHEEL").exists()


def test_editable_wheel(tmp_path):
    name = forkbox_build.build_editable(str(tmp_path))
    with zipfile.ZipFile(tmp_path / name) as z:
        pth = [n for n in z.namelist() if n.endswith(".pth")]
        assert len(pth) == 1
        assert z.read(pth[0]).decode().strip() == PYTHON_DIR


def test_sdist(tmp_path):
    name = forkbox_build.build_sdist(str(tmp_path))
    v = expected_version()
    assert name == f"forkbox-{v}.tar.gz"
    with tarfile.open(tmp_path / name) as t:
        names = set(t.getnames())
    base = f"forkbox-{v}"
    for f in ("PKG-INFO", "pyproject.toml", "forkbox_build.py", "forkbox/__init__.py", "forkbox/py.typed"):
        assert f"{base}/{f}" in names, f


def test_sdist_builds_a_wheel_with_its_version(tmp_path):
    """An unpacked sdist (no ../VERSION) takes its version from PKG-INFO."""
    name = forkbox_build.build_sdist(str(tmp_path))
    with tarfile.open(tmp_path / name) as t:
        t.extractall(tmp_path / "x")
    src = tmp_path / "x" / name[: -len(".tar.gz")]
    out = subprocess.run(
        [sys.executable, "-c", "import forkbox_build, sys; print(forkbox_build.build_wheel(sys.argv[1]))",
         str(tmp_path / "w")], cwd=src, capture_output=True, text=True, check=True,
    )
    assert out.stdout.strip() == f"forkbox-{expected_version()}-py3-none-any.whl"


@pytest.mark.skipif(not os.path.exists("/usr/bin/python3"), reason="no /usr/bin/python3")
def test_pip_install_offline(tmp_path):
    venv = tmp_path / "venv"
    made = subprocess.run(["/usr/bin/python3", "-m", "venv", str(venv)], capture_output=True, text=True)
    if made.returncode != 0:
        pytest.skip(f"python3 -m venv fails (Debian: apt-get install python3-venv): {made.stderr[-300:]}")
    pip = subprocess.run([str(venv / "bin" / "pip"), "install", "--no-index", "--no-cache-dir", PYTHON_DIR],
                         capture_output=True, text=True, timeout=300)
    assert pip.returncode == 0, pip.stdout[-2000:] + pip.stderr[-2000:]
    check = subprocess.run([str(venv / "bin" / "python"), "-c",
                            "import forkbox, os; print(forkbox.__version__, os.path.dirname(forkbox.__file__))"],
                           capture_output=True, text=True, cwd=str(tmp_path), check=True)
    version, where = check.stdout.split()
    assert version == expected_version()
    assert where.startswith(str(venv))
    assert os.path.exists(os.path.join(where, "py.typed"))
