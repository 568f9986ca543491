"""Test tooling that tests and benchmarks share: a simulated fleet, fake servers, factories.

Runtime code never imports this package (an import-linter contract says so).
"""
