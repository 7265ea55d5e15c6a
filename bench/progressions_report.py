"""The report of bench/progressions.py: which targets were met, the Markdown tables, and a plot per progression.

Separate from the measurement so that bench/run_all.py can fold a progressions result into its own report
(and draw its plot) without importing rawcuda's GPU side. Works on the JSON that bench/progressions.py writes.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any


def targets(data: dict[str, Any]) -> list[tuple[str, bool | None, str]]:
    """(target, met?, the numbers); None = could not be measured (a peer not installed)."""
    steps = data["reduction"]["steps"]
    last = steps[-1]
    rows: list[tuple[str, bool | None, str]] = []
    for peer in data["reduction"]["peers"]:
        if "gbps" in peer:
            rows.append((f"last reduction step ({last['kernel']}) >= {peer['name']}", last["gbps"] >= peer["gbps"],
                         f"{last['gbps']:.0f} vs {peer['gbps']:.0f} GB/s"))  # fmt: skip
        else:
            rows.append((f"last reduction step >= {peer['name']}", None, f"not available: {peer['unavailable']}"))
    checked = [r["verified"] for r in steps + data["transpose"]["variants"] + data["block_size"]["rows"]]
    checked += [r["verified"] for r in data["fast_math"]["rows"]]
    rows.append(("every step verified before it was timed", all(checked), f"{sum(checked)} of {len(checked)}"))
    return rows


def of(value: float, ceiling: float | None) -> str:
    return f"{value / ceiling:.1%}" if ceiling else "—"


def markdown(data: dict[str, Any]) -> str:
    meta, red, tr, bs, fm = (data[k] for k in ("meta", "reduction", "transpose", "block_size", "fast_math"))
    yes = {True: "yes", False: "NO", None: "—"}
    lines = [f"# Kernel progressions — {meta['date']}, {meta['gpu']}, driver {meta['driver']}", "",
             f"Median of {meta['reps']} runs after {meta['warmup']} warm-up runs, CUDA events; python "
             f"{meta['python']}, numpy {meta['numpy']}. Every result verified before it was timed.", "",
             "| target | met | numbers |", "|---|---|---|"]  # fmt: skip
    lines += [f"| {goal} | {yes[met]} | {numbers} |" for goal, met, numbers in data["targets"]]
    lines += ["", f"## Reduction: {red['n']:,} floats ({red['bytes'] >> 20} MiB), GB/s read", "",
              f"Device-to-device copy of the same bytes: {red['copy_gbps']:.0f} GB/s (read + write).", "",
              "| step | kernel | what changed | passes | ms | GB/s | of the copy | verified |",
              "|---:|---|---|---:|---:|---:|---:|---|"]  # fmt: skip
    for r in red["steps"]:
        lines.append(f"| {r['step']} | `{r['kernel']}` | {r['change']} | {r['passes']} | {r['ms']:.3f} | "
                     f"{r['gbps']:.0f} | {of(r['gbps'], red['copy_gbps'])} | {yes[r['verified']]} |")  # fmt: skip
    for p in red["peers"]:
        cells = f"{p['ms']:.3f} | {p['gbps']:.0f} | {of(p['gbps'], red['copy_gbps'])}" if "gbps" in p else "— | — | —"
        lines.append(f"| peer | `{p['name']}` | {p.get('unavailable', 'same memory')} | | {cells} | "
                     f"{yes[p.get('verified')]} |")  # fmt: skip
    lines += ["", f"## Transpose {tr['shape'][0]} x {tr['shape'][1]}: GB/s read + written", "",
              f"Device-to-device copy of the same bytes: {tr['copy_gbps']:.0f} GB/s.", "",
              "| variant | kernel | ms | GB/s | of the copy | verified |", "|---|---|---:|---:|---:|---|"]  # fmt: skip
    for r in tr["variants"]:
        lines.append(f"| {r['variant']} | `{r['kernel']}` | {r['ms']:.3f} | {r['gbps']:.0f} | "
                     f"{of(r['gbps'], tr['copy_gbps'])} | {yes[r['verified']]} |")  # fmt: skip
    lines += ["", f"## Block size: copy_one_per_thread over {bs['n']:,} floats, grid = ceil(n / block)", "",
              f"Occupancy = resident threads / {bs['max_threads_per_sm']} per SM, from the blocks per SM that "
              f"cuOccupancyMaxActiveBlocksPerMultiprocessor reports. Copy: {bs['copy_gbps']:.0f} GB/s.", "",
              "| block | grid | blocks/SM | threads/SM | occupancy | ms | GB/s | of the copy | verified |",
              "|---:|---:|---:|---:|---:|---:|---:|---:|---|"]  # fmt: skip
    for r in bs["rows"]:
        lines.append(f"| {r['block']} | {r['grid']:,} | {r['blocks_per_sm']} | {r['threads_per_sm']} | "
                     f"{r['occupancy']:.0%} | {r['ms']:.3f} | {r['gbps']:.0f} | {of(r['gbps'], bs['copy_gbps'])} | "
                     f"{yes[r['verified']]} |")  # fmt: skip
    lines += ["", "## --use_fast_math: the same kernels, built both ways", "",
              f"Errors against numpy in float64 over the first {fm['error_elements']:,} elements of each output.",
              "", "| kernel | build | n | ms | rate | of the copy | max abs error | max rel error | finite |",
              "|---|---|---:|---:|---:|---:|---:|---:|---|"]  # fmt: skip
    for r in fm["rows"]:
        lines.append(f"| `{r['kernel']}` | {r['build']} | {r['n']:,} | {r['ms']:.3f} | {r['rate']:.1f} {r['unit']} | "
                     f"{of(r['rate'], r['copy_gbps'])} | {r['max_abs_error']:.2e} | {r['max_rel_error']:.2e} | "
                     f"{yes[r['verified']]} |")  # fmt: skip
    lines += ["", "sinf's error as |x| grows (`sin_map`, no timing):", "",
              "| inputs | build | max abs error | max rel error |", "|---|---|---:|---:|"]  # fmt: skip
    for r in fm["sin_accuracy"]:
        lines.append(f"| [-{r['range']:.4g}, {r['range']:.4g}] | {r['build']} | {r['max_abs_error']:.2e} | "
                     f"{r['max_rel_error']:.2e} |")  # fmt: skip
    return "\n".join(lines) + "\n"


def plot(data: dict[str, Any], path: Path) -> str:
    """A bar chart per progression: each step's speed a bar, its ceiling and peers lines."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return "no plot: matplotlib is not installed (pip install rawcuda[plot])"
    red, tr, bs, fm = (data[k] for k in ("reduction", "transpose", "block_size", "fast_math"))
    fig, ((a, b), (c, d)) = plt.subplots(2, 2, figsize=(13, 8.5))
    a.bar([str(r["step"]) for r in red["steps"]], [r["gbps"] for r in red["steps"]], color="tab:blue")
    a.axhline(red["copy_gbps"], color="tab:red", linestyle="--", label="device-to-device copy (read + write)")
    for peer, colour in zip(red["peers"], ("tab:green", "tab:orange"), strict=True):
        if "gbps" in peer:
            a.axhline(peer["gbps"], color=colour, linestyle=":", label=peer["name"])
    a.set(title=f"Reduction of {red['bytes'] >> 20} MiB, step by step", xlabel="step", ylabel="GB/s read")
    b.bar([r["variant"] for r in tr["variants"]], [r["gbps"] for r in tr["variants"]], color="tab:blue")
    b.axhline(tr["copy_gbps"], color="tab:red", linestyle="--", label="device-to-device copy")
    b.set(title=f"Transpose {tr['shape'][0]}²", ylabel="GB/s read + written")
    c.bar([str(r["block"]) for r in bs["rows"]], [r["gbps"] for r in bs["rows"]], color="tab:blue")
    for i, r in enumerate(bs["rows"]):
        c.annotate(f"{r['occupancy']:.0%}", (i, r["gbps"]), ha="center", va="bottom", fontsize=8)
    c.axhline(bs["copy_gbps"], color="tab:red", linestyle="--", label="device-to-device copy")
    c.set(title="Block size (bar labels: occupancy the driver reports)", xlabel="threads per block", ylabel="GB/s")
    kernels = list(dict.fromkeys(r["kernel"] for r in fm["rows"]))
    speed = {(r["kernel"], r["build"]): r["rate"] for r in fm["rows"]}
    for offset, build, colour in ((-0.2, "precise", "tab:gray"), (0.2, "fast", "tab:blue")):
        d.bar([i + offset for i in range(len(kernels))], [speed[k, build] / speed[k, "precise"] for k in kernels],
              width=0.4, color=colour, label=build)  # fmt: skip
    d.axhline(1.0, color="tab:red", linestyle="--", label="the precise build")
    d.set_xticks(range(len(kernels)), kernels)
    d.set(title="--use_fast_math: speed relative to the precise build", ylabel="x precise")
    for axes in (a, b, c, d):
        axes.legend(fontsize=8)
    fig.suptitle(f"rawcuda kernel progressions on {data['meta']['gpu']} ({data['meta']['date']})")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return f"plot: {path.name}"
