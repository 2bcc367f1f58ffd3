#!/usr/bin/env python3
"""Plots of a `lithos bench` results file (schema `lithos.bench/1`,
docs/bench-protocol.md section 2.2).

usage: plots.py RESULTS_JSON [--out DIR]     (DIR defaults to the JSON's folder)

Writes, as PNG files in DIR:

  cdf-<tenant>.png  per high-priority ("hp") tenant: latency CDF of the first
                    phase, one line per mode (alone black and dashed);
  p99-norm.png      P99 over alone P99 of every hp tenant, bars grouped by
                    mode (first phase), min-max error bars, log scale;
  throughput.png    throughput over alone throughput of every tenant, bars
                    grouped by mode (first phase);
  hol-p99.png       only for a scenario of several phases with numeric `x`:
                    normalised P99 against the phase's x, one line per mode
                    with a min-max band, one panel per hp tenant;
  energy.png        energy per request or step of every tenant, bars grouped
                    by mode (first phase); skipped when no value is known.

Then prints one JSON object on stdout:

  {"written": [path, ...], "skipped": [{"plot": ..., "why": ...}, ...]}

A "skipped" entry names a plot file, or "*" when a whole mode (or one tenant
of a mode) is left out of every plot; those entries also carry "mode".

Exit status: 0 when the file was read (even if every plot was skipped),
2 when it cannot be read or is not `lithos.bench/1` (one line on stderr),
3 when matplotlib is not installed (the harness then goes on without plots).

Every number the harness writes as a spread S ({"median", "min", "max", "n"})
may be null; modes whose status is not "ok", and modes without phases or
tenants, are skipped rather than fatal.
"""
import argparse
import json
import math
import os
import re
import sys
import traceback

SCHEMA = "lithos.bench/1"
PROG = "plots.py"

# Modes in the order the harness writes them; every plot uses this order and
# these colours, so a mode looks the same everywhere. Unknown modes follow, in
# order of appearance, with colours from EXTRA_COLOURS.
MODE_ORDER = ["alone", "time-slicing", "mps", "mps-priority", "mps-threads",
              "static-partition", "lithos-fixed"]
MODE_COLOURS = {
    "alone": "#000000",
    "time-slicing": "#d62728",      # red
    "mps": "#1f77b4",               # blue
    "mps-priority": "#17becf",      # cyan
    "mps-threads": "#9467bd",       # purple
    "static-partition": "#2ca02c",  # green
    "lithos-fixed": "#ff7f0e",      # orange
}
EXTRA_COLOURS = ["#8c564b", "#e377c2", "#bcbd22", "#7f7f7f", "#aec7e8", "#ffbb78",
                 "#98df8a", "#ff9896", "#c5b0d5", "#c49c94"]
# Bars of different tenants within one mode's group differ by hatching.
HATCHES = ["", "//", "..", "xx", "\\\\", "++", "oo", "--"]

FIGSIZE = (8.0, 4.5)  # inches
DPI = 120


class InputError(Exception):
    """The results file cannot be used at all (exit status 2)."""


# --------------------------------------------------------------------------
# Reading the results file
# --------------------------------------------------------------------------

def load_results(path):
    """Reads and checks the top level of a results file; raises InputError."""
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
    except FileNotFoundError:
        raise InputError(f"{path}: no such file") from None
    except OSError as e:
        raise InputError(f"{path}: cannot read: {e.strerror or e}") from None
    try:
        doc = json.loads(text)
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise InputError(f"{path}: not JSON: {e}") from None
    if not isinstance(doc, dict):
        raise InputError(f"{path}: not a {SCHEMA} results file (top level is not an object)")
    if doc.get("schema") != SCHEMA:
        raise InputError(f"{path}: schema is {json.dumps(doc.get('schema'))}, expected \"{SCHEMA}\"")
    scenario = doc.get("scenario")
    if not isinstance(scenario, dict) or not isinstance(scenario.get("tenants"), list):
        raise InputError(f"{path}: malformed {SCHEMA}: \"scenario.tenants\" is missing or not a list")
    if not isinstance(doc.get("modes"), list):
        raise InputError(f"{path}: malformed {SCHEMA}: \"modes\" is missing or not a list")
    return doc


