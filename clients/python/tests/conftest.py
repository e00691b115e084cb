"""Fixtures: a REAL `warrant serve` (the debug binary) started once per test session, and tokens.

The server runs from the repository root on its default configuration with the environment
overrides below: a loopback port the kernel picks (the server prints it), the hashed embedder
(no model download), the demo corpus, a throwaway data directory and a fresh HS256 secret per
session (never the demo key). Human review is on and takes every answer, so the review routes
have items. A few limits are lowered so that their errors can be met with small requests.

The binary is `$WARRANT_BIN`, default `$CARGO_TARGET_DIR/debug/warrant` (CARGO_TARGET_DIR
defaults to /var/cache/warrant-target); tests/python/run.sh builds it first. A missing binary
fails the session: these tests never skip.
"""

from __future__ import annotations

import contextlib
import os
import re
import secrets
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator, Mapping

import httpx
import jwt
import pytest

from fakes import FakeChatCompletions

REPO = Path(os.environ.get("WARRANT_REPO", Path(__file__).resolve().parents[3]))
TARGET = Path(os.environ.get("CARGO_TARGET_DIR", "/var/cache/warrant-target"))
BINARY = Path(os.environ.get("WARRANT_BIN", TARGET / "debug" / "warrant"))
SECRET = f"python-client-tests-{secrets.token_hex(16)}"
LISTENING = re.compile(r"^warrant listening on (http://127\.0\.0\.1:\d+)$", re.M)

# Lowered limits, and the host names answered (each met by a test in test_errors.py).
LIMITS = {
    "WARRANT__SERVER__ALLOWED_HOSTS": '["127.0.0.1"]',
    "WARRANT__SERVER__MAX_BODY_BYTES": str(1 << 20),
    "WARRANT__SERVER__MAX_FILE_BYTES": str(64 << 10),
    "WARRANT__SERVER__MAX_BATCH_DOCUMENTS": "5",
    "WARRANT__SERVER__MAX_ACL_NAMES_PER_CHANGE": "8",
    "WARRANT__REVIEW__MAX_VERDICTS_PER_ITEM": "3",
    "WARRANT__REVIEW__MAX_NOTE_CHARS": "100",
}


@dataclass
class Server:
    """A running `warrant serve`: its base URL and log."""

    url: str
    process: subprocess.Popen[bytes]
    log: Path

    def log_tail(self, lines: int = 40) -> str:
        return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])


def _environment(workdir: Path, extra: Mapping[str, str]) -> dict[str, str]:
    environment = {
        key: value for key, value in os.environ.items() if not key.startswith("WARRANT__")
    }
    environment.update(
        {
            "WARRANT__AUTH__HS256_SECRET": SECRET,
            "WARRANT__EMBEDDER__KIND": "hashed",
            "WARRANT__SERVER__BIND": "127.0.0.1:0",
            "WARRANT__DEMO__LOAD": "true",
            "WARRANT__STORAGE__DIR": str(workdir / "data"),
            "WARRANT__SNAPSHOTS__DIR": str(workdir / "snapshots"),
            "WARRANT__REVIEW__ENABLED": "true",
            "WARRANT__REVIEW__SAMPLE_ANSWERED": "1.0",
            "WARRANT__REVIEW__ABSTENTIONS": '["no_authorized_evidence", "insufficient_evidence"]',
            **LIMITS,
            **extra,
        }
    )
    return environment


