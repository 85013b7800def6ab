"""Evaluation of an in-memory model + tokenizer: bits per byte on reference sets and the offline task suite.

Pure functions (no files written, no tracker), so the trainer can call them between steps, an
ablation on a freshly trained proxy, and `moelab eval` on a loaded checkpoint, all through the
same code path (`shared.eval.scoring`).
"""
