"""A tiny in-tree PEP 517 / PEP 660 build backend for the forkbox SDK.

No dependency (not even setuptools), so ``pip install ./python`` works offline with build
isolation. It builds a pure-Python wheel of the ``forkbox`` package, an sdist, and an
editable wheel (a ``.pth`` file pointing at this directory).

The version is, in order: ``PKG-INFO`` beside this file (an unpacked sdist), the forkbox
tree's ``../VERSION``, else ``FALLBACK_VERSION``.
"""

import base64
import hashlib
import io
import os
import re
import tarfile
import time
import zipfile
from typing import Any, Dict, List, Optional, Tuple

NAME = "forkbox"
FALLBACK_VERSION = "0.1.0"
SUMMARY = "Python SDK of forkbox: run commands in throwaway sandboxes served by forkbox daemon"
REQUIRES_PYTHON = ">=3.9"
LICENSE = "See the forkbox source tree"
HERE = os.path.dirname(os.path.abspath(__file__))
PACKAGE_DIR = os.path.join(HERE, NAME)
TAG = "py3-none-any"
# Files of an sdist beside the package.
SDIST_FILES = ["pyproject.toml", "forkbox_build.py", "README.md"]
# zip entries get a fixed date so that builds are reproducible.
ZIP_DATE = (2020, 1, 1, 0, 0, 0)

__all__ = [
    "build_wheel",
    "build_sdist",
    "build_editable",
    "get_requires_for_build_wheel",
    "get_requires_for_build_sdist",
    "get_requires_for_build_editable",
    "prepare_metadata_for_build_wheel",
    "prepare_metadata_for_build_editable",
]


def _version() -> str:
    pkg_info = os.path.join(HERE, "PKG-INFO")
    if os.path.exists(pkg_info):
        with open(pkg_info, encoding="utf-8") as f:
            m = re.search(r"^Version: (\S+)$", f.read(), re.M)
        if m:
            return m.group(1)
    tree_version = os.path.join(HERE, os.pardir, "VERSION")
    if os.path.exists(tree_version):
        with open(tree_version, encoding="utf-8") as f:
            v = f.read().strip()
        if re.fullmatch(r"[0-9]+(\.[0-9]+)*([a-z0-9.+-]*)", v):
            return v
    return FALLBACK_VERSION


def _readme() -> str:
    try:
        with open(os.path.join(HERE, "README.md"), encoding="utf-8") as f:
            return f.read()
    except OSError:
        return ""


def _metadata(version: str) -> str:
    lines = [
        "Metadata-Version: 2.1",
        f"Name: {NAME}",
        f"Version: {version}",
        f"Summary: {SUMMARY}",
        f"License: {LICENSE}",
        f"Requires-Python: {REQUIRES_PYTHON}",
        "Classifier: Programming Language :: Python :: 3",
        "Classifier: Operating System :: POSIX :: Linux",
        "Classifier: Typing :: Typed",
        "Description-Content-Type: text/markdown",
    ]
    return "\n".join(lines) + "\n\n" + _readme()


def _wheel_file() -> str:
    return f"Wheel-Version: 1.0\nGenerator: forkbox_build\nRoot-Is-Purelib: true\nTag: {TAG}\n"


def _package_files() -> List[Tuple[str, str]]:
    """(archive path, file path) of the package's files, sorted."""
    out: List[Tuple[str, str]] = []
    for root, dirs, files in os.walk(PACKAGE_DIR):
        dirs[:] = sorted(d for d in dirs if d != "__pycache__")
        for name in sorted(files):
            if name.endswith((".pyc", ".pyo")) or name.startswith("."):
                continue
            path = os.path.join(root, name)
            rel = os.path.relpath(path, HERE).replace(os.sep, "/")
            out.append((rel, path))
    return out


def _read(path: str) -> bytes:
    with open(path, "rb") as f:
        return f.read()


def _version_py(version: str) -> bytes:
    return (
        '"""The SDK\'s version (written by the wheel build from the forkbox tree\'s VERSION)."""\n\n'
        f"__version__ = {version!r}\n"
    ).encode("utf-8")


class _WheelWriter:
    def __init__(self, path: str) -> None:
        self.zip = zipfile.ZipFile(path, "w", compression=zipfile.ZIP_DEFLATED)
        self.records: List[Tuple[str, str, int]] = []

    def add(self, arcname: str, data: bytes, mode: int = 0o644) -> None:
        info = zipfile.ZipInfo(arcname, date_time=ZIP_DATE)
        info.external_attr = (0o100000 | mode) << 16
        info.compress_type = zipfile.ZIP_DEFLATED
        self.zip.writestr(info, data)
        digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode("ascii")
        self.records.append((arcname, f"sha256={digest}", len(data)))

    def close(self, dist_info: str) -> None:
        record_name = f"{dist_info}/RECORD"
        lines = [f"{name},{digest},{size}" for name, digest, size in self.records]
        lines.append(f"{record_name},,")
        info = zipfile.ZipInfo(record_name, date_time=ZIP_DATE)
        info.external_attr = (0o100644) << 16
        info.compress_type = zipfile.ZIP_DEFLATED
        self.zip.writestr(info, "\n".join(lines) + "\n")
        self.zip.close()