def number(v):
    """v as a finite float, or None (null, missing, NaN, not a number)."""
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        return None
    v = float(v)
    return v if math.isfinite(v) else None


def spread(s):
    """An S value as (median, min, max); None when the median is unknown.
    A missing min or max falls back to the median (no error bar that side)."""
    if not isinstance(s, dict):
        return None
    med = number(s.get("median"))
    if med is None:
        return None
    lo, hi = number(s.get("min")), number(s.get("max"))
    lo = med if lo is None else min(lo, med)
    hi = med if hi is None else max(hi, med)
    return med, lo, hi


def safe_filename(name):
    """A tenant name made safe to use in a file name."""
    return re.sub(r"[^A-Za-z0-9._-]", "_", str(name)) or "_"


class Results:
    """The parts of a results file the plots use, with unusable modes,
    phases and tenants set aside (and recorded in `skipped`)."""

    def __init__(self, doc):
        sc = doc["scenario"]
        self.name = str(sc.get("name") or "scenario")
        # Tenants in scenario order: dicts with name, role, kind, workload.
        self.tenants = [t for t in sc["tenants"] if isinstance(t, dict) and t.get("name") is not None]
        self.hp = [t for t in self.tenants if t.get("role") == "hp"]
        phases = sc.get("phases")
        if not isinstance(phases, list) or not phases:
            phases = [{"name": None, "x": None}]
        self.phases = [p if isinstance(p, dict) else {"name": None, "x": None} for p in phases]
        self.phase_axis = sc.get("phase_axis")
        self.skipped = []

        # Usable modes: (mode name, label, list per scenario phase of
        # {tenant name: tenant record} or None when the phase is absent).
        self.modes = []
        for m in doc["modes"]:
            if not isinstance(m, dict):
                self.skipped.append({"plot": "*", "mode": None, "why": "mode entry is not an object"})
                continue
            name = str(m.get("mode") or "?")
            why = self._unusable(m)
            if why:
                self.skipped.append({"plot": "*", "mode": name, "why": why})
                continue
            per_phase = self._match_phases(name, m["phases"])
            if not any(per_phase):
                self.skipped.append({"plot": "*", "mode": name, "why": "no phase with tenants"})
                continue
            label = m.get("label") if isinstance(m.get("label"), str) and m.get("label") else name
            self.modes.append((name, label, per_phase))
        # The harness already writes modes in MODE_ORDER; sort anyway (stable:
        # unknown modes keep their order, after the known ones).
        self.modes.sort(key=lambda m: MODE_ORDER.index(m[0]) if m[0] in MODE_ORDER else len(MODE_ORDER))
        self.colours = mode_colours([m[0] for m in self.modes])

    @staticmethod
    def _unusable(m):
        """Why a mode cannot be plotted at all, or None."""
        status = m.get("status")
        if status != "ok":
            why = f"status {json.dumps(status)}"
            if m.get("error"):
                why += f": {m['error']}"
            return why
        if not isinstance(m.get("phases"), list) or not m["phases"]:
            return "no phases"
        return None

    def _match_phases(self, mode, phases):
        """The mode's phases matched to the scenario's: by name, else by
        position. Missing phases and tenants are recorded in `skipped`."""
        by_name = {p.get("name"): p for p in phases if isinstance(p, dict)}
        out = []
        for i, sp in enumerate(self.phases):
            p = by_name.get(sp.get("name"))
            if p is None and i < len(phases) and isinstance(phases[i], dict) \
                    and (sp.get("name") is None or phases[i].get("name") is None):
                p = phases[i]
            pname = sp.get("name") if sp.get("name") is not None else f"#{i}"
            if p is None:
                self.skipped.append({"plot": "*", "mode": mode, "why": f"phase {pname!r} absent"})
                out.append(None)
                continue
            recs = {}
            for t in p.get("tenants") or []:
                if isinstance(t, dict) and t.get("name") is not None:
                    recs[t["name"]] = t
            for t in self.tenants:
                if t["name"] not in recs:
                    self.skipped.append({"plot": "*", "mode": mode,
                                         "why": f"phase {pname!r}: tenant {t['name']!r} absent"})
            out.append(recs or None)
        return out

    def rec(self, mode, phase, tenant):
        """The tenant record of `tenant` in phase index `phase` of a usable mode, or None."""
        recs = mode[2][phase] if phase < len(mode[2]) else None
        return recs.get(tenant) if recs else None

    def others(self):
        """Usable modes other than alone."""
        return [m for m in self.modes if m[0] != "alone"]

    def phase_note(self):
        """' (phase main)' for a multi-phase scenario, where the bar plots
        show only the first phase; '' otherwise."""
        if len(self.phases) > 1:
            return f" (phase {self.phases[0].get('name') or '#0'})"
        return ""


