"""The results of bench_peers.py as a section of benchmarks/RESULTS.md and one PNG chart per case.

The section sits between two markers in RESULTS.md and is rewritten whole by each run; the rest of
the file (the other benchmarks' sections, written by hand) is left as it is.
"""

from __future__ import annotations

import datetime
import os
import platform
from typing import Any

HERE = os.path.dirname(os.path.abspath(__file__))
RESULTS = os.path.join(HERE, "RESULTS.md")
CHARTS = os.path.join(HERE, "charts")
BEGIN = "<!-- bench_peers: written by benchmarks/bench_peers.py; edits here are overwritten -->"
END = "<!-- /bench_peers -->"
OURS = "#d9480f"
PEER = "#868e96"
BASE = "#ced4da"


def human(value: float, unit: str) -> str:
    if unit == "s":
        return f"{value * 1000:,.1f} ms"
    if unit == "bytes":
        return f"{value / 2**20:,.1f} MiB"
    if unit == "%":
        return f"{value:.0f}%"
    if unit == "bytes/record":
        return f"{value:,.0f} B"
    return f"{value:,.0f}/s"


def figure(row: dict[str, Any]) -> str:
    if "median" not in row:
        return "-"
    unit = row["unit"]
    mid = human(row["median"], unit)
    if row["runs"] > 1 and row["min"] != row["max"]:
        return f"{mid} ({human(row['min'], unit)} .. {human(row['max'], unit)})"
    return mid


def _sizes(entry: dict[str, Any]) -> list[int]:
    return sorted({r["size"] for r in entry["rows"]})


def _systems(entry: dict[str, Any]) -> list[str]:
    return list(dict.fromkeys(r["system"] for r in entry["rows"]))


def _row(entry: dict[str, Any], system: str, size: int) -> dict[str, Any] | None:
    return next((r for r in entry["rows"] if r["system"] == system and r["size"] == size), None)


def standing(entry: dict[str, Any], systems: dict[str, Any], higher: bool, unsafe: set[str]) -> list[str]:
    """For each size: logspool's rank among the peers that kept every record (in this case, and
    when their process died: not ``unsafe``) and its ratio to the best of them and to the raw
    loop."""
    out = []
    for size in _sizes(entry):
        ours = _row(entry, "Logspool", size)
        if ours is None or "median" not in ours:
            continue
        peers = [
            r
            for r in entry["rows"]
            if r["size"] == size
            and r["system"] != "Logspool"
            and not systems[r["system"]].baseline
            and r["system"] not in unsafe
            and "median" in r
            and not r["note"]
        ]
        better = [
            r for r in peers if (r["median"] > ours["median"]) == higher and r["median"] != ours["median"]
        ]
        text = f"{size} B: logspool is #{len(better) + 1} of {len(peers) + 1}"
        if peers:
            best = max(peers, key=lambda r: r["median"] if higher else -r["median"])
            ratio = ours["median"] / best["median"] if higher else best["median"] / ours["median"]
            text += f", {ratio:.2f}x the best other ({systems[best['system']].name})"
        raw = _row(entry, "RawWrite", size)
        if raw is not None and "median" in raw:
            text += f"; {ours['median'] / raw['median']:.2f}x the raw loop"
        out.append(text)
    return out


CASE_NOTES = {
    "append": "One process puts N records one call at a time, then closes. Nothing is fsynced per record.",
    "append_durable": "One process puts N records; each call returns after the record is on disk (fsync).",
    "process_death": "A process puts N records in the fast setting and exits with os._exit (as kill -9 "
    "would: no close, no flush of user-space buffers); a reopen counts what it gets back.",
    "consume": "N records are there; one process takes and acknowledges them one at a time.",
    "consume_durable": "The same, each acknowledgement fsynced before the next take.",
    "mpmc": "4 processes put N records in all while 1 process consumes them, all at once; the rate "
    "is records consumed per second from the start to the last one. Lost and doubled records are "
    "counted by the consumer.",
    "writers_durable": "8 processes put N records in all, each durable; read back afterwards.",
    "open": "A queue of N records is built; a fresh process then opens it and takes the first "
    "record. Memory is the growth of the process's peak RSS over that open; disk is the bytes "
    "allocated per record.",
    "memory": "",
    "disk": "",
}


