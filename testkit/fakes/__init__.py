"""Fakes at the hardware boundary (NVML, amdsmi), shared by the exporter tests and the simfleet."""
