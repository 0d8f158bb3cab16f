"""The house's layout, as docs/architecture.md draws it: imports run down the layers, no
package reaches into another's private modules, files stay small, and the map names every
package. Read from the source's imports (ast), so an import inside a function counts too."""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "otpmem"

# The layers, bottom up: a module may import its own package and the layers below its own;
# two packages of one layer never import each other.
LAYERS: list[set[str]] = [
    {"reprs", "frozen", "protocols", "telemetry"},
    {"messages", "actors"},
    {"supervisors", "llm"},
    {"stores"},
    {"memory"},
    {"guardrails"},
    {"kernel"},
    {"agents"},
    {"app"},
    {"simulate", "aio", "observe"},
    {"integrations"},
    {"cli"},
    {"__init__", "__main__"},
]
RANK = {part: rank for rank, layer in enumerate(LAYERS) for part in layer}
GENERIC = {"actors", "supervisors"}  # the runtime knows no message, store or agent
MAX_LINES = 400
MAX_LOOSE_MODULES = 8


def modules() -> Iterator[tuple[Path, list[str], bool]]:
    """Every module of the package: its path, dotted name parts, and whether a package."""
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = list(path.relative_to(ROOT).with_suffix("").parts)
        is_package = parts[-1] == "__init__"
        yield path, parts[:-1] if is_package else parts, is_package


def imported(path: Path, parts: list[str], is_package: bool) -> Iterator[list[str]]:
    """The dotted names a module imports (``from a import b`` yields ``a.b`` too)."""
    package = parts if is_package else parts[:-1]
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield alias.name.split(".")
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package[: len(package) - node.level + 1]
                module = base + (node.module.split(".") if node.module else [])
            else:
                module = (node.module or "").split(".")
            yield module
            for alias in node.names:
                yield [*module, alias.name]


def layer_of(parts: list[str]) -> str:
    return parts[1] if len(parts) > 1 else "__init__"


def test_imports_run_down_the_layers() -> None:
    upward = []
    for path, parts, is_package in modules():
        source = layer_of(parts)
        for target in imported(path, parts, is_package):
            if target[0] != "otpmem" or len(target) < 2 or target[1] not in RANK:
                continue
            to = target[1]
            if to == source or RANK[to] < RANK[source]:
                continue
            upward.append(f"{path.relative_to(ROOT)} imports {'.'.join(target)}")
    assert upward == [], "imports that run up or across the layers:\n" + "\n".join(upward)


def test_the_runtime_knows_no_message_store_or_agent() -> None:
    known = []
    for path, parts, is_package in modules():
        if layer_of(parts) not in GENERIC:
            continue
        for target in imported(path, parts, is_package):
            if target[0] == "otpmem" and len(target) > 1 and target[1] not in GENERIC | {"reprs"}:
                known.append(f"{path.relative_to(ROOT)} imports {'.'.join(target)}")
    assert known == [], "\n".join(sorted(set(known)))


def test_no_package_imports_another_packages_private_modules_or_members() -> None:
    private = []
    for path, parts, is_package in modules():
        for target in imported(path, parts, is_package):
            if target[0] != "otpmem":
                continue
            first = next((i for i, p in enumerate(target) if p.startswith("_")), None)
            if first is None or target[first].startswith("__"):
                continue
            owner = target[:first]  # the package whose private module or member this is
            if parts[: len(owner)] != owner:
                private.append(f"{path.relative_to(ROOT)} imports {'.'.join(target)}")
    assert private == [], "\n".join(sorted(set(private)))


def test_no_file_is_over_the_limit() -> None:
    long = {
        str(path.relative_to(ROOT)): n
        for path, _, _ in modules()
        if (n := len(path.read_text().splitlines())) > MAX_LINES
    }
    assert long == {}


def test_few_loose_modules_under_the_package() -> None:
    loose = sorted(p.name for p in PACKAGE.glob("*.py"))
    assert len(loose) <= MAX_LOOSE_MODULES, loose


def test_the_architecture_map_names_every_package() -> None:
    text = (ROOT / "docs" / "architecture.md").read_text()
    named = set(re.findall(r"`(otpmem(?:\.\w+)+)`", text))
    missing = [
        ".".join(parts) for _, parts, is_package in modules() if is_package and len(parts) > 1
    ]
    assert [m for m in missing if m not in named] == []
    for layer in LAYERS[:-1]:
        for part in layer:
            assert f"`{part}`" in text or f"`otpmem.{part}`" in text, part
