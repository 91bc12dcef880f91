"""`gpumatrix detect`: this machine's GPU class, count, names, compute capability and driver."""

from __future__ import annotations

import json
from dataclasses import asdict
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from gpumatrix.commands.options import root_option
from gpumatrix.console import console, find_root
from gpumatrix.escape import terminal

if TYPE_CHECKING:
    from rich.console import Console

    from gpumatrix.config import Matrix
    from gpumatrix.hardware.detection import Hardware

__all__ = ["detect", "render_hardware"]


@click.command()
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
@root_option
def detect(as_json: bool, root: Path | None) -> None:
    """Show this machine's GPU class, count, names, compute capability and driver."""
    from gpumatrix.config import load_matrix
    from gpumatrix.hardware.detection import detect as detect_hardware

    # Outside a checkout (no --root, no ci/matrix.yaml above) the built-in classes name the GPUs.
    matrix_path = (root or find_root()) / "ci" / "matrix.yaml"
    matrix = load_matrix(matrix_path) if root is not None or matrix_path.is_file() else None
    hardware = detect_hardware(matrix)
    if as_json:
        click.echo(json.dumps(_hardware_dict(hardware), indent=2))
        return
    render_hardware(console(), hardware, matrix)


def _hardware_dict(hardware: Hardware) -> dict[str, Any]:
    return {**asdict(hardware), "describe": hardware.describe()}


def render_hardware(console: Console, hardware: Hardware, matrix: Matrix | None) -> None:
    from rich.table import Table

    # Device names and the driver come from NVML or nvidia-smi: text, not markup.
    table = Table(title=f"this machine: {terminal(hardware.describe())}", show_header=False)
    table.add_row("class", terminal(hardware.gpu_class))
    table.add_row("GPUs", str(hardware.count))
    for index, name in enumerate(hardware.names):
        capability = hardware.capabilities[index] if index < len(hardware.capabilities) else None
        cc = f"sm_{capability[0]}{capability[1]}" if capability else "?"
        table.add_row(f"GPU {index}", terminal(f"{name} ({cc})"))
    table.add_row("driver", terminal(hardware.driver or "-"))
    table.add_row("detected via", hardware.source)
    if matrix is None:
        table.add_row("matching runner", "no ci/matrix.yaml here (pass --root DIR)")
    else:
        matching = [
            r.label for r in matrix.runners if r.gpu_class == hardware.gpu_class and r.gpus == hardware.count
        ]
        table.add_row("matching runner", ", ".join(matching) or "none")
    console.print(table)
