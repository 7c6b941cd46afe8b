"""The PEP 517 build backend of the sandboxd package, in the standard library alone.

Why not setuptools or hatchling: the machines this project runs on reach no Python package index,
and pip would have to download a backend into its isolated build environment. This one comes
with the source (pyproject.toml: `backend-path = ["_build"]`, `requires = []`), so that
`pip install ./clients/python` works offline.

It builds a pure-Python wheel (py3-none-any) of everything under src/ (PEP 427: the package
files, then NAME-VERSION.dist-info with METADATA, WHEEL, entry_points.txt and RECORD last) and
an sdist of the source tree. The metadata comes from pyproject.toml's [project] table; only the
keys this package uses are read, and an unknown one fails the build rather than being dropped
silently.
"""

from __future__ import annotations

import base64
import csv
import hashlib
import io
import os
import re
import tarfile
import tomllib
import zipfile
from typing import Any

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SOURCE = os.path.join(ROOT, "src")

# Every [project] key that _metadata() turns into a field; anything else is an error.
KNOWN_KEYS = {"name", "version", "description", "readme", "license", "requires-python",
              "dependencies", "classifiers", "scripts"}

# Zip entries get a fixed date (the zip format's earliest), so that a build is reproducible.
ZIP_DATE = (1980, 1, 1, 0, 0, 0)


def _project() -> dict[str, Any]:
    with open(os.path.join(ROOT, "pyproject.toml"), "rb") as f:
        project: dict[str, Any] = tomllib.load(f)["project"]
    unknown = set(project) - KNOWN_KEYS
    if unknown:
        raise ValueError(f"pyproject.toml: [project] keys this backend does not handle: "
                         f"{sorted(unknown)}")
    return project


def _normalized(name: str) -> str:
    """The distribution name as wheel and dist-info names spell it (PEP 427, PEP 503)."""
    return re.sub(r"[-_.]+", "_", name).lower()


def _dist_info(project: dict[str, Any]) -> str:
    return f"{_normalized(project['name'])}-{project['version']}.dist-info"


def _metadata(project: dict[str, Any]) -> str:
    """The core metadata (METADATA in a wheel, PKG-INFO in an sdist), version 2.1."""
    lines = [
        "Metadata-Version: 2.1",
        f"Name: {project['name']}",
        f"Version: {project['version']}",
    ]
    if "description" in project:
        lines.append(f"Summary: {project['description']}")
    if "license" in project:
        lines.append(f"License: {project['license']['text']}")
    if "requires-python" in project:
        lines.append(f"Requires-Python: {project['requires-python']}")
    lines += [f"Classifier: {c}" for c in project.get("classifiers", [])]
    lines += [f"Requires-Dist: {d}" for d in project.get("dependencies", [])]
    body = ""
    if "readme" in project:
        lines.append("Description-Content-Type: text/markdown")
        with open(os.path.join(ROOT, project["readme"]), encoding="utf-8") as f:
            body = f.read()
    return "\n".join(lines) + "\n\n" + body


def _wheel_file() -> str:
    return ("Wheel-Version: 1.0\nGenerator: sandboxd_build\nRoot-Is-Purelib: true\n"
            "Tag: py3-none-any\n")


def _entry_points(project: dict[str, Any]) -> str:
    scripts = project.get("scripts", {})
    if not scripts:
        return ""
    return "[console_scripts]\n" + "".join(f"{k} = {v}\n" for k, v in sorted(scripts.items()))


def _dist_info_files(project: dict[str, Any]) -> dict[str, bytes]:
    """The dist-info directory's files but RECORD, by name."""
    files = {"METADATA": _metadata(project).encode(), "WHEEL": _wheel_file().encode()}
    entry_points = _entry_points(project)
    if entry_points:
        files["entry_points.txt"] = entry_points.encode()
    return files


def _source_files(top: str) -> list[str]:
    """Paths relative to top of every file below it but caches, sorted (a stable wheel)."""
    found = []
    for dirpath, dirnames, filenames in os.walk(top):
        dirnames[:] = sorted(d for d in dirnames if d != "__pycache__")
        for name in sorted(filenames):
            if not name.endswith((".pyc", ".pyo")):
                found.append(os.path.relpath(os.path.join(dirpath, name), top))
    return found


def _record_hash(data: bytes) -> str:
    digest = hashlib.sha256(data).digest()
    return "sha256=" + base64.urlsafe_b64encode(digest).rstrip(b"=").decode()


def _zip_write(archive: zipfile.ZipFile, name: str, data: bytes) -> None:
    info = zipfile.ZipInfo(name, date_time=ZIP_DATE)
    info.external_attr = 0o644 << 16
    info.compress_type = zipfile.ZIP_DEFLATED
    archive.writestr(info, data)


# --- the PEP 517 hooks ----------------------------------------------------------------------------


def get_requires_for_build_wheel(config_settings: dict[str, Any] | None = None) -> list[str]:
    return []


def get_requires_for_build_sdist(config_settings: dict[str, Any] | None = None) -> list[str]:
    return []


def prepare_metadata_for_build_wheel(metadata_directory: str,
                                     config_settings: dict[str, Any] | None = None) -> str:
    project = _project()
    name = _dist_info(project)
    os.makedirs(os.path.join(metadata_directory, name), exist_ok=True)
    for filename, data in _dist_info_files(project).items():
        with open(os.path.join(metadata_directory, name, filename), "wb") as f:
            f.write(data)
    return name


def build_wheel(wheel_directory: str, config_settings: dict[str, Any] | None = None,
                metadata_directory: str | None = None) -> str:
    project = _project()
    dist_info = _dist_info(project)
    filename = f"{_normalized(project['name'])}-{project['version']}-py3-none-any.whl"
    entries: list[tuple[str, bytes]] = []
    for relative in _source_files(SOURCE):
        with open(os.path.join(SOURCE, relative), "rb") as f:
            entries.append((relative.replace(os.sep, "/"), f.read()))
    entries += [(f"{dist_info}/{name}", data) for name, data in _dist_info_files(project).items()]

    record = io.StringIO()
    writer = csv.writer(record, lineterminator="\n")
    for name, data in entries:
        writer.writerow([name, _record_hash(data), len(data)])
    writer.writerow([f"{dist_info}/RECORD", "", ""])  # RECORD cannot hash itself

    path = os.path.join(wheel_directory, filename)
    with zipfile.ZipFile(path, "w") as archive:
        for name, data in entries:
            _zip_write(archive, name, data)
        _zip_write(archive, f"{dist_info}/RECORD", record.getvalue().encode())
    return filename


def build_sdist(sdist_directory: str, config_settings: dict[str, Any] | None = None) -> str:
    project = _project()
    base = f"{_normalized(project['name'])}-{project['version']}"
    members = ["pyproject.toml", project.get("readme", "README.md"), "_build/sandboxd_build.py"]
    members += [os.path.join("src", p) for p in _source_files(SOURCE)]
    filename = f"{base}.tar.gz"

    def add(archive: tarfile.TarFile, name: str, data: bytes) -> None:
        info = tarfile.TarInfo(f"{base}/{name}")
        info.size, info.mode, info.mtime = len(data), 0o644, 0
        archive.addfile(info, io.BytesIO(data))

    with tarfile.open(os.path.join(sdist_directory, filename), "w:gz",
                      format=tarfile.PAX_FORMAT) as archive:
        for member in members:
            with open(os.path.join(ROOT, member), "rb") as f:
                add(archive, member.replace(os.sep, "/"), f.read())
        add(archive, "PKG-INFO", _metadata(project).encode())
    return filename