def mode_colours(modes):
    """A colour for every mode name: fixed for known modes, then the extra
    palette in order of appearance."""
    colours = dict(MODE_COLOURS)
    extra = 0
    for m in modes:
        if m not in colours:
            colours[m] = EXTRA_COLOURS[extra % len(EXTRA_COLOURS)]
            extra += 1
    return colours


def tenant_title(t):
    """'svc (bert-large)' for a scenario tenant."""
    return f"{t['name']} ({t['workload']})" if t.get("workload") else str(t["name"])


def plain_log_ticks(axis, lo, hi):
    """Tick labels of a log axis as plain numbers ('20', '0.5') rather than
    powers of ten; minor ticks are labelled too when the data span less than
    a decade (otherwise a short axis would carry one label or none)."""
    from matplotlib.ticker import FuncFormatter, NullFormatter
    fmt = FuncFormatter(lambda v, _pos: f"{v:g}")
    axis.set_major_formatter(fmt)
    axis.set_minor_formatter(fmt if hi < 10 * lo else NullFormatter())


def times_label(v):
    """A normalised value as a bar label: '58x', '3.4x', '0.82x'."""
    if v >= 10:
        return f"{v:.0f}x"
    return f"{v:.2g}x"


# --------------------------------------------------------------------------
# Plots; each returns None when written or the reason it was skipped
# --------------------------------------------------------------------------

def plot_cdf(plt, res, tenant, path):
    """Latency CDF of one hp tenant in the first phase, one line per mode."""
    fig, ax = plt.subplots(figsize=FIGSIZE)
    lines = 0
    lo_x, hi_x = math.inf, 0.0  # the span of the drawn latencies
    for mode in res.modes:
        rec = res.rec(mode, 0, tenant["name"])
        cdf = rec.get("cdf_ms") if rec else None
        xs = [number(v) for v in cdf] if isinstance(cdf, list) else []
        xs = sorted(v for v in xs if v is not None and v > 0)  # log axis: positive only
        if len(xs) < 2:
            continue
        # The quantiles are taken to sit at the middles of n equal slices.
        ys = [(i + 0.5) / len(xs) for i in range(len(xs))]
        alone = mode[0] == "alone"
        ax.plot(xs, ys, label=mode[1], color=res.colours[mode[0]],
                linestyle="--" if alone else "-", linewidth=1.6 if alone else 1.4,
                zorder=3 if alone else 2)
        lines += 1
        lo_x, hi_x = min(lo_x, xs[0]), max(hi_x, xs[-1])
    if not lines:
        plt.close(fig)
        return f"no latency CDF (cdf_ms) for tenant {tenant['name']!r} in any mode"
    ax.set_xscale("log")
    plain_log_ticks(ax.xaxis, lo_x, hi_x)
    ax.set_ylim(0, 1.0)
    ax.set_xlabel("latency (ms)")
    ax.set_ylabel("fraction of requests")
    ax.set_title(f"{res.name}: {tenant_title(tenant)}{res.phase_note()}")
    ax.grid(True, which="major", alpha=0.35)
    ax.grid(True, which="minor", axis="x", alpha=0.12)
    ax.legend(loc="lower right", fontsize=9)
    save(plt, fig, path)
    return None