@contextlib.contextmanager
def running_server(extra: Mapping[str, str] | None = None) -> Iterator[Server]:
    """Starts `warrant serve`, waits until /readyz answers 200, stops it on exit."""
    if not BINARY.is_file():
        pytest.fail(f"no warrant binary at {BINARY}: build it (cargo build --bin warrant) or set WARRANT_BIN", False)
    with tempfile.TemporaryDirectory(prefix="warrant-py-") as directory:
        workdir = Path(directory)
        log = workdir / "server.log"
        with open(log, "wb") as output:
            process = subprocess.Popen(
                [str(BINARY), "serve"],
                cwd=REPO,
                env=_environment(workdir, extra or {}),
                stdout=output,
                stderr=subprocess.STDOUT,
            )
        server = None
        try:
            deadline = time.monotonic() + 120
            while time.monotonic() < deadline:
                if process.poll() is not None:
                    pytest.fail(f"warrant serve exited ({process.returncode}):\n{log.read_text(errors='replace')}", False)
                found = LISTENING.search(log.read_text(errors="replace"))
                if found:
                    with contextlib.suppress(httpx.HTTPError):
                        if httpx.get(f"{found.group(1)}/readyz", timeout=2).status_code == 200:
                            server = Server(found.group(1), process, log)
                            break
                time.sleep(0.1)
            if server is None:
                pytest.fail(f"warrant serve was not ready after 120 s:\n{log.read_text(errors='replace')}", False)
            yield server
        finally:
            process.terminate()
            try:
                process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()


@pytest.fixture(scope="session")
def server() -> Iterator[Server]:
    """The server with the embedded extractive generator."""
    with running_server() as started:
        yield started


@pytest.fixture(scope="session")
def partial_server() -> Iterator[Server]:
    """A second server whose `openai` generator is a test FAKE (fakes.FakeChatCompletions)
    writing one claim its source supports and one it does not: validation withholds the second,
    so the answer is partial."""
    with FakeChatCompletions() as generator:
        extra = {
            "WARRANT__GENERATOR__KIND": "openai",
            "WARRANT__GENERATOR__BASE_URL": f"{generator.url}/v1",
            "WARRANT__GENERATOR__MODEL": "fake",
        }
        with running_server(extra) as started:
            yield started


_minted: dict[tuple[str, ...], str] = {}


def mint(tenant: str, sub: str, *groups: str, admin: bool = False, reviewer: bool = False) -> str:
    """A token from `warrant token` (the CLI, with this session's secret)."""
    key = (tenant, sub, ",".join(groups), str(admin), str(reviewer))
    if key not in _minted:
        command = [str(BINARY), "token", "--tenant", tenant, "--sub", sub, "--groups", ",".join(groups)]
        command += ["--admin"] * admin + ["--reviewer"] * reviewer
        environment = {**os.environ, "WARRANT__AUTH__HS256_SECRET": SECRET}
        done = subprocess.run(command, cwd=REPO, env=environment, capture_output=True, text=True, check=True)
        _minted[key] = done.stdout.strip()
    return _minted[key]


def forged(secret: str = SECRET, *, expires_in: int = 3600, **claims: object) -> str:
    """A token signed with PyJWT (for expired and wrongly signed ones)."""
    payload = {"sub": "alice", "tenant": "acme", "groups": ["everyone"], "roles": [], **claims}
    payload["exp"] = int(time.time()) + expires_in
    return jwt.encode(payload, secret, algorithm="HS256")


@dataclass(frozen=True)
class Users:
    """The demo corpus's users (fixtures/demo/users.json) and tokens of each role."""

    alice: str  # acme, everyone + engineering; the only reader of reorg-plan
    bob: str  # acme, everyone
    gina: str  # globex, staff
    root: str  # acme admin
    globex_admin: str
    reviewer: str  # acme reviewer who may read what alice reads
    bob_reviewer: str  # acme reviewer with bob's access


@pytest.fixture(scope="session")
def users(server: Server) -> Users:
    return Users(
        alice=mint("acme", "alice", "everyone", "engineering"),
        bob=mint("acme", "bob", "everyone"),
        gina=mint("globex", "gina", "staff"),
        root=mint("acme", "root", "everyone", admin=True),
        globex_admin=mint("globex", "gadmin", "staff", admin=True),
        reviewer=mint("acme", "rita", "everyone", "engineering", reviewer=True),
        bob_reviewer=mint("acme", "bob", "everyone", reviewer=True),
    )
