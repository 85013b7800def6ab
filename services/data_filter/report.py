"""Send the filter funnel and per-stage removals to the tracker through `shared.tracking`.

The funnel (read -> valid -> after streaming filters -> after dedup -> after perplexity -> written)
goes as a `funnel` event named `documents`, and one per input source as `documents/<source>`;
each source's bytes through its chain (read, then after each filter: removals and edits both
shrink it) as `bytes/<source>`, so text a rewriting filter cut from kept documents shows up;
per-chain, per-filter removal counts as scalars `data_filter/<kind>/<filter>/removed`, and the
bytes edits took and the documents past the edit bound as `.../bytes_edited`, `.../edit_flagged`,
`.../edit_removed`. The
client spools when the server is down (never blocks the stage for long, never loses the points).
Returns a short status string that stats.json records.
"""

from __future__ import annotations

from typing import Any


def report_funnel(stats: dict[str, Any], experiment: Any = None, timeout: float = 5.0) -> str:
    if experiment is None:
        return "not reported: no experiment config given (stats.json is the record)"
    if experiment.tracker.mode == "disabled":
        return "not reported: tracker.mode=disabled"
    import os

    from shared import tracking

    # a stage of cluster/pipeline.py reports as a child of the pipeline run
    run = tracking.init(config=experiment, name=f"{experiment.name}-data-filter", tags=["data_filter"],
                        parent=os.environ.get("MOELAB_PARENT_RUN"))
    try:
        run.log_funnel({f["stage"]: int(f["docs"]) for f in stats["funnel"]}, name="documents")
        for source, d in stats["sources"].items():
            run.log_funnel({f["stage"]: int(f["docs"]) for f in d["funnel"]}, name=f"documents/{source}")
            if d.get("stages"):
                run.log_funnel(bytes_funnel(d["stages"]), name=f"bytes/{source}")
        scalars: dict[str, float] = {"data_filter/records": stats["records"], "data_filter/written": stats["written"],
                                     "data_filter/near_duplicates": stats["near_duplicates"]}
        for reason, n in stats["rejected"].items():
            scalars[f"data_filter/rejected/{reason}"] = n
        for kind, stages in stats["chains"].items():
            for st in stages:
                scalars[f"data_filter/{kind}/{st['name']}/removed"] = sum(st["removed"].values())
                scalars[f"data_filter/{kind}/{st['name']}/seconds"] = st["seconds"]
                if st.get("edited"):
                    for key in ("bytes_edited", "edit_flagged", "edit_removed"):
                        scalars[f"data_filter/{kind}/{st['name']}/{key}"] = st[key]
        run.log(scalars, step=0)
    finally:
        run.finish(timeout=timeout)
    return f"reported to the tracker as run {run.id} ({experiment.tracker.mode})"


def bytes_funnel(stages: list[dict[str, Any]]) -> dict[str, int]:
    """Bytes read, then bytes left after each filter of a chain (the stage dicts of stats.json)."""
    if not stages:
        return {}
    return {"read": int(stages[0]["bytes_in"]), **{st["name"]: int(st["bytes_kept"]) for st in stages}}
