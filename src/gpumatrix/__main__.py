"""`python -m gpumatrix`: the `gpumatrix` command."""

from gpumatrix.cli import main

if __name__ == "__main__":
    main(prog_name="gpumatrix")
