"""The layout's figures, counted from the import graph (grimp, import-linter's engine).

docs/layout.md gives the number of packages, their modules and the import arrows
between packages, how many of those arrows go up a layer and how many cycles there
are. They are counted here, not typed: the packages are import-linter's root packages
in pyproject.toml (less `tests`), the layers its `layers` contracts, and an arrow goes
up when one of its imports breaks a layers contract (an import its `ignore_imports`
allows is counted apart).

    .venv/bin/python -m testkit.layers            # print the table
    .venv/bin/python -m testkit.layers --write    # rewrite it, and docs/img/layers.svg
    .venv/bin/python -m testkit.layers --check    # exit 1 when either is stale

The picture (docs/img/layers.svg) is drawn from the same contracts: one column per
`layers` contract, a row per layer, each package with the summary of its docstring.
"""

from __future__ import annotations

import argparse
import ast
import re
import sys
import textwrap
import tomllib
from dataclasses import dataclass
from html import escape
from pathlib import Path

import grimp

ROOT = Path(__file__).resolve().parents[1]
DOC = ROOT / "docs" / "layout.md"
SVG = ROOT / "docs" / "img" / "layers.svg"
BEGIN, END = "<!-- layers:now -->", "<!-- /layers:now -->"


@dataclass(frozen=True)
class Layers:
    """One layers contract: the rank of each package (siblings share one) and the
    imports it lets through."""

    rank: dict[str, int]
    ignored: frozenset[tuple[str, str]]

    def breaks(self, importer: str, imported: str) -> bool:
        """Whether a module of package `importer` may not import one of `imported`."""
        if importer not in self.rank or imported not in self.rank:
            return False
        # Higher rank is lower in the stack; siblings (`a | b`) may not import each other.
        return self.rank[imported] <= self.rank[importer]


@dataclass(frozen=True)
class Figures:
    packages: list[str]
    modules: dict[str, int]
    inner_arrows: dict[str, int]
    arrows: set[tuple[str, str]]
    up: set[tuple[str, str]]
    allowed_up: set[tuple[str, str]]
    cycles: list[list[str]]


def _config() -> dict:
    with (ROOT / "pyproject.toml").open("rb") as handle:
        return tomllib.load(handle)["tool"]["importlinter"]


def _package_contracts(config: dict) -> list[dict]:
    """The layers contracts between top-level packages (maccli's own inner layers, with
    dotted names or `containers`, are import-linter's to check, not this table's)."""
    return [
        contract
        for contract in config["contracts"]
        if contract["type"] == "layers"
        and not contract.get("containers")
        and not any("." in layer for layer in contract["layers"])
    ]


def _layers(config: dict) -> list[Layers]:
    found = []
    for contract in _package_contracts(config):
        rank = {
            name.strip(): index
            for index, layer in enumerate(contract["layers"])
            for name in layer.split("|")
        }
        ignored = frozenset(
            tuple(part.strip() for part in line.split("->"))
            for line in contract.get("ignore_imports", [])
        )
        found.append(Layers(rank, ignored))
    return found


