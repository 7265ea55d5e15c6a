"""Every benchmark, one command: ``python bench/run_all.py`` on a GPU host (about 8 minutes on an H200).

Runs each benchmark script in its own interpreter (so one failing peer cannot take the others down),
builds and runs the C reference program (bench/c/driver_bench.c, when nvcc is there), and writes
``bench/results/<date>-<gpu>.json`` and ``.md`` -- versions of everything involved, every figure, and each
target stated as met or not with its numbers -- plus PNG plots when matplotlib is installed (an optional
extra: ``pip install rawcuda[plot]``; the tables are written without it): ``<date>-<gpu>.png``, and
``<date>-<gpu>-progressions.png`` with a bar chart per kernel progression (bench/progressions.py). The
SGEMM progression (bench/sgemm.py) also keeps its own files beside them, ``<date>-<gpu>-sgemm.json``,
``.md`` and ``.png``.

Without a usable driver and GPU it measures nothing, writes nothing, says why in one ``skipped:`` line and
exits with 77 -- the status the demo and the tutorials use for the same reason.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import json
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import progressions_report  # bench/progressions_report.py: this script's folder is on sys.path

ROOT = Path(__file__).resolve().parent.parent
BENCH = ROOT / "bench"
STEPS = (
    "launch_overhead",
    "kernels",
    "sgemm",
    "copies",
    "graphs",
    "unified_memory",
    "hopper",
    "imports",
    "progressions",
)
MD_SECTIONS = (
    ("graphs", "4. Graph pipeline"),
    ("unified_memory", "5. Managed vs explicit memory"),
    ("hopper", "9. Hopper features (bench/hopper.py)"),
)
STEP_ARGS = {"progressions": ["--name", "progressions"]}  # its default name is dated; here run_all names the files
OWN_FILES = ("sgemm",)  # steps that name their files <date>-<gpu>-<step>.*: copied to --out as they are
STEP_TIMEOUT_S = 300
EXIT_OK = 0
EXIT_NO_GPU = 77  # the demo's and the tutorials' status for "no usable GPU here", said in one line
PEERS = ("numpy", "cuda-bindings", "cuda-core", "cupy-cuda13x", "torch", "matplotlib")


def run_step(name: str, out: Path) -> str:
    script = BENCH / f"{name}.py"
    if not script.exists():
        return "not run: script missing"
    start = time.perf_counter()
    proc = subprocess.run(
        [sys.executable, str(script), "--out", str(out), *STEP_ARGS.get(name, [])],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=STEP_TIMEOUT_S,
    )
    took = time.perf_counter() - start
    if proc.returncode != 0:
        return f"FAILED after {took:.0f} s: {proc.stderr.strip().splitlines()[-1] if proc.stderr.strip() else ''}"
    return f"ok in {took:.0f} s"


def run_c(out: Path) -> dict[str, Any] | str:
    nvcc = shutil.which("nvcc") or "/usr/local/cuda/bin/nvcc"
    if not Path(nvcc).exists():
        return "not run: no nvcc to build bench/c/driver_bench.c"
    exe = out / "driver_bench"
    build = subprocess.run(
        [nvcc, "-O2", "-o", str(exe), str(BENCH / "c" / "driver_bench.c"), "-lcuda"], capture_output=True, text=True
    )
    if build.returncode != 0:
        return f"build failed: {build.stderr.strip()}"
    ptx = ROOT / "rawcuda" / "kernels" / "vector_add.ptx"
    proc = subprocess.run([str(exe), str(ptx)], capture_output=True, text=True, timeout=STEP_TIMEOUT_S)
    if proc.returncode != 0:
        return f"run failed: {proc.stderr.strip()}"
    result: dict[str, Any] = json.loads(proc.stdout)
    return result


def load(out: Path, name: str) -> dict[str, Any]:
    """``<name>.json`` in ``out`` (or ``<date>-<gpu>-<name>.json``, for the steps that name their own files)."""
    paths = [out / f"{name}.json", *sorted(out.glob(f"*-{name}.json"))]
    found = [p for p in paths if p.exists()]
    return json.loads(found[0].read_text()) if found else {}


def versions() -> dict[str, str]:
    found = {"python": platform.python_version()}
    for dist in PEERS:
        try:
            found[dist] = importlib.metadata.version(dist)
        except importlib.metadata.PackageNotFoundError:
            found[dist] = "not installed"
    return found


#: Peers whose launch takes the arguments as Python values, as Function.launch does (cuda_bindings with a
#: prebuilt kernelParams address is a floor like the bound launch, and is compared with that).
PER_CALL_PEERS = ("cuda_bindings_values", "cuda_core", "cupy_rawmodule")
BOUND_VS_C_TARGET = 1.05
#: At most this many µs per launch for two streams taking turns over one stream, beyond the driver's own.
TWO_STREAM_PENALTY_US = 0.1
DRIVER_PENALTY = "driver: two streams taking turns"
#: Which of the driver's own penalties (bare ctypes, same rounds) a rawcuda penalty is judged beyond: the words
#: its label contains -> the driver's row. A label matching none (new ints) is judged as it stands.
DRIVER_PENALTIES = {
    "two streams": DRIVER_PENALTY,
    "stream=None": "driver: the legacy stream taking turns with a stream",
    "argument sets": "driver: two kernelParams arrays taking turns",
}


def penalty_targets(penalties: dict[str, float]) -> list[tuple[str, bool | None, str]]:
    """Two streams, stream=None, two argument sets and new ints cost what the plain launch costs: each within
    TWO_STREAM_PENALTY_US of it, beyond what the driver itself pays for the same alternation (same rounds)."""
    rows: list[tuple[str, bool | None, str]] = []
    for label, value in penalties.items():
        if label.startswith("driver:"):
            continue
        own = next((row for words, row in DRIVER_PENALTIES.items() if words in label), None)
        driver = penalties.get(own, 0.0) if own is not None else None
        beyond = value if driver is None else value - driver
        shown = f"{value:+.2f} us" + ("" if driver is None else f" (the driver's own {driver:+.2f})")
        target = f"{label}: <= +{TWO_STREAM_PENALTY_US} us per launch" + (
            "" if driver is None else " beyond the driver's"
        )
        rows.append((target, beyond <= TWO_STREAM_PENALTY_US, shown))
    return rows


def launch_targets(launch: dict[str, Any]) -> list[tuple[str, bool | None, str]]:
    """The launch targets: Function.launch <= every Python peer; the bound launch <= 1.05x C."""
    rows: list[tuple[str, bool | None, str]] = []
    ours = launch["rawcuda_launch"]
    peers = {name: launch[name]["us"] for name in PER_CALL_PEERS if name in launch}
    if peers:
        slowest_ok = all(ours["us"] <= us for us in peers.values())
        shown = ", ".join(f"{name} {us:.2f}" for name, us in peers.items())
        rows.append(("Function.launch <= every Python peer", slowest_ok, f"{ours['us']:.2f} us vs {shown} us"))
    bound, floor = launch.get("rawcuda_bound"), launch.get("c_launch_kernel")
    if bound and floor:
        rows.append(
            (
                f"bound launch <= {BOUND_VS_C_TARGET}x the C program (same process, same rounds)",
                bound["ratio"] <= BOUND_VS_C_TARGET,
                f"{bound['us']:.2f} us vs C {floor['us']:.2f} us ({bound['ratio']:.3f}x)",
            )
        )
    if bound and "cuda_bindings" in launch:
        cb = launch["cuda_bindings"]["us"]
        rows.append(
            (
                "bound launch <= cuda.bindings with prebuilt kernelParams",
                bound["us"] <= cb,
                f"{bound['us']:.2f} vs {cb:.2f} us",
            )
        )
    return rows + floor_targets(launch)


def floor_targets(launch: dict[str, Any]) -> list[tuple[str, bool | None, str]]:
    """Whether the launch targets can be met at all over ctypes, and what the checks cost above that floor.

    python_floor is a Python function of launch's shape that makes only rawcuda's ctypes driver call. When it
    is already slower than a peer, no Python launch over ctypes can beat that peer: the gap is the call itself.
    """
    floor = launch.get("python_floor")
    if floor is None:
        return []
    rows: list[tuple[str, bool | None, str]] = []
    if "cuda_bindings" in launch:
        cb = launch["cuda_bindings"]["us"]
        rows.append(
            (
                "the floor over ctypes (python_floor) <= cuda.bindings: the bound target is reachable",
                floor["us"] <= cb,
                f"python_floor {floor['us']:.2f} vs cuda.bindings {cb:.2f} us",
            )
        )
    if "cuda_core" in launch and "rawcuda_launch" in launch:
        ours, core = launch["rawcuda_launch"]["us"], launch["cuda_core"]["us"]
        rows.append(
            (
                "Function.launch's checks above the floor <= cuda.core's whole call above it",
                ours - floor["us"] <= core - floor["us"],
                f"checks +{ours - floor['us']:.2f} us; cuda.core +{core - floor['us']:.2f} us over python_floor "
                f"{floor['us']:.2f} us",
            )
        )
    return rows


def targets(data: dict[str, Any]) -> list[tuple[str, bool | None, str]]:
    """(target, met?, the numbers) for each goal of the benchmark issue; None = could not be measured."""
    rows: list[tuple[str, bool | None, str]] = []
    launch = data.get("launch_overhead", {}).get("results", {})
    if launch:
        rows += launch_targets(launch)
        rows += penalty_targets(data["launch_overhead"].get("penalties", {}))
    replay = data.get("graphs", {}).get("tiny", {}).get("graph_gpu_us_per_kernel")
    rows.append(
        (
            "fastest path <= 1.0 us per kernel (graph replay)",
            None if replay is None else replay <= 1.0,
            "not measured" if replay is None else f"{replay:.2f} us",
        )
    )
    kernels = {row[0]: row[2] for row in data.get("kernels", {}).get("rows", [])}
    copy = kernels.get("device-to-device copy, 1 GiB (read + write)")
    if copy:
        add, red = kernels["vector_add, 3 x 1 GiB"], kernels["warp_reduce_sum, 1 GiB (read)"]
        rows.append(("vector add >= 90% of the copy ceiling", add >= 0.9 * copy, f"{add:.2f} vs {copy:.2f} TB/s"))
        rows.append(("reduction >= 90% of the copy ceiling", red >= 0.9 * copy, f"{red:.2f} vs {copy:.2f} TB/s"))
        for peer in ("cupy.sum, same 1 GiB", "torch.sum, same 1 GiB"):
            if peer in kernels and kernels[peer] == kernels[peer]:  # not NaN
                rows.append(
                    (
                        f"reduction faster than {peer.split(',')[0]}",
                        red > kernels[peer],
                        f"{red:.2f} vs {kernels[peer]:.2f} TB/s",
                    )
                )
    c, ours_copies = data.get("c"), data.get("copies", {}).get("copies")
    if isinstance(c, dict) and ours_copies:
        worst = min(
            min(o[k] / r[k] for k in ("pinned_htod", "pinned_dtoh"))
            for o, r in zip(ours_copies, c["copies"], strict=True)
            if o["bytes"] >= 16 << 20
        )
        rows.append(("pinned copies >= 97% of the C program (>= 16 MiB)", worst >= 0.97, f"worst ratio {worst:.1%}"))
    rows += [(goal, met, numbers) for goal, met, numbers in data.get("progressions", {}).get("targets", [])]
    rows += [tuple(row) for row in data.get("sgemm", {}).get("targets", [])]  # bench/sgemm.py states its own
    imports = data.get("imports", {}).get("import_ms", {})
    if isinstance(imports.get("rawcuda"), float):
        peers = {k: v for k, v in imports.items() if "rawcuda" not in k and k != "numpy" and isinstance(v, float)}
        slowest_win = all(imports["rawcuda"] < v for v in peers.values())
        rows.append(
            (
                "rawcuda import faster than every peer",
                slowest_win,
                ", ".join(f"{k} {v:.0f} ms" for k, v in {"rawcuda": imports["rawcuda"], **peers}.items()),
            )
        )
    return rows


def markdown(data: dict[str, Any]) -> str:
    meta = data["meta"]
    lines = [
        f"# rawcuda benchmarks — {meta['date']}, {meta['gpu']}, driver CUDA {meta['driver_cuda']}",
        "",
        "Versions: " + ", ".join(f"{k} {v}" for k, v in meta["versions"].items()),
        "",
        "## Targets",
        "",
        "| target | met | numbers |",
        "|---|---|---|",
    ]
    for goal, met, numbers in data["targets"]:
        lines.append(f"| {goal} | {'—' if met is None else 'yes' if met else 'NO'} | {numbers} |")
    launch = data.get("launch_overhead", {})
    if launch:
        lines += [
            "",
            "## 1. Host time per launch (4 arguments)",
            "",
            "| variant | µs | ratio to the first row, same rounds |",
            "|---|---:|---:|",
        ]
        for name, r in launch["results"].items():
            lines.append(f"| {name} | {r['us']:.2f} | {r['ratio']:.3f}x |")
        for name, why in launch.get("notes", {}).items():
            lines.append(f"| {name} | {why} | |")
        penalties = launch.get("penalties", {})
        if penalties:
            lines += ["", "| penalty over one stream (median of per-round differences) | µs per launch |", "|---|---:|"]
            lines += [f"| {label} | {value:+.2f} |" for label, value in penalties.items()]
    kernels = data.get("kernels", {}).get("rows", [])
    if kernels:
        lines += ["", "## 2. Bandwidth and throughput", "", "| case | value | unit | note |", "|---|---:|---|---|"]
        lines += [f"| {case} | {value:.3g} | {unit} | {note} |" for case, unit, value, note in kernels]
    copies = data.get("copies", {}).get("copies")
    if copies:
        c_copies = data["c"]["copies"] if isinstance(data.get("c"), dict) else [None] * len(copies)
        lines += [
            "",
            "## 3. Host <-> device copies (GB/s; C program in parentheses)",
            "",
            "| size | pinned H->D | pinned D->H | pageable H->D | pageable D->H |",
            "|---|---:|---:|---:|---:|",
        ]
        for ours, ref in zip(copies, c_copies, strict=True):
            cells = [
                f"{ours[k]:.1f}" + (f" ({ref[k]:.1f})" if ref else "")
                for k in ("pinned_htod", "pinned_dtoh", "pageable_htod", "pageable_dtoh")
            ]
            lines.append(f"| {ours['bytes'] >> 20} MiB | " + " | ".join(cells) + " |")
    for name, title in MD_SECTIONS:
        md = data.get(f"{name}_md")
        lines += ["", f"## {title}", "", md if md else "not run"]
    imports = data.get("imports", {}).get("import_ms")
    if imports:
        lines += ["", "## 6. Import time (fresh interpreter, median)", "", "| module | ms |", "|---|---:|"]
        lines += [f"| {k} | {v:.1f} |" if isinstance(v, float) else f"| {k} | {v} |" for k, v in imports.items()]
    progressions = data.get("progressions_md")
    lines += ["", "## 8. Kernel progressions (bench/progressions.py)", "", progressions if progressions else "not run"]
    sgemm_md = data.get("sgemm_md")
    if sgemm_md:  # its own headings one level down, under this file's
        lines += [
            "",
            "## 7. SGEMM progression (also in its own file, with the plot)",
            "",
            sgemm_md.replace("\n## ", "\n### "),
        ]
    lines += ["", "Steps: " + "; ".join(f"{k}: {v}" for k, v in data["steps"].items())]
    return "\n".join(lines) + "\n"


def plot(data: dict[str, Any], path: Path) -> str:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return "no plot: matplotlib is not installed (pip install rawcuda[plot])"
    launch = data.get("launch_overhead", {}).get("results", {})
    fig, axes = plt.subplots(1, 2, figsize=(12, 4.5))
    names = [n for n in launch if "after a trace" not in n]
    axes[0].barh(names, [launch[n]["us"] for n in names], color="tab:blue")
    if "c_launch_kernel" in launch:
        axes[0].axvline(launch["c_launch_kernel"]["us"], color="tab:red", linestyle="--", label="C (same process)")
        axes[0].legend()
    axes[0].set_xlabel("µs per launch (host)")
    axes[0].set_title("Launch overhead")
    rows = [r for r in data.get("kernels", {}).get("rows", []) if r[1] == "TB/s"]
    axes[1].barh([r[0] for r in rows], [r[2] for r in rows], color="tab:green")
    axes[1].set_xlabel("TB/s")
    axes[1].set_title("Bandwidth")
    fig.suptitle(f"rawcuda on {data['meta']['gpu']} ({data['meta']['date']})")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    return f"plot: {path.name}"


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", type=Path, default=BENCH / "results")
    args = parser.parse_args()
    sys.path.insert(0, str(ROOT))
    import rawcuda

    try:
        gpu = rawcuda.Device(0).name
    except (rawcuda.DriverNotFoundError, rawcuda.StubLibraryError, rawcuda.NoDeviceError) as exc:
        # Asked before --out is made: a machine that measured nothing writes nothing.
        print(f"skipped: no usable GPU here ({type(exc).__name__}: {str(exc).splitlines()[0]})")
        return EXIT_NO_GPU
    args.out.mkdir(parents=True, exist_ok=True)
    data: dict[str, Any] = {
        "meta": {
            "date": time.strftime("%Y-%m-%d"),
            "gpu": gpu,
            "driver_cuda": "{}.{}".format(*rawcuda.driver_version()),
            "versions": versions(),
        },
        "steps": {},
    }
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        for step in STEPS:
            data["steps"][step] = run_step(step, work)
            print(f"{step}: {data['steps'][step]}", flush=True)
            data[step] = load(work, step)
            md = work / f"{step}.md"
            if step in dict(MD_SECTIONS) and md.exists():
                data[f"{step}_md"] = md.read_text().split("\n", 2)[-1].strip()
            if step == "progressions" and md.exists():  # its tables, one heading level down (targets are above)
                tables = md.read_text().split("\n## ", 1)[-1]
                data[f"{step}_md"] = ("### " + tables.replace("\n## ", "\n### ")).strip()
            if step in OWN_FILES:
                for own in sorted(work.glob(f"*-{step}.*")):
                    shutil.copyfile(own, args.out / own.name)
                    if own.suffix == ".md":
                        data[f"{step}_md"] = own.read_text().split("\n", 2)[-1].strip()
        data["c"] = run_c(work)
        data["steps"]["c"] = "ok" if isinstance(data["c"], dict) else data["c"]
    data["targets"] = targets(data)
    stem = f"{data['meta']['date']}-{gpu.replace(' ', '_')}"
    (args.out / f"{stem}.json").write_text(json.dumps(data, indent=2))
    (args.out / f"{stem}.md").write_text(markdown(data))
    print(plot(data, args.out / f"{stem}.png"))
    if data.get("progressions"):
        print(progressions_report.plot(data["progressions"], args.out / f"{stem}-progressions.png"))
    print(markdown(data))
    return EXIT_OK


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))
    from rawcuda.tools import cli

    cli.run(main)  # Ctrl-C during a five-minute run: one line and status 130, not a traceback
