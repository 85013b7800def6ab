"""What the demo prints for the frozen router of the model it trained, and where it looks for it."""

from __future__ import annotations

from pathlib import Path

from moelab.commands.demo_router import HEADER, demo_run_folder, frozen_router_lines, measure_frozen_router

ROOT = Path(__file__).resolve().parents[3]


def _stats(worst: float, floor: float, tokens: int, documents: int) -> dict:
    return {"maxvio_worst": worst, "floor_worst": floor, "ratio_to_floor": worst / floor, "tokens": tokens,
            "documents": documents, "maxvio": {"layer1": worst}}


def test_each_stream_is_printed_beside_its_floor_and_the_target_held_out_first():
    report = {"train": _stats(0.09, 0.05, 131072, 301), "held_out": _stats(0.071, 0.052, 131072, 512)}
    assert frozen_router_lines(report, 131072, 131072) == [
        "", HEADER,
        "held-out: frozen MaxVio 0.071 worst layer, floor 0.052 (1.37x the floor; target <= 1.5x), "
        "131,072 tokens in 512 documents",
        "training stream: frozen MaxVio 0.090 worst layer, floor 0.050 (1.80x the floor; target <= 1.5x), "
        "131,072 tokens in 301 documents",
        "bias: calibrated at the end of training on 131,072 training-stream tokens; the training-stream figures "
        "route the tokens after them",
    ]


def test_the_held_out_split_is_also_read_at_the_training_streams_source_mix():
    held = {**_stats(0.12, 0.04, 78080, 89), "maxvio_at_reference_mix_worst": 0.05, "reference_mix_missing": ["wiki"]}
    lines = frozen_router_lines({"train": _stats(0.044, 0.028, 131072, 162), "held_out": held}, 131072, 131072)
    assert lines[3] == ("held-out at the training stream's source mix: frozen MaxVio 0.050 worst layer (the same "
                        "documents, their sources reweighted to the training stream's token shares; without wiki, "
                        "absent there)")
    assert lines[4].startswith("training stream: frozen MaxVio 0.044")


def test_an_uncalibrated_model_says_so_and_a_run_without_held_out_documents_prints_the_training_stream():
    lines = frozen_router_lines({"train": _stats(0.3, 0.05, 2048, 20)}, 0, 0)
    assert lines[2].startswith("training stream: frozen MaxVio 0.300 worst layer, floor 0.050 (6.00x the floor")
    assert lines[3].startswith("bias: not calibrated at the end of training")
    assert len(lines) == 4


def test_a_calibration_the_measure_did_not_skip_is_flagged():
    lines = frozen_router_lines({"train": _stats(0.1, 0.05, 2048, 20)}, 131072, 0)
    assert "may include them" in lines[-1]


def test_the_run_folder_is_where_the_pipeline_trains_the_demo(tmp_path):
    runs = tmp_path / "runs"
    assert demo_run_folder(ROOT, "configs/demo.yaml", runs) == runs / "pipeline" / "demo" / "train" / "demo"


def test_a_missing_run_is_said_in_one_line_naming_where_it_looked(tmp_path, capsys):
    run = tmp_path / "runs" / "pipeline" / "demo" / "train" / "demo"
    lines = measure_frozen_router(run)
    assert lines[:2] == ["", HEADER] and len(lines) == 3
    assert lines[2].startswith("frozen router not measured") and str(run / "checkpoints") in lines[2]
    assert lines[2] in capsys.readouterr().out