def _cycles(nodes: list[str], arrows: set[tuple[str, str]]) -> list[list[str]]:
    """The strongly connected components of more than one package (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        for importer, imported in sorted(arrows):
            if importer != node:
                continue
            if imported not in index:
                visit(imported)
                low[node] = min(low[node], low[imported])
            elif imported in stack:
                low[node] = min(low[node], index[imported])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in nodes:
        if node not in index:
            visit(node)
    return found


def count() -> Figures:
    config = _config()
    packages = [name for name in config["root_packages"] if name != "tests"]
    graph = grimp.build_graph(*packages, include_external_packages=False, cache_dir=None)
    layers = _layers(config)

    def package(module: str) -> str:
        return module.split(".", 1)[0]

    modules = {name: 0 for name in packages}
    inner = {name: 0 for name in packages}
    arrows: set[tuple[str, str]] = set()
    up: set[tuple[str, str]] = set()
    allowed_up: set[tuple[str, str]] = set()
    for module in graph.modules:
        modules[package(module)] += 1
        for imported in graph.find_modules_directly_imported_by(module):
            source, target = package(module), package(imported)
            if source == target:
                inner[source] += 1
                continue
            arrows.add((source, target))
            for contract in layers:
                if contract.breaks(source, target):
                    if (module, imported) in contract.ignored:
                        allowed_up.add((source, target))
                    else:
                        up.add((source, target))
    return Figures(
        packages=packages,
        modules=modules,
        inner_arrows=inner,
        arrows=arrows,
        up=up,
        allowed_up=allowed_up - up,
        cycles=_cycles(packages, arrows),
    )


def table(figures: Figures) -> str:
    """The figures as docs/layout.md shows them."""
    rows = [
        "| package | modules | imports between its modules | arrows out to other packages |",
        "|---|---:|---:|---|",
    ]
    for name in figures.packages:
        out = sorted(target for source, target in figures.arrows if source == name)
        rows.append(
            f"| `{name}` | {figures.modules[name]} | {figures.inner_arrows[name]} "
            f"| {len(out)}: {', '.join(out) or '-'} |"
        )
    exceptions = ", ".join(f"{a} → {b}" for a, b in sorted(figures.allowed_up)) or "none"
    up = ", ".join(f"{a} → {b}" for a, b in sorted(figures.up)) or "none"
    cycles = "; ".join(" ↔ ".join(cycle) for cycle in figures.cycles) or "none"
    summary = [
        f"- packages: **{len(figures.packages)}**, modules: **{sum(figures.modules.values())}**, "
        f"import arrows between packages: **{len(figures.arrows)}**",
        f"- arrows going up a layer: **{len(figures.up)}** ({up}); "
        f"allowed by a contract's `ignore_imports`: {len(figures.allowed_up)} ({exceptions})",
        f"- cycles between packages: **{len(figures.cycles)}** ({cycles})",
    ]
    return "\n".join([*rows, "", *summary])


def _section(text: str, body: str) -> str:
    pattern = re.compile(re.escape(BEGIN) + r".*?" + re.escape(END), re.S)
    if not pattern.search(text):
        raise SystemExit(f"{DOC}: no {BEGIN} ... {END} section")
    return pattern.sub(lambda _: f"{BEGIN}\n{body}\n{END}", text)


def summary(package: str) -> str:
    """The first paragraph of a package's docstring, on one line."""
    tree = ast.parse((ROOT / package / "__init__.py").read_text())
    doc = ast.get_docstring(tree) or ""
    return " ".join(doc.split("\n\n")[0].split())


def _box(x: int, y: int, width: int, height: int, name: str, fill: str, stroke: str) -> list[str]:
    chars = max(12, int((width - 24) / 5.8))  # about 5.8 px a character at 11 px
    lines = textwrap.wrap(summary(name), chars)[:4]
    out = [
        f'  <rect x="{x}" y="{y}" width="{width}" height="{height}" rx="8" '
        f'fill="{fill}" stroke="{stroke}"/>',
        f'  <text x="{x + 12}" y="{y + 18}" font-weight="bold">{name}/</text>',
    ]
    out += [
        f'  <text x="{x + 12}" y="{y + 34 + 14 * index}" font-size="11">{escape(line)}</text>'
        for index, line in enumerate(lines)
    ]
    return out


def _arrow(x1: float, y1: float, x2: float, y2: float, dashed: bool = False) -> str:
    dash = ' stroke-dasharray="5,4"' if dashed else ""
    return (
        f'  <line x1="{x1:g}" y1="{y1:g}" x2="{x2:g}" y2="{y2:g}" stroke="#475569" '
        f'stroke-width="1.6"{dash} marker-end="url(#down)"/>'
    )


