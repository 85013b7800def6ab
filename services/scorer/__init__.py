"""Scorer service: oracle labels, Probe/Judge distillation, calibration, scoring at scale."""