def grouped_bars(plt, res, modes, tenants, value, path, *, title, ylabel, log, ref_line, fmt):
    """Bars grouped by mode (x), one per tenant within a group (hatched per
    tenant, coloured by mode), heights = S medians with min-max error bars.

    value(rec) -> S or None; ref_line: y of a dashed 'alone' line or None;
    fmt(v) -> bar label. Returns None, or why nothing could be drawn."""
    groups = []  # (mode, [(tenant index, median, lo, hi) or (tenant index, None)])
    for mode in modes:
        bars = []
        for j, t in enumerate(tenants):
            rec = res.rec(mode, 0, t["name"])
            s = spread(value(rec)) if rec else None
            if s is not None and log and s[0] <= 0:
                s = None  # cannot be drawn on a log axis
            bars.append((j, s))
        groups.append((mode, bars))
    known = [s for _, bars in groups for _, s in bars if s is not None]
    if not known:
        return "no value to plot"

    fig, ax = plt.subplots(figsize=FIGSIZE)
    n = len(tenants)
    width = 0.8 / n
    for g, (mode, bars) in enumerate(groups):
        colour = res.colours[mode[0]]
        for j, s in bars:
            x = g - 0.4 + width * (j + 0.5)
            if s is None:
                # Unknown value: a marker at the baseline instead of a bar.
                ax.annotate("n/a", (x, 0), xycoords=("data", "axes fraction"), xytext=(0, 3),
                            textcoords="offset points", ha="center", va="bottom", fontsize=8,
                            color="0.4")
                continue
            med, lo, hi = s
            ax.bar(x, med, width * 0.92, color=colour, alpha=0.85, hatch=HATCHES[j % len(HATCHES)],
                   edgecolor="white" if HATCHES[j % len(HATCHES)] else colour, linewidth=0.5, zorder=2)
            ax.errorbar(x, med, yerr=[[med - lo], [hi - med]], fmt="none", ecolor="0.15",
                        elinewidth=1.0, capsize=3, zorder=3)
            ax.annotate(fmt(med), (x, hi), xytext=(0, 2), textcoords="offset points",
                        ha="center", va="bottom", fontsize=8)

    ax.set_xticks(range(len(groups)))
    ax.set_xticklabels([m[1] for m, _ in groups], rotation=20 if len(groups) > 4 else 0,
                       ha="right" if len(groups) > 4 else "center")
    ax.set_xlim(-0.6, len(groups) - 0.4)
    top = max(s[2] for s in known)
    if log:
        ax.set_yscale("log")
        bottom = min([s[1] for s in known] + ([ref_line] if ref_line else []))
        ax.set_ylim(bottom / 1.6, max(top, ref_line or top) * 2.2)
        plain_log_ticks(ax.yaxis, *ax.get_ylim())
    else:
        ax.set_ylim(0, max(top, ref_line or 0) * 1.18)
    handles = []
    if ref_line is not None:
        handles.append(ax.axhline(ref_line, color="black", linestyle="--", linewidth=1.0,
                                  label="alone", zorder=1))
    if n > 1:
        from matplotlib.patches import Patch
        for j, t in enumerate(tenants):
            handles.append(Patch(facecolor="0.6", edgecolor="white", hatch=HATCHES[j % len(HATCHES)],
                                 label=tenant_title(t)))
    if handles:
        # Outside the axes, on the right: inside it would cover bar labels.
        ax.legend(handles=handles, fontsize=9, loc="upper left", bbox_to_anchor=(1.01, 1.0),
                  borderaxespad=0.0)
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    ax.grid(True, axis="y", alpha=0.3, zorder=0)
    save(plt, fig, path)
    return None


