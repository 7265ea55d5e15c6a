"""The recorder of the tutorials' outputs (tutorials/record_outputs.py), and the recordings it keeps.

The recordings themselves are made on a GPU host; here, stand-in tutorials that need no GPU go through
the same code: each runs in its own interpreter, a good run is written behind its header, a failed one
leaves the old recording alone and makes the recorder exit 1, and a full run deletes the recordings of
tutorials that are gone. Without a GPU the recorder writes nothing and exits 77. The structure the GPU
test compares (tests/cpu/test_tutorials.py) is checked here on made-up text.
"""

from __future__ import annotations

import datetime
import re
import subprocess
import sys
from pathlib import Path

import pytest

from rawcuda.testing import gpu_unavailable_reason
from tests.helpers import EXIT_NO_GPU, ROOT, TUTORIAL_DIR, python_env, tutorial_module

recorder = tutorial_module("record_outputs")
frame = tutorial_module("_tutorial")

INFO = {"gpu": "Stand-in GPU (compute capability 9.0, 132 SMs)", "driver": "580.159 (CUDA 13.0)", "python": "3.x"}
WHEN = datetime.datetime(2025, 1, 2, 3, 4, 5, tzinfo=datetime.timezone.utc)
TIMEOUT_S = 60

GOOD = """
import sys
sys.path.insert(0, {tutorials!r})
from _tutorial import Tutorial, run

def main(t: Tutorial) -> None:
    t.step("copy 4 MiB")
    t.say("took 3.1 ms")
    t.check(True, "all 1,048,576 values arrived")

run(main, "Tutorial 98: a stand-in")
"""
FAILING = GOOD.replace("t.check(True,", "t.check(False,")


def write(folder: Path, name: str, source: str) -> Path:
    path = folder / name
    path.write_text(source.format(tutorials=str(TUTORIAL_DIR)))
    return path


