"""The `ray job submit` entrypoint of the whole pipeline and the cluster specs."""