def plot_p99_norm(plt, res, path):
    if not res.hp:
        return "the scenario has no hp tenant"
    if not res.others():
        return "no usable mode other than alone"
    why = grouped_bars(
        plt, res, res.others(), res.hp, lambda r: (r.get("norm") or {}).get("p99"), path,
        title=f"{res.name}: P99 latency over alone{res.phase_note()}",
        ylabel="P99 / alone P99 (log)", log=True, ref_line=1.0, fmt=times_label)
    return why and "no normalised P99 in any mode (no alone run?)"


def plot_throughput(plt, res, path):
    if not res.tenants:
        return "the scenario has no tenants"
    if not res.others():
        return "no usable mode other than alone"
    why = grouped_bars(
        plt, res, res.others(), res.tenants, lambda r: (r.get("norm") or {}).get("throughput"), path,
        title=f"{res.name}: throughput over alone{res.phase_note()}",
        ylabel="throughput / alone throughput", log=False, ref_line=1.0, fmt=lambda v: f"{v:.2f}")
    return why and "no normalised throughput in any mode (no alone run?)"


def plot_energy(plt, res, path):
    if not res.tenants or not res.modes:
        return "no usable mode"
    # Requests and training steps differ by orders of magnitude: log scale
    # when the values span more than 30x.
    vals = []
    for mode in res.modes:
        for t in res.tenants:
            rec = res.rec(mode, 0, t["name"])
            s = spread(rec.get("energy_per_unit_j")) if rec else None
            if s is not None and s[0] > 0:
                vals.append(s[0])
    if not vals:
        return "energy_per_unit_j is null everywhere (no energy counter?)"
    log = max(vals) / min(vals) > 30
    return grouped_bars(
        plt, res, res.modes, res.tenants, lambda r: r.get("energy_per_unit_j"), path,
        title=f"{res.name}: energy per request or step{res.phase_note()}",
        ylabel="J per request / step" + (" (log)" if log else ""), log=log, ref_line=None,
        fmt=lambda v: f"{v:.3g}")


def hol_applicable(res):
    """None when hol-p99.png applies, else why not."""
    if len(res.phases) < 2:
        return "one-phase scenario"
    xs = [number(p.get("x")) for p in res.phases]
    if any(x is None for x in xs):
        return "the phases have no numeric x"
    if any(x <= 0 for x in xs):
        return "a phase x is not positive (log axis)"
    if not res.hp:
        return "the scenario has no hp tenant"
    return None


