"""The repository README's "Python, LangChain and LlamaIndex" program runs as written, against the
real server, in this (fresh, pinned) environment, and prints cited answers scoped to each user."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

from conftest import Server, Users

README = Path(__file__).resolve().parents[3] / "README.md"
SECTION = "## Python, LangChain and LlamaIndex"


def _program() -> str:
    text = README.read_text()
    assert SECTION in text, f"{README} has no section {SECTION!r}"
    section = text.split(SECTION, 1)[1].split("\n## ", 1)[0]
    blocks = re.findall(r"```python\n(.*?)```", section, re.S)
    assert len(blocks) == 1, "the section holds one Python program"
    return blocks[0]


def test_readme_program_prints_cited_scoped_answers(server: Server, users: Users, tmp_path: Path) -> None:
    program = tmp_path / "cited.py"
    program.write_text(_program())
    environment = {**os.environ, "WARRANT_URL": server.url, "ALICE": users.alice, "GINA": users.gina}
    done = subprocess.run([sys.executable, str(program)], env=environment, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    output = done.stdout
    alice = [line for line in output.splitlines() if line.startswith("ALICE:")]
    gina = [line for line in output.splitlines() if line.startswith("GINA:")]
    assert alice and all("250 euros" in line for line in alice), output
    assert gina and all("210 euros" in line for line in gina), output
    assert "cited: Acme travel policy v1:" in output and "cited: Globex travel policy v1:" in output
    prompt = output.split("System: ", 1)[1].split("\n0.", 1)[0]
    assert "[1] Globex travel policy (travel-policy v1)" in prompt, output
    assert "Acme" not in prompt and "Human: Sources:" in prompt
    nodes = re.findall(r"^\d\.\d{3} (\S+) (.+)$", output, re.M)
    assert nodes and ("travel-policy", "Acme travel policy") in nodes
    assert not any(title.startswith("Globex") for _, title in nodes)
