"""Every README code block runs as written in a fresh directory, each section's blocks in
order, as a reader types them; the tour prints what its comments say, on every run."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.cli_support import OTPMEM

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
BLOCK = re.compile(r"^```(\w*)\n(.*?)^```", re.S | re.M)
TIMEOUT = 120.0
# A reader's shell: the installed otpmem on PATH, the checkout importable.
ENV = {
    **os.environ,
    "PATH": os.pathsep.join([str(OTPMEM.parent), os.environ.get("PATH", "")]),
    "PYTHONPATH": os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p),
}


def sections() -> dict[str, list[tuple[str, str]]]:
    """``{"## heading": [(language, code), ...]}`` for every section with code blocks."""
    found: dict[str, list[tuple[str, str]]] = {}
    for part in re.split(r"^(?=## )", README.read_text(encoding="utf-8"), flags=re.M):
        heading = part.splitlines()[0] if part.startswith("## ") else "(top)"
        blocks = [(m.group(1), m.group(2)) for m in BLOCK.finditer(part)]
        if blocks:
            found[heading] = blocks
    return found


def python_sections() -> list[str]:
    return [h for h, blocks in sections().items() if any(lang == "python" for lang, _ in blocks)]


def run(argv: list[str], cwd: Path, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    """Run ``argv`` in ``cwd``; stdout and stderr together in ``.stdout``."""
    return subprocess.run(
        argv,
        cwd=cwd,
        env=ENV,
        input=stdin,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        timeout=TIMEOUT,
    )


def is_test_file(code: str) -> bool:
    return re.match(r"# (test_\w+\.py)", code) is not None


def test_every_block_is_one_this_file_runs() -> None:
    languages = {lang for blocks in sections().values() for lang, _ in blocks}
    assert languages <= {"python", "sh", "json"}, languages
    assert sum(len(blocks) for blocks in sections().values()) >= 15


@pytest.mark.parametrize("heading", python_sections())
def test_the_python_blocks_of_a_section_run_in_order(heading: str, tmp_path: Path) -> None:
    code = "\n\n".join(
        body for lang, body in sections()[heading] if lang == "python" and not is_test_file(body)
    )
    if not code:
        return  # a section whose only Python is a test file: the next test runs it
    (tmp_path / "readme.py").write_text(code, encoding="utf-8")
    result = run([sys.executable, "readme.py"], tmp_path)
    assert result.returncode == 0, f"{heading}:\n{result.stdout}"
    assert "Traceback" not in result.stdout, result.stdout


def test_the_test_files_it_shows_pass_under_pytest(tmp_path: Path) -> None:
    files = [body for blocks in sections().values() for lang, body in blocks if is_test_file(body)]
    assert files
    for body in files:
        name = re.match(r"# (test_\w+\.py)", body).group(1)  # type: ignore[union-attr]
        (tmp_path / name).write_text(body, encoding="utf-8")
    result = run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider"], tmp_path)
    assert result.returncode == 0, result.stdout
    assert re.search(r"\d+ passed", result.stdout), result.stdout


def test_the_shell_blocks_run_as_written(tmp_path: Path) -> None:
    for heading, blocks in sections().items():
        for lang, body in blocks:
            if lang != "sh":
                continue
            result = run(["bash", "-euo", "pipefail", "-c", body], tmp_path)
            assert result.returncode == 0, f"{heading}:\n{body}\n{result.stdout[-4000:]}"
            assert "Traceback" not in result.stdout


def test_the_json_blocks_are_documents_the_command_imports(tmp_path: Path) -> None:
    documents = [body for blocks in sections().values() for lang, body in blocks if lang == "json"]
    assert documents
    for index, body in enumerate(documents):
        json.loads(body)
        result = run([str(OTPMEM), "import", f"store-{index}", "-"], tmp_path, stdin=body)
        assert result.returncode == 0, result.stdout


def tour() -> str:
    """The first python block under the tour heading."""
    return next(body for lang, body in sections()["## A five-minute tour"] if lang == "python")


def test_the_tour_prints_what_its_comments_say_on_every_run(tmp_path: Path) -> None:
    # A line `print(...)  # text` prints text; a comment line after a print, the same.
    expected = []
    for line in tour().splitlines():
        stripped = line.strip()
        if stripped.startswith("print(") and "  # " in line:
            expected.append(line.split("  # ", 1)[1].strip())
        elif stripped.startswith("# ") and expected is not None and line.startswith("    # "):
            expected.append(stripped[2:])
    assert expected == [
        "saw 1 message(s)",
        "saw 3 message(s)",
        "['At eight, please', 'saw 3 message(s)']",
    ]
    (tmp_path / "tour.py").write_text(tour(), encoding="utf-8")

    for _ in range(2):  # the second run finds the first one's data/ and says the same
        result = run([sys.executable, "tour.py"], tmp_path)
        assert result.returncode == 0, result.stdout
        assert result.stdout.splitlines() == expected
    assert (tmp_path / "data" / "CURRENT").exists()


def test_make_demo_recovers_and_loses_nothing() -> None:
    venv = Path(sys.prefix)
    result = subprocess.run(
        ["make", "--no-print-directory", "-o", str(venv / ".installed"), f"VENV={venv}", "demo"],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        timeout=TIMEOUT,
    )
    assert result.returncode == 0, result.stdout[-4000:]
    assert "== run 1 ended with status 137" in result.stdout
    lines = result.stdout.splitlines()
    assert lines[-1] == "OK: every acknowledged message is in the store, once"
    assert any(line.startswith("messages lost:     0 ") for line in lines)
