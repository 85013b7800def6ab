"""The same tracker app as a Ray Serve application, for a team server on a Ray cluster.

    serve run services.tracker.serve_ray:app_builder db_url=postgresql+psycopg://… replicas=2 allowed_hosts=tracker.lab

Why a builder function: `serve.ingress` accepts a function that returns the ASGI app and calls it
on each replica, so the SQLAlchemy engine (and its connection pool) is created where it is used,
never pickled. Use PostgreSQL when replicas > 1: several processes appending to one SQLite file
serialise on its lock.
"""

from __future__ import annotations

from typing import Any


def build_deployment(db_url: str, read_protected: bool = False, replicas: int = 1, num_cpus: float = 0.5,
                     allowed_hosts: list[str] | None = None):
    """A bound Serve application running `create_app(db_url, read_protected)` in `replicas` replicas,
    answering the Host names in `allowed_hosts` (default: this machine's loopback names)."""
    from ray import serve

    def make_app():
        from services.tracker.app import LOCAL_HOSTS, create_app

        return create_app(db_url=db_url, read_protected=read_protected, allowed_hosts=allowed_hosts or LOCAL_HOSTS)

    deployment = serve.deployment(
        serve.ingress(make_app)(), name="tracker", num_replicas=replicas, ray_actor_options={"num_cpus": num_cpus}
    )
    return deployment.bind()


def app_builder(args: dict[str, Any]):
    """`serve run services.tracker.serve_ray:app_builder db_url=… read_protected=false replicas=1
    allowed_hosts=tracker.lab,10.0.0.5`."""
    hosts = [h for h in str(args.get("allowed_hosts", "")).split(",") if h]
    return build_deployment(
        db_url=args.get("db_url", "sqlite:///runs/tracker.db"),
        read_protected=str(args.get("read_protected", "false")).lower() in ("1", "true", "yes"),
        replicas=int(args.get("replicas", 1)),
        allowed_hosts=hosts or None,
    )
