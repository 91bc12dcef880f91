"""The repository's benchmarks: one routine per measured claim, run as ``python -m benchmarks ROUTINE``.

Run from the repository root (``python -m benchmarks list`` names every routine). Each routine is a module
of this package with a ``main(argv)``; they share one timer (``benchmarks.timing``) and write their JSON
under ``benchmarks/data/``, which ``python -m benchmarks plot`` draws into ``benchmarks/plots/``. Current
numbers per op are in ``benchmarks/RESULTS.md``, the history of each piece of work in ``benchmarks/log/``.
"""