def write_report(results: dict[str, Any], systems: dict[str, Any]) -> None:
    os.makedirs(CHARTS, exist_ok=True)
    when = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d")
    lines = [
        BEGIN,
        "## logspool against the persistent queues users pick instead (issue 6)",
        "",
        f"Command: `scripts/bench{' --quick' if results['quick'] else ''}` ({when}; "
        f"{results['seconds'] / 60:.1f} minutes; Python {results['python']}, {results['cpus']} CPUs, "
        f"{platform.machine()}). Each figure is the median of {results['runs']} runs, with the "
        "min .. max beside it. Records carry their producer and sequence number; every case that "
        "reads checks that each came back exactly once and in its producer's order, and a row "
        "says what was lost, doubled or out of order. Charts: `benchmarks/charts/peers-*.png`.",
        "",
        "### The systems and their settings",
        "",
        "| system | fast: survives the process | durable: survives power loss | several processes |",
        "|---|---|---|---|",
    ]
    for cls in systems.values():
        fast = cls.settings.get("fast") or "not offered"
        durable = cls.settings.get("durable") or "not offered"
        multi = "baseline" if cls.baseline else ("yes" if cls.process_safe else "no (not process-safe)")
        lines.append(f"| {cls.name} | {fast} | {durable} | {multi} |")
    lines.append("")
    cases = results["cases"]
    unsafe = {r["system"] for r in cases.get("process_death", {}).get("rows", []) if r["note"]}
    if unsafe:
        names = ", ".join(systems[u].name for u in sorted(unsafe))
        lines += [
            f"Standings below rank logspool among the systems that kept every record, in the case "
            f"and when their process died; {names} lost records when its process died and is "
            "shown but not ranked.",
            "",
        ]
    for key, entry in cases.items():
        if key in ("memory", "disk"):
            continue
        higher = key != "open"
        title = "open a large queue and read its first record" if key == "open" else entry["title"]
        lines += [f"### {title} (N = {entry['n']:,})", "", CASE_NOTES.get(key, ""), ""]
        sizes = _sizes(entry)
        extra_cols = []
        if key == "open":
            extra_cols = [k for k in ("memory", "disk") if k in cases]
        head = "| system | " + " | ".join(f"{s} B" for s in sizes)
        for k in extra_cols:
            head += " | " + " | ".join(f"{k}, {s} B" for s in sizes)
        lines += [head + " | notes |", "|---|" + "---:|" * (len(sizes) * (1 + len(extra_cols))) + "---|"]
        for system in _systems(entry):
            cls = systems[system]
            name = f"**{cls.name}**" if cls.ours else (f"*{cls.name}*" if cls.baseline else cls.name)
            cells = []
            notes = []
            for s in sizes:
                row = _row(entry, system, s) or {}
                cells.append(figure(row) if row else "-")
                if row.get("note"):
                    notes.append(f"{s} B: {row['note']}")
            for k in extra_cols:
                for s in sizes:
                    row = _row(cases[k], system, s) or {}
                    cells.append(figure(row) if row else "-")
            lines.append(f"| {name} | " + " | ".join(cells) + f" | {'; '.join(notes)} |")
        lines.append("")
        stand = standing(entry, systems, higher, unsafe)
        if stand:
            lines += ["Standing: " + ". ".join(stand) + ".", ""]
        chart = chart_case(key, title, entry, systems, higher)
        if chart:
            lines += [f"![{title}](charts/{chart})", ""]
    lines.append(END)
    section = "\n".join(lines) + "\n"
    try:
        with open(RESULTS) as f:
            text = f.read()
    except FileNotFoundError:
        text = "# Benchmark results\n\n"
    if BEGIN in text and END in text:
        before, rest = text.split(BEGIN, 1)
        after = rest.split(END, 1)[1].lstrip("\n")
        text = before + section + ("\n" + after if after else "")
    else:
        text = text.rstrip("\n") + "\n\n" + section
    with open(RESULTS, "w") as f:
        f.write(text)
    print(f"wrote {RESULTS} and charts in {CHARTS}")


def chart_case(
    key: str, title: str, entry: dict[str, Any], systems: dict[str, Any], higher: bool
) -> str | None:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("matplotlib is not installed (the bench extra): no charts")
        return None
    sizes = _sizes(entry)
    names = _systems(entry)
    fig, axes = plt.subplots(1, len(sizes), figsize=(6 * len(sizes), 0.45 * len(names) + 1.6), squeeze=False)
    for ax, size in zip(axes[0], sizes, strict=True):
        labels, values, lo, hi, colours = [], [], [], [], []
        for system in reversed(names):
            cls = systems[system]
            row = _row(entry, system, size) or {}
            label = cls.name
            if row.get("note"):
                label += f"  [{row['note'][:40]}]"
            labels.append(label)
            mid = row.get("median", 0.0)
            values.append(mid)
            lo.append(mid - row.get("min", mid))
            hi.append(row.get("max", mid) - mid)
            colours.append(OURS if cls.ours else (BASE if cls.baseline else PEER))
        unit = entry["rows"][0]["unit"]
        scale = 1000.0 if unit == "s" else 1.0
        ax.barh(
            labels,
            [v * scale for v in values],
            xerr=[[x * scale for x in lo], [x * scale for x in hi]],
            color=colours,
            capsize=3,
        )
        ax.set_title(f"{size} B records")
        ax.set_xlabel(
            {"s": "milliseconds (lower is better)"}.get(unit, "records per second (higher is better)")
        )
        ax.tick_params(axis="y", labelsize=8)
        ax.grid(axis="x", alpha=0.3)
    fig.suptitle(title)
    fig.tight_layout()
    name = f"peers-{key}.png"
    fig.savefig(os.path.join(CHARTS, name), dpi=90)
    plt.close(fig)
    return name
