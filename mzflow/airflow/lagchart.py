"""The plugin's freshness picture: per cluster, each maintained object's lag at each of
its ticks over the last day, as an inline SVG line chart (no JavaScript, no CDN: the
api-server may be offline, as this machine is)."""

from __future__ import annotations

import datetime as dt
import html

DAY = dt.timedelta(days=1)
WIDTH, HEIGHT, LEFT, BOTTOM, TOP, RIGHT = 780, 250, 72, 44, 12, 200
TICKS = 4  # intervals on each axis
COLORS = ("#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b", "#e377c2",
          "#17becf")


def svg(lines: dict[str, list[tuple[float, float]]], now: dt.datetime) -> str:
    """One chart: x from the first tick shown (at most a day ago) to now, y from 0 to
    the largest lag."""
    points = [p for pts in lines.values() for p in pts]
    x0 = min(x for x, _ in points)
    x1 = DAY.total_seconds()
    y1 = max(max(y for _, y in points), 1.0)
    plot_w, plot_h = WIDTH - LEFT - RIGHT, HEIGHT - TOP - BOTTOM

    def xy(x: float, y: float) -> str:
        px = LEFT + (x - x0) / max(x1 - x0, 1.0) * plot_w
        return f"{px:.1f},{TOP + plot_h - y / y1 * plot_h:.1f}"

    start = now - DAY + dt.timedelta(seconds=x0)
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{HEIGHT}" '
             'font-family="sans-serif" font-size="11" role="img" '
             'aria-label="lag in seconds against time (UTC)">',
             f'<rect x="{LEFT}" y="{TOP}" width="{plot_w}" height="{plot_h}" fill="#fafafa" '
             'stroke="#ccc"/>']
    # The y axis: lag in seconds, gridlines at quarters of the largest lag.
    for q in range(TICKS + 1):
        y = y1 * q / TICKS
        py = TOP + plot_h - q / TICKS * plot_h
        parts.append(f'<line x1="{LEFT - 4}" y1="{py:.1f}" x2="{LEFT + plot_w}" y2="{py:.1f}" '
                     f'stroke="{"#999" if q == 0 else "#e4e4e4"}"/>'
                     f'<text class="ytick" x="{LEFT - 6}" y="{py + 4:.1f}" text-anchor="end">'
                     f'{y:.3g} s</text>')
    # The x axis: wall-clock time (UTC), from the first tick shown to now.
    span = max(x1 - x0, 1.0)
    for q in range(TICKS + 1):
        at = start + dt.timedelta(seconds=span * q / TICKS)
        px = LEFT + q / TICKS * plot_w
        anchor = "start" if q == 0 else "end" if q == TICKS else "middle"
        parts.append(f'<line x1="{px:.1f}" y1="{TOP + plot_h}" x2="{px:.1f}" '
                     f'y2="{TOP + plot_h + 4}" stroke="#999"/>'
                     f'<text class="xtick" x="{px:.1f}" y="{TOP + plot_h + 16}" '
                     f'text-anchor="{anchor}">{at:%H:%M:%S}</text>')
    parts += [f'<text x="{LEFT + plot_w / 2:.0f}" y="{HEIGHT - 4}" text-anchor="middle">'
              f'time (UTC, {start:%Y-%m-%d})</text>',
              f'<text x="12" y="{TOP + plot_h / 2:.0f}" text-anchor="middle" '
              f'transform="rotate(-90 12 {TOP + plot_h / 2:.0f})">lag (s)</text>']
    for i, (name, pts) in enumerate(sorted(lines.items())):
        color = COLORS[i % len(COLORS)]
        path = " ".join(xy(x, y) for x, y in sorted(pts))
        parts.append(f'<polyline fill="none" stroke="{color}" stroke-width="1.5" '
                     f'points="{path}"/>')
        parts += [f'<circle cx="{xy(x, y).split(",")[0]}" cy="{xy(x, y).split(",")[1]}" '
                  f'r="2" fill="{color}"/>' for x, y in pts]
        ly = TOP + 12 + 14 * i
        parts.append(f'<rect x="{WIDTH - RIGHT + 10}" y="{ly - 8}" width="10" height="10" '
                     f'fill="{color}"/><text x="{WIDTH - RIGHT + 24}" y="{ly + 1}">'
                     f'{html.escape(name)}</text>')
    parts.append("</svg>")
    return "".join(parts)


def section(by_cluster: dict[str, dict[str, list[tuple[float, float]]]],
            now: dt.datetime) -> str:
    out = ["<h3>Freshness: lag at each tick over the last day</h3>"]
    if not by_cluster:
        out.append("<p>No tick in the last day.</p>")
    for cluster, lines in sorted(by_cluster.items()):
        out.append(f"<h4>cluster {html.escape(cluster)}</h4>{svg(lines, now)}")
    return "".join(out)
