"""The guide's AMD section runs ROCm's tool where MAC's image ships it."""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _section(title: str) -> str:
    text = (ROOT / "docs/troubleshooting.md").read_text()
    start = text.index(f"## {title}\n")
    end = text.find("\n## ", start + 1)
    return text[start:end]


def test_the_guide_lists_the_gpus_with_the_images_own_rocm_smi():
    packages = [
        line.strip()
        for line in (ROOT / "docker/debian-packages.txt").read_text().splitlines()
        if line.strip() and not line.startswith("#")
    ]
    assert "rocm-smi" in packages
    section = " ".join(_section("No GPU metrics on an AMD node").split())
    assert "`docker exec mac-rocm-exporter rocm-smi`" in section
    assert "does not ship" not in section
