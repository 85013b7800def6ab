"""Hyper-parameter transfer from small proxies: muP coordinate check, width × LR sweeps, LR-vs-tokens law.

`coord_check` (is muP right?), `sweep` + `analysis` (does the optimal LR transfer across width?),
`lr_law` + `fit` (the optimal LR against the token budget, extrapolated), `plots` (PNGs),
`proxy` (a recipe at another width / LR / budget), `corpus` (a real-text corpus for CPU examples).
The CLI is `moelab mup check`, `moelab sweep lr`, `moelab lr-predict` (moelab/commands/hparam.py).
"""
