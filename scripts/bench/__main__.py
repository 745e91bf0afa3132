"""``python -m scripts.bench``: run the benchmark suite (see run.py and README.md)."""

from scripts.bench.run import main

raise SystemExit(main())