def test_a_good_run_is_written_behind_its_header(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    script = write(tmp_path, "98_good.py", GOOD)
    out_dir = tmp_path / "output"
    assert recorder.record([script], out_dir, INFO) == 0
    text = (out_dir / "98_good.txt").read_text()
    fields, output = recorder.split_recording(text)
    assert fields["recorded"].startswith(datetime.datetime.now(datetime.timezone.utc).strftime("%Y-"))
    assert fields["gpu"] == INFO["gpu"] and fields["driver"] == INFO["driver"]
    assert fields["command"] == f"python3 {script} --code" and "--only 98_good" in fields["regenerate"]
    assert output.startswith("# Tutorial 98: a stand-in\n") and "   ok: all 1,048,576 values arrived\n" in output
    # Recorded as --code shows it: the step's numbered code, then what it printed; and never a pause.
    code = output.index('| t.say("took 3.1 ms")')
    assert output.index("== step 1: copy 4 MiB") < code < output.index("   took 3.1 ms"), output
    assert "[Enter" not in output
    assert output.rstrip().endswith("every step verified.")
    assert "ok     98_good: 1 steps, 1 checks" in capsys.readouterr().out


def test_a_failed_run_keeps_the_old_recording_and_exits_1(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    good, bad = write(tmp_path, "98_good.py", GOOD), write(tmp_path, "97_bad.py", FAILING)
    out_dir = tmp_path / "output"
    out_dir.mkdir()
    (out_dir / "97_bad.txt").write_text("the old recording\n")
    assert recorder.record([bad, good], out_dir, INFO) == 1
    assert (out_dir / "97_bad.txt").read_text() == "the old recording\n"
    assert (out_dir / "98_good.txt").is_file(), "the others are still recorded"
    printed = capsys.readouterr().out
    assert "FAILED (status 1) 97_bad" in printed and "recorded 1 of 2 tutorials" in printed
    assert "  | FAILED: all 1,048,576 values arrived" in printed, "the summary shows the end of what it printed"


def test_a_full_run_deletes_the_recordings_of_tutorials_that_are_gone(tmp_path: Path) -> None:
    script = write(tmp_path, "98_good.py", GOOD)
    out_dir = tmp_path / "output"
    out_dir.mkdir()
    (out_dir / "05_renamed.txt").write_text("stale\n")
    (out_dir / "README.md").write_text("kept\n")
    assert recorder.record([script], out_dir, INFO, every=[script]) == 0
    assert sorted(p.name for p in out_dir.iterdir()) == ["98_good.txt", "README.md"]


def test_only_selects_by_stem_or_file_name() -> None:
    available = recorder.tutorials()
    first, last = available[0], available[-1]
    assert recorder.select([first.stem, last.name], available) == [first, last]
    with pytest.raises(ValueError, match=f"no tutorial 99_nope; the tutorials are: {first.stem}, "):
        recorder.select(["99_nope"], available)


def test_the_recorder_collects_what_the_tests_run() -> None:
    assert recorder.tutorials() == sorted(TUTORIAL_DIR.glob("[0-9][0-9]*_*.py"))
    assert recorder.TUTORIAL_DIR == TUTORIAL_DIR and frame.OUTPUT_DIR == TUTORIAL_DIR / "output"


def run_recorder(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(TUTORIAL_DIR / "record_outputs.py"), *args],
        cwd=ROOT.parent,
        env=python_env(),
        capture_output=True,
        text=True,
        timeout=TIMEOUT_S,
    )


def test_an_unknown_only_is_a_usage_error() -> None:
    proc = run_recorder("--only", "99_nope")
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert proc.stderr.startswith("usage:") and "no tutorial 99_nope" in proc.stderr


@pytest.mark.skipif(gpu_unavailable_reason() is None, reason="a GPU is present: the recorder would record")
def test_without_a_gpu_nothing_is_written(tmp_path: Path) -> None:
    proc = run_recorder("--output", str(tmp_path / "output"))
    assert proc.returncode == EXIT_NO_GPU, proc.stdout + proc.stderr
    assert proc.stdout.startswith("skipped: no usable GPU here") and len(proc.stdout.splitlines()) == 1
    assert not (tmp_path / "output").exists()


@pytest.mark.parametrize(
    ("version_file", "release"),
    [
        ("NVRM version: NVIDIA UNIX x86_64 Kernel Module  580.159  Thu Jan  1 00:00:00 UTC 2025\n", "580.159"),
        ("NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  580.159.03  Release Build\n", "580.159.03"),
    ],
)
def test_the_driver_release_is_read_from_the_kernel_module(
    version_file: str, release: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "version"
    path.write_text(version_file)
    monkeypatch.setattr(recorder, "DRIVER_VERSION_FILE", path)
    assert recorder.driver_release() == release


# --- structure: what the GPU test compares ----------------------------------------------------------------------
RECORDED = "# T\n\n== step 1: copy 4 MiB\n   took 3.1 ms\n   ok: all 1,048,576 values arrived\n\ndone in 1.20 s\n"


def test_a_run_with_other_numbers_has_the_same_structure() -> None:
    recording = recorder.header(INFO, TUTORIAL_DIR / "98_x.py", WHEN) + RECORDED
    fresh = RECORDED.replace("3.1 ms", "2.7 ms").replace("4 MiB", "8 MiB").replace("1,048,576", "2,097,152")
    assert recorder.structure_diff(recording, fresh, "98_x.txt") == ""


def test_a_changed_step_or_check_is_a_diff() -> None:
    recording = recorder.header(INFO, TUTORIAL_DIR / "98_x.py", WHEN) + RECORDED
    fresh = RECORDED.replace("values arrived", "values are back") + "\n== step 2: a new step\n"
    diff = recorder.structure_diff(recording, fresh, "tutorials/output/98_x.txt").splitlines()
    assert diff[:2] == ["--- tutorials/output/98_x.txt (committed)", "+++ this run"]
    assert "-ok: all # values arrived" in diff and "+ok: all # values are back" in diff
    assert "+== step #: a new step" in diff


def test_a_file_without_the_marker_is_not_a_recording() -> None:
    with pytest.raises(ValueError, match=r"not a recording made by tutorials/record_outputs\.py"):
        recorder.split_recording(RECORDED)


def test_the_header_round_trips() -> None:
    fields, output = recorder.split_recording(recorder.header(INFO, ROOT / "tutorials" / "98_x.py", WHEN) + RECORDED)
    assert output == RECORDED
    assert fields["recorded"] == "2025-01-02 03:04:05 UTC" and fields["command"] == "python3 tutorials/98_x.py --code"


# --- the committed recordings ------------------------------------------------------------------------------------
RECORDINGS = sorted(frame.OUTPUT_DIR.glob("*.txt"))


def test_the_output_folder_says_how_it_is_made() -> None:
    readme = (frame.OUTPUT_DIR / "README.md").read_text()
    assert "python3 tutorials/record_outputs.py" in readme


def test_each_recording_is_of_a_tutorial_and_says_where_it_was_made() -> None:
    """One test over all of them (none yet until the lead records them on the GPU host: then it checks each)."""
    for recording in RECORDINGS:
        assert (TUTORIAL_DIR / f"{recording.stem}.py").is_file(), f"{recording.name}: no such tutorial (delete it)"
        fields, output = recorder.split_recording(recording.read_text(encoding="utf-8"))
        for key in ("recorded", "gpu", "driver", "command"):
            assert fields.get(key), f"{recording.name}: the header has no {key!r}"
        assert output.rstrip().endswith("every step verified."), f"{recording.name}: only passing runs are recorded"


def test_each_recording_shows_each_steps_code_before_its_output() -> None:
    """Recorded with --code: a reader without a GPU reads every step's numbered code before what it printed."""
    for recording in RECORDINGS:
        fields, output = recorder.split_recording(recording.read_text(encoding="utf-8"))
        assert fields["command"].endswith(" --code"), f"{recording.name}: record it again with --code"
        blocks = output.split("\n== step ")[1:]
        assert blocks, f"{recording.name}: no steps"
        for block in blocks:
            lines = block.splitlines()
            assert len(lines) > 1 and re.match(r"^   \S+\.py, lines \d+-\d+:$", lines[1]), (
                f"{recording.name}, step {lines[0]}: the step's code does not follow its title"
            )
