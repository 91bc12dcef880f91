"""``python -m mxfuse.models.dsv41 make-checkpoint DIR --seed N [--config NAME] [--device D]``."""

from __future__ import annotations

import click

from mxfuse.models.dsv41.config import CONFIGS


@click.group()
def main() -> None:
    """DeepSeek-V4.1 attention sublayer tools."""


@main.command("make-checkpoint")
@click.argument("directory", type=click.Path(file_okay=False))
@click.option("--seed", type=int, required=True, help="Seed of the random weights.")
@click.option(
    "--config",
    "config_name",
    type=click.Choice(sorted(CONFIGS)),
    default="flash",
    show_default=True,
    help="Dims to write (a TP config writes the whole model: ranks read their shard).",
)
@click.option("--layer", type=int, default=0, show_default=True, help="Layer index of the tensor names.")
@click.option(
    "--device", default="cpu", show_default=True, help="Where to draw and quantize (cuda is faster)."
)
def make_checkpoint_command(directory: str, seed: int, config_name: str, layer: int, device: str) -> None:
    """Write a random checkpoint in the DeepSeek-V4.1 native format into DIRECTORY."""
    from mxfuse.models.dsv41.checkpoint import make_checkpoint

    path = make_checkpoint(directory, CONFIGS[config_name], seed=seed, layer=layer, device=device)
    click.echo(f"wrote {path} ({path.stat().st_size / 2**20:.1f} MiB, config {config_name}, seed {seed})")


if __name__ == "__main__":
    main()