def plot_hol(plt, res, path):
    """Normalised P99 against the phase x, one panel per hp tenant."""
    why = hol_applicable(res)
    if why:
        return why
    from matplotlib.ticker import NullFormatter
    xs = [number(p["x"]) for p in res.phases]
    n = len(res.hp)
    width = FIGSIZE[0] if n <= 2 else 4.0 * n
    fig, axes = plt.subplots(1, n, figsize=(width, FIGSIZE[1]), squeeze=False)
    drawn = 0
    for ax, tenant in zip(axes[0], res.hp):
        ax.axhline(1.0, color="black", linestyle="--", linewidth=1.2, label="alone", zorder=1)
        lo_all, hi_all = [1.0], [1.0]
        for mode in res.others():
            pts = []
            for i, x in enumerate(xs):
                rec = res.rec(mode, i, tenant["name"])
                s = spread((rec.get("norm") or {}).get("p99")) if rec else None
                if s is not None and s[1] > 0:
                    pts.append((x, *s))
            if not pts:
                continue
            pts.sort()
            px, med, lo, hi = (list(c) for c in zip(*pts))
            colour = res.colours[mode[0]]
            ax.plot(px, med, marker="o", markersize=4, color=colour, label=mode[1], zorder=3)
            ax.fill_between(px, lo, hi, color=colour, alpha=0.15, linewidth=0, zorder=2)
            lo_all += lo
            hi_all += hi
            drawn += 1
        ax.set_xscale("log")
        ax.set_xticks(xs)
        ax.set_xticklabels([f"{x:g}" for x in xs])
        ax.xaxis.set_minor_formatter(NullFormatter())
        ax.set_yscale("log")
        ax.set_ylim(min(lo_all) / 1.5, max(hi_all) * 1.5)
        plain_log_ticks(ax.yaxis, *ax.get_ylim())
        ax.set_xlabel(str(res.phase_axis) if res.phase_axis else "phase x")
        ax.set_ylabel("P99 / alone P99 (log)")
        ax.set_title(tenant_title(tenant), fontsize=10)
        ax.grid(True, which="major", alpha=0.35)
        ax.legend(fontsize=8, loc="upper left")
    if not drawn:
        plt.close(fig)
        return "no normalised P99 in any mode and phase (no alone run?)"
    fig.suptitle(f"{res.name}: head-of-line blocking", fontsize=11)
    save(plt, fig, path)
    return None


def save(plt, fig, path):
    fig.tight_layout()
    fig.savefig(path, dpi=DPI)
    plt.close(fig)


# --------------------------------------------------------------------------

def import_pyplot():
    """matplotlib.pyplot on the Agg backend; exit 3 when it is missing."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError as e:
        print(f"{PROG}: matplotlib is not installed ({e}); install python3-matplotlib "
              "(apt) or matplotlib (pip) to get plots", file=sys.stderr)
        sys.exit(3)
    return plt


def main(argv=None):
    ap = argparse.ArgumentParser(prog=PROG, description="Plots of a lithos.bench/1 results file.")
    ap.add_argument("results", metavar="RESULTS_JSON")
    ap.add_argument("--out", metavar="DIR", help="where the PNGs go (default: the JSON's folder)")
    args = ap.parse_args(argv)

    try:
        doc = load_results(args.results)
    except InputError as e:
        print(f"{PROG}: {e}", file=sys.stderr)
        return 2
    out = args.out or os.path.dirname(args.results) or "."
    try:
        os.makedirs(out, exist_ok=True)
    except OSError as e:
        print(f"{PROG}: cannot create {out}: {e.strerror or e}", file=sys.stderr)
        return 2
    plt = import_pyplot()

    res = Results(doc)
    written, skipped = [], list(res.skipped)
    jobs = []
    if not res.hp:
        skipped.append({"plot": "cdf-*.png", "why": "the scenario has no hp tenant"})
    for t in res.hp:
        jobs.append((f"cdf-{safe_filename(t['name'])}.png",
                     lambda p, t=t: plot_cdf(plt, res, t, p)))
    jobs += [
        ("p99-norm.png", lambda p: plot_p99_norm(plt, res, p)),
        ("throughput.png", lambda p: plot_throughput(plt, res, p)),
        ("hol-p99.png", lambda p: plot_hol(plt, res, p)),
        ("energy.png", lambda p: plot_energy(plt, res, p)),
    ]
    for name, job in jobs:
        path = os.path.join(out, name)
        if not res.modes:
            skipped.append({"plot": name, "why": "no usable mode (all failed or empty)"})
            continue
        try:
            why = job(path)
        except Exception as e:  # noqa: BLE001 - one bad plot must not lose the others
            traceback.print_exc(file=sys.stderr)
            plt.close("all")
            why = f"error: {type(e).__name__}: {e}"
        if why:
            skipped.append({"plot": name, "why": why})
        else:
            written.append(path)
    print(json.dumps({"written": written, "skipped": skipped}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