def _dist_info_files(version: str) -> Dict[str, str]:
    return {"METADATA": _metadata(version), "WHEEL": _wheel_file(), "top_level.txt": NAME + "\n"}


def _write_dist_info(metadata_directory: str, version: str) -> str:
    dist_info = f"{NAME}-{version}.dist-info"
    target = os.path.join(metadata_directory, dist_info)
    os.makedirs(target, exist_ok=True)
    for name, text in _dist_info_files(version).items():
        with open(os.path.join(target, name), "w", encoding="utf-8") as f:
            f.write(text)
    return dist_info


def _build(wheel_directory: str, editable: bool) -> str:
    version = _version()
    dist_info = f"{NAME}-{version}.dist-info"
    filename = f"{NAME}-{version}-{TAG}.whl"
    os.makedirs(wheel_directory, exist_ok=True)
    w = _WheelWriter(os.path.join(wheel_directory, filename))
    try:
        if editable:
            w.add(f"__editable__.{NAME}.pth", (HERE + "\n").encode("utf-8"))
        else:
            for arcname, path in _package_files():
                data = _version_py(version) if arcname == f"{NAME}/_version.py" else _read(path)
                w.add(arcname, data)
        for name, text in _dist_info_files(version).items():
            w.add(f"{dist_info}/{name}", text.encode("utf-8"))
    finally:
        w.close(dist_info)
    return filename


# PEP 517 hooks ---------------------------------------------------------------------------


def get_requires_for_build_wheel(config_settings: Optional[Dict[str, Any]] = None) -> List[str]:
    """No build requirements."""
    return []


def get_requires_for_build_sdist(config_settings: Optional[Dict[str, Any]] = None) -> List[str]:
    """No build requirements."""
    return []


def get_requires_for_build_editable(config_settings: Optional[Dict[str, Any]] = None) -> List[str]:
    """No build requirements."""
    return []


def prepare_metadata_for_build_wheel(
    metadata_directory: str, config_settings: Optional[Dict[str, Any]] = None
) -> str:
    """Write ``forkbox-<version>.dist-info`` into ``metadata_directory``; return its name."""
    return _write_dist_info(metadata_directory, _version())


def prepare_metadata_for_build_editable(
    metadata_directory: str, config_settings: Optional[Dict[str, Any]] = None
) -> str:
    """As :func:`prepare_metadata_for_build_wheel`."""
    return _write_dist_info(metadata_directory, _version())


def build_wheel(
    wheel_directory: str,
    config_settings: Optional[Dict[str, Any]] = None,
    metadata_directory: Optional[str] = None,
) -> str:
    """Build ``forkbox-<version>-py3-none-any.whl`` into ``wheel_directory``."""
    return _build(wheel_directory, editable=False)


def build_editable(
    wheel_directory: str,
    config_settings: Optional[Dict[str, Any]] = None,
    metadata_directory: Optional[str] = None,
) -> str:
    """Build an editable wheel: a ``.pth`` file that puts this directory on ``sys.path``."""
    return _build(wheel_directory, editable=True)


def build_sdist(sdist_directory: str, config_settings: Optional[Dict[str, Any]] = None) -> str:
    """Build ``forkbox-<version>.tar.gz`` (the package, this backend, PKG-INFO, tests)."""
    version = _version()
    base = f"{NAME}-{version}"
    filename = f"{base}.tar.gz"
    os.makedirs(sdist_directory, exist_ok=True)
    mtime = int(time.mktime(ZIP_DATE + (0, 0, -1)))

    def add_bytes(tar: tarfile.TarFile, arcname: str, data: bytes) -> None:
        info = tarfile.TarInfo(f"{base}/{arcname}")
        info.size = len(data)
        info.mode = 0o644
        info.mtime = mtime
        tar.addfile(info, io.BytesIO(data))

    with tarfile.open(os.path.join(sdist_directory, filename), "w:gz", format=tarfile.PAX_FORMAT) as tar:
        for name in SDIST_FILES:
            path = os.path.join(HERE, name)
            if os.path.exists(path):
                add_bytes(tar, name, _read(path))
        for arcname, path in _package_files():
            data = _version_py(version) if arcname == f"{NAME}/_version.py" else _read(path)
            add_bytes(tar, arcname, data)
        tests = os.path.join(HERE, "tests")
        if os.path.isdir(tests):
            for name in sorted(os.listdir(tests)):
                if name.endswith(".py"):
                    add_bytes(tar, f"tests/{name}", _read(os.path.join(tests, name)))
        add_bytes(tar, "PKG-INFO", _metadata(version).encode("utf-8"))
    return filename
