"""Command modules of the `moelab` CLI; each exposes `register(app)`."""