def svg() -> str:
    """docs/img/layers.svg: the agent's and the master's layers contracts side by side,
    over the package both end in; arrows point to the layer a package may import."""
    config = _config()
    stacks = [
        [[name.strip() for name in layer.split("|")] for layer in contract["layers"]]
        for contract in _package_contracts(config)
    ]
    bottom = stacks[0][-1][0]  # the package every stack ends in (contract)
    assert all(stack[-1] == [bottom] for stack in stacks), "the stacks share their bottom"
    ignored = [
        tuple(part.strip().split(".")[0] for part in line.split("->"))
        for contract in config["contracts"]
        for line in contract.get("ignore_imports", [])
    ]
    row, gap, top = 86, 26, 60
    rows = max(len(stack) for stack in stacks) - 1
    widths, x, columns = [420, 460], 20, []
    height = top + rows * (row + gap) + row + 90
    out = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="960" height="{height}" '
        f'viewBox="0 0 960 {height}" font-family="Helvetica, Arial, sans-serif" font-size="12">',
        "  <!-- Drawn by testkit/layers.py from pyproject.toml's import"
        " contracts and each package's docstring; edit those, not this file. -->",
        "  <defs>",
        '    <marker id="down" viewBox="0 0 10 10" refX="9" refY="5" markerWidth="7" '
        'markerHeight="7" orient="auto">',
        '      <path d="M0,0 L10,5 L0,10 z" fill="#475569"/>',
        "    </marker>",
        "  </defs>",
        f'  <rect width="960" height="{height}" fill="#ffffff"/>',
        '  <text x="20" y="30" font-size="16" font-weight="bold" fill="#0f172a">Who may import '
        "whom: import-linter's layers (arrows point to what a package may import)</text>",
    ]
    colours = [("#ecfdf5", "#10b981", "#34d399"), ("#eff6ff", "#3b82f6", "#60a5fa")]
    titles = ["Agent node (no Django)", "Master (Django)"]
    places: dict[str, tuple[int, int, int]] = {}
    for index, stack in enumerate(stacks):
        width = widths[index]
        back, edge, box = colours[index % 2]
        layers = stack[:-1]
        y_end = top + len(layers) * (row + gap) - gap + 40
        out.append(
            f'  <rect x="{x}" y="{top - 10}" width="{width}" height="{y_end - top + 10}" '
            f'rx="12" fill="{back}" stroke="{edge}" stroke-width="2"/>'
        )
        out.append(f'  <text x="{x + 14}" y="{top + 10}" font-weight="bold">{titles[index]}</text>')
        for depth, layer in enumerate(layers):
            y = top + 22 + depth * (row + gap)
            share = (width - 28 - 12 * (len(layer) - 1)) // len(layer)
            for position, name in enumerate(layer):
                bx = x + 14 + position * (share + 12)
                out += _box(bx, y, share, row, name, "#fff", box)
                places[name] = (bx, y, share)
        columns.append(layers)
        x += width + 20
    y_bottom = top + rows * (row + gap) + 40
    out += _box(20, y_bottom, 900, row - 20, bottom, "#f8fafc", "#64748b")
    for layers in columns:
        for depth, layer in enumerate(layers):
            below = layers[depth + 1] if depth + 1 < len(layers) else None
            for name in layer:
                bx, y, share = places[name]
                cx = bx + share / 2
                if below is None:
                    out.append(_arrow(cx, y + row, cx, y_bottom - 4))
                else:
                    target = places[below[0]]
                    tx = target[0] + target[2] / 2
                    out.append(_arrow(cx, y + row, tx if len(layer) > 1 else cx, target[1] - 4))
    for source, target in ignored:
        if source in places and target in places:
            sx, sy, sw = places[source]
            tx, ty, _ = places[target]
            out.append(_arrow(sx + sw, sy + row / 2, tx - 4, ty + row / 2, dashed=True))
    note_y = y_bottom + row - 20 + 24
    exceptions = ", ".join(f"{a} → {b}" for a, b in ignored) or "none"
    out.append(
        f'  <text x="20" y="{note_y}" font-size="11" fill="#334155">Dashed: an import a contract '
        f"allows by name ({escape(exceptions)}). testkit/, tests/ and bench/ may import the "
        "packages above; none of them imports those.</text>"
    )
    out.append("</svg>")
    return "\n".join(out) + "\n"


def stale() -> bool:
    text = DOC.read_text()
    return _section(text, table(count())) != text or SVG.read_text() != svg()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    action = parser.add_mutually_exclusive_group()
    action.add_argument("--write", action="store_true", help="rewrite docs/layout.md's table")
    action.add_argument("--check", action="store_true", help="exit 1 when it is stale")
    args = parser.parse_args(argv)
    body = table(count())
    if args.write:
        text = DOC.read_text()
        DOC.write_text(_section(text, body))
        SVG.write_text(svg())
        return 0
    if args.check:
        if stale():
            print("docs/layout.md or layers.svg is stale: run python -m testkit.layers --write")
            return 1
        return 0
    print(body)
    return 0


if __name__ == "__main__":
    sys.exit(main())
