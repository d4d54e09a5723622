#!/usr/bin/env python3
"""The plot of benches/growth.sh: latency against journal size, from benches/growth.rs's TSV.

    benches/growth_plot.py target/growth/results.tsv benches/growth.svg

Standard library only: the SVG is written by hand. For each backend, the latest run of each size
(the TSV is appended to). Left: latency in µs (log scale). Right: each call's latency ÷ its
baseline measured in the same rounds (new call ÷ raw commit, replay ÷ raw select): steadier than
the absolute figures on a disk whose fsync latency changes by 10x from one minute to the next.
"""
import math
import sys

rows = {}
gc = {}
for line in open(sys.argv[1]):
    f = line.rstrip("\n").split("\t")
    if f[0].endswith("-gc"):
        gc[f[0][:-3]] = f
        continue
    backend, records = f[0], int(f[1])
    # Later lines (newer runs) replace earlier ones.
    # raw commit, raw select, new call, replay (s), new call ÷ raw commit, replay ÷ raw select.
    rows.setdefault(backend, {})[records] = [float(x) for x in f[2:8]]

series = ["raw commit", "raw select", "new call", "replay"]
colors = {"raw commit": "#999999", "raw select": "#bbbbbb", "new call": "#d62728", "replay": "#1f77b4",
          "new call ÷ raw commit": "#d62728", "replay ÷ raw select": "#1f77b4"}
dashes = {0: "", 1: "6,4"}
W, H, M = 460, 330, 60
out = []
add = out.append
total_w = 2 * W + 40
legend_h = 24 * (len(rows) + 1)
add(f'<svg xmlns="http://www.w3.org/2000/svg" width="{total_w}" height="{H + legend_h + 30}" '
    f'font-family="sans-serif" font-size="12">')
add(f'<rect width="{total_w}" height="{H + legend_h + 30}" fill="white"/>')

sizes = sorted({r for b in rows.values() for r in b})
if not sizes:
    sys.exit("no rows")
xmin, xmax = math.log10(min(sizes)), math.log10(max(sizes))
if xmax == xmin:
    xmax = xmin + 1


def panel(x0, title, ylabel, values, ylog, target=None):
    """values: {(backend, series): [(records, y)]}"""
    ys = [y for pts in values.values() for _, y in pts] + ([target] if target else [])
    lo, hi = min(ys), max(ys)
    if ylog:
        lo, hi = math.floor(math.log10(lo)), math.ceil(math.log10(hi))
    else:
        lo, hi = 0.0, max(2.0, math.ceil(hi * 2) / 2)
    pw, ph = W - M - 10, H - 2 * M + 20

    def px(r):
        return x0 + M + (math.log10(r) - xmin) / (xmax - xmin) * pw

    def py(y):
        v = math.log10(y) if ylog else y
        return M + ph - (v - lo) / (hi - lo) * ph

    add(f'<text x="{x0 + M + pw / 2}" y="20" text-anchor="middle" font-size="14">{title}</text>')
    add(f'<rect x="{x0 + M}" y="{M}" width="{pw}" height="{ph}" fill="none" stroke="#333"/>')
    for r in sizes:
        add(f'<line x1="{px(r)}" y1="{M}" x2="{px(r)}" y2="{M + ph}" stroke="#eee"/>')
        add(f'<text x="{px(r)}" y="{M + ph + 16}" text-anchor="middle">10^{round(math.log10(r), 1):g}</text>')
    ticks = [10 ** e for e in range(int(lo), int(hi) + 1)] if ylog else [lo + i * 0.5 for i in range(int((hi - lo) / 0.5) + 1)]
    for t in ticks:
        add(f'<line x1="{x0 + M}" y1="{py(t)}" x2="{x0 + M + pw}" y2="{py(t)}" stroke="#eee"/>')
        add(f'<text x="{x0 + M - 6}" y="{py(t) + 4}" text-anchor="end">{t:g}</text>')
    add(f'<text x="{x0 + M + pw / 2}" y="{M + ph + 34}" text-anchor="middle">records in the journal</text>')
    add(f'<text x="{x0 + 14}" y="{M + ph / 2}" text-anchor="middle" transform="rotate(-90 {x0 + 14} {M + ph / 2})">{ylabel}</text>')
    if target:
        add(f'<line x1="{x0 + M}" y1="{py(target)}" x2="{x0 + M + pw}" y2="{py(target)}" stroke="#2ca02c" stroke-dasharray="2,3"/>')
        add(f'<text x="{x0 + M + pw - 4}" y="{py(target) - 4}" text-anchor="end" fill="#2ca02c">target {target:g}</text>')
    for (bi, s), pts in values.items():
        pts = sorted(pts)
        d = " ".join(f"{px(r):.1f},{py(y):.1f}" for r, y in pts)
        add(f'<polyline points="{d}" fill="none" stroke="{colors[s]}" stroke-width="2" stroke-dasharray="{dashes[bi % 2]}"/>')
        for r, y in pts:
            add(f'<circle cx="{px(r):.1f}" cy="{py(y):.1f}" r="3" fill="{colors[s]}"/>')


backends = sorted(rows)
absolute, relative = {}, {}
for bi, b in enumerate(backends):
    base = rows[b][min(rows[b])]
    for si, s in enumerate(series):
        absolute[(bi, s)] = [(r, v[si] * 1e6) for r, v in rows[b].items()]
    for si, s in enumerate(["new call ÷ raw commit", "replay ÷ raw select"]):
        relative[(bi, s)] = [(r, v[4 + si]) for r, v in rows[b].items()]
panel(0, "Latency per operation", "µs (log)", absolute, True)
panel(W + 40, "÷ its baseline in the same rounds", "ratio", relative, False)
y = H + 20
for bi, b in enumerate(backends):
    note = ""
    if b in gc:
        g = gc[b]
        note = f" — gc: {int(g[1]):,} records, {int(g[1]) / float(g[2]):,.0f}/s; longest call beside it {float(g[3]) * 1e3:,.0f} ms"
    add(f'<line x1="20" y1="{y}" x2="60" y2="{y}" stroke="#333" stroke-width="2" stroke-dasharray="{dashes[bi % 2]}"/>')
    add(f'<text x="68" y="{y + 4}">{b}{note}</text>')
    y += 24
x = 20
for s in series:
    add(f'<rect x="{x}" y="{y - 6}" width="14" height="10" fill="{colors[s]}"/>')
    add(f'<text x="{x + 18}" y="{y + 4}">{s}</text>')
    x += 120
add("</svg>")
open(sys.argv[2], "w").write("\n".join(out) + "\n")
print(f"wrote {sys.argv[2]}")
