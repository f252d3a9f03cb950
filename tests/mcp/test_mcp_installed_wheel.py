"""The wheel, installed into a fresh virtualenv with nothing from the checkout on the path,
serves MCP: ``rifflux mcp-config`` prints how to start it, a client starts it exactly so,
its reindex runs in worker processes of the installed package with the ONNX model and
tokenizer of the installed dependencies, and searches answer.

It builds the wheel with ``python -m build`` from a copy of the checkout's files and
installs it with its dependencies (from pip's cache when warm): about a minute, so the
suite skips it and ``.ci/run`` runs it (``TEST_WHEEL_INSTALL=1``).

What it proves: the installed files are enough (no module, model or data file is read
from the checkout: the server and its workers run with the checkout absent from
``sys.path``, from a working directory outside it). What it does not: that the
dependencies resolve from an empty pip cache, or on another platform.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import anyio
import pytest
from cjk_docs import CJK_DOCS
from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client
from mcp_support import DOCS, REPO_ROOT, anyio_backend_fixture, call_ok  # noqa: F401

pytestmark = [
    pytest.mark.anyio,
    pytest.mark.slow,
    pytest.mark.skipif(
        os.environ.get("TEST_WHEEL_INSTALL") != "1",
        reason="builds and installs the wheel in a fresh venv (~1 min); .ci/run runs it",
    ),
]


def clean_env(**extra: str) -> dict[str, str]:
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("RIFFLUX_", "RIFLUX_", "PYTHON", "VIRTUAL_ENV"))
    }
    env.update(extra)
    return env


def run(command: list[str], cwd: Path, **env: str) -> str:
    done = subprocess.run(
        command, cwd=cwd, env=clean_env(**env), capture_output=True, text=True, timeout=600
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A fresh venv with the wheel built from this checkout installed; returns its root."""
    tmp = tmp_path_factory.mktemp("wheel")
    source = tmp / "source"
    listed = run(["git", "ls-files", "--cached", "--others", "--exclude-standard", "-z"], REPO_ROOT)
    for rel in filter(None, listed.split("\0")):
        if (REPO_ROOT / rel).is_file():
            (source / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(REPO_ROOT / rel, source / rel)
    run([sys.executable, "-m", "build", "--wheel", "--outdir", str(tmp / "dist"), "."], source)
    (wheel,) = (tmp / "dist").glob("rifflux-*.whl")
    venv = tmp / "venv"
    run([sys.executable, "-m", "venv", str(venv)], tmp)
    run([str(venv / "bin" / "python"), "-m", "pip", "install", "-q", str(wheel)], tmp)
    shutil.rmtree(source)  # Nothing of the checkout's copy is left to import from.
    return venv


@pytest.fixture(scope="module")
def workdir(installed: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    work = tmp_path_factory.mktemp("notes")
    for rel, text in {**DOCS, "cjk/zh.md": CJK_DOCS["zh/garden.md"]}.items():
        (work / rel).parent.mkdir(parents=True, exist_ok=True)
        (work / rel).write_text(text, encoding="utf-8")
    return work


def test_the_installed_package_imports_nothing_from_the_checkout(
    installed: Path, workdir: Path
) -> None:
    probe = (
        "import json, sys, rifflux, workers, rifflux.embed.onnx as o; "
        "print(json.dumps([rifflux.__file__, workers.__file__, sys.path]))"
    )
    rifflux_file, workers_file, path = json.loads(
        run([str(installed / "bin" / "python"), "-c", probe], workdir)
    )
    assert Path(rifflux_file).is_relative_to(installed)
    assert Path(workers_file).is_relative_to(installed)
    assert not any(p and Path(p).resolve().is_relative_to(REPO_ROOT) for p in path)


@pytest.fixture(scope="module")
def snippet(installed: Path, workdir: Path) -> dict[str, Any]:
    out = run(
        [
            str(installed / "bin" / "rifflux"),
            "mcp-config",
            "--host",
            "claude",
            "--db",
            ".rifflux/index.db",
        ],
        workdir,
    )
    entry: dict[str, Any] = json.loads(out)["mcpServers"]["rifflux"]
    return entry


def test_mcp_config_names_this_installation_and_absolute_paths(
    snippet: dict[str, Any], installed: Path, workdir: Path
) -> None:
    # Not on this test's PATH: the installed entry point by its absolute path.
    assert snippet["command"] == str(installed / "bin" / "rifflux")
    db = str(workdir / ".rifflux" / "index.db")
    assert snippet["args"] == ["serve", "--db", db]
    assert snippet["env"] == {
        "RIFFLUX_DB_PATH": db,
        "RIFFLUX_BASE_DIR": str(workdir),
        "RIFFLUX_ALLOWED_ROOTS": str(workdir),
    }


@pytest.fixture(scope="module")
async def session(
    snippet: dict[str, Any], tmp_path_factory: pytest.TempPathFactory
) -> AsyncIterator[ClientSession]:
    """The server started exactly as the snippet says, from ``/`` as Claude Desktop
    starts it."""
    logs = tmp_path_factory.mktemp("host-logs")
    env = clean_env(
        **snippet["env"],
        RIFFLUX_EMBEDDING_BACKEND="onnx",
        RIFFLUX_WORKERS="1",
        RIFFLUX_STARTUP_WORKER_GRACE_SECONDS="1",
    )
    params = StdioServerParameters(
        command=snippet["command"], args=snippet["args"], env=env, cwd="/"
    )
    with (logs / "server.err").open("w") as errlog:
        async with (
            stdio_client(params, errlog=errlog) as (read, write),
            ClientSession(read, write) as client,
        ):
            with anyio.fail_after(120):
                await client.initialize()
            yield client


async def test_the_installed_server_indexes_with_its_workers_and_onnx_and_searches(
    session: ClientSession, workdir: Path
) -> None:
    report = await call_ok(session, "reindex", timeout=300)  # No path: the notes folder.
    assert report["indexed_paths"] == [str(workdir)]
    assert report["indexed_files"] == len(DOCS) + 1
    assert report["embedding_model"] == "onnx:all-MiniLM-L6-v2-int8"
    semantic = await call_ok(
        session, "search_rifflux", timeout=60, query="growing vegetables", mode="semantic"
    )
    assert semantic["results"][0]["path"] == "notes/gardening.txt"
    cjk = await call_ok(session, "search_rifflux", timeout=60, query="堆肥", mode="lexical")
    assert cjk["results"][0]["path"] == "cjk/zh.md"
    whole = await call_ok(session, "get_file", timeout=60, path=str(workdir / "cjk" / "zh.md"))
    assert whole["file"]["path"] == "cjk/zh.md"
