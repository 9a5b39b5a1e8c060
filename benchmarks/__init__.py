"""Benchmarks live in ``npu_anywhere.bench`` so that the installed CLI can run them; this
package only provides ``python -m benchmarks`` from a checkout."""
