"""countersign's benchmarks: `make bench` (`python -m bench`). See bench/README.md."""
