"""Depth over time as an SVG line chart, drawn from a results file's per-append series (no plotting library).

`python -m docgen.readme_figures` writes the SVG files of `PICTURES` and the captions that show them; each line is the
average depth right before and right after each append's maintenance, so a periodic strategy draws a sawtooth.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from html import escape

from docgen.figures import Json, Results, num, source

WIDTH, HEIGHT = 720, 300
LEFT, RIGHT, TOP, BOTTOM = 48, 16, 40, 40
COLORS = {"absorb": "#1f6feb", "z_order": "#d9480f"}
LABELS = {"absorb": "recluster (default policy, after every append)", "z_order": "delta-rs z_order every {k} appends"}


def steps(series: Sequence[Json]) -> list[tuple[float, float]]:
    """(append, depth) points: before maintenance (when measured) then after, at the same append."""
    points: list[tuple[float, float]] = []
    for step in series:
        if "pre_average_depth" in step:
            points.append((step["append"], step["pre_average_depth"]))
        points.append((step["append"], step["average_depth"]))
    return points


def chart(lines: dict[str, list[tuple[float, float]]], labels: dict[str, str], title: str) -> str:
    """One SVG chart: appends on x, average depth on y, a legend; coordinates rounded so the file is stable."""
    last = max(x for points in lines.values() for x, _ in points)
    top = max(y for points in lines.values() for _, y in points)
    depth_max = int(top) + 1
    plot_w, plot_h = WIDTH - LEFT - RIGHT, HEIGHT - TOP - BOTTOM

    def xy(x: float, y: float) -> str:
        return f"{LEFT + plot_w * x / last:.1f},{TOP + plot_h * (1 - y / depth_max):.1f}"

    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{HEIGHT}" viewBox="0 0 {WIDTH} {HEIGHT}"'
        ' font-family="sans-serif" font-size="12">',
        f"<title>{escape(title)}</title>",
        f'<rect width="{WIDTH}" height="{HEIGHT}" fill="white"/>',
    ]
    for depth in range(depth_max + 1):
        y = xy(0, depth).split(",")[1]
        parts.append(f'<line x1="{LEFT}" y1="{y}" x2="{WIDTH - RIGHT}" y2="{y}" stroke="#ddd"/>')
        parts.append(f'<text x="{LEFT - 6}" y="{float(y) + 4:.1f}" text-anchor="end">{depth}</text>')
    tick = 5 if last <= 60 else 50
    for append in range(0, int(last) + 1, tick):
        x, y = xy(append, 0).split(",")
        parts.append(f'<text x="{x}" y="{float(y) + 16:.1f}" text-anchor="middle">{append}</text>')
    middle = f"{TOP + plot_h / 2:.1f}"
    parts.append(
        f'<text x="{LEFT + plot_w / 2:.1f}" y="{HEIGHT - 6}" text-anchor="middle">appends</text>'
        f'<text x="14" y="{middle}" text-anchor="middle" transform="rotate(-90 14 {middle})">average depth</text>'
    )
    for index, (name, points) in enumerate(lines.items()):
        path = " ".join(xy(x, y) for x, y in points)
        parts.append(f'<polyline points="{path}" fill="none" stroke="{COLORS[name]}" stroke-width="1.6"/>')
        legend_x = LEFT + 8 + index * plot_w / 2
        parts.append(
            f'<line x1="{legend_x:.1f}" y1="18" x2="{legend_x + 24:.1f}" y2="18" stroke="{COLORS[name]}"'
            ' stroke-width="3"/>'
            f'<text x="{legend_x + 30:.1f}" y="22">{escape(labels[name])}</text>'
        )
    parts.append("</svg>")
    return "\n".join(parts) + "\n"


def case_chart(results: Results, case: str) -> str:
    """The absorb suite's `case`: the default policy against z_order every k, depth after every append."""
    data = results.get("absorb")[1]["cases"][case]
    k = data["parameters"]["maintenance_every_k"]
    strategies = data["strategies"]
    lines = {name: steps(strategies[name]["series"]) for name in ("absorb", "z_order")}
    labels = {name: label.format(k=k) for name, label in LABELS.items()}
    return chart(lines, labels, f"Average depth after every append ({case}): recluster vs z_order every {k}")


def caption(results: Results, case: str) -> str:
    """What the picture of `case` shows, with the two strategies' time-averaged depth and row WA."""
    file, data = results.get("absorb")
    p = data["cases"][case]["parameters"]
    s = data["cases"][case]["strategies"]
    absorb, z_order = s["absorb"], s["z_order"]
    return (
        f"Average depth of a table after each of {p['batches']} appends of {p['rows_per_batch']:,} random int64 keys "
        f"(files of {p['target_rows']:,} rows): recluster's default policy after every append (time-averaged depth "
        f"{num(absorb['time_averaged_average_depth'])}, row write amplification "
        f"{num(absorb['row_write_amplification'])}) against delta-rs `optimize.z_order` every "
        f"{p['maintenance_every_k']} appends ({num(z_order['time_averaged_average_depth'])} at "
        f"{num(z_order['row_write_amplification'])}); `python -m bench.compare --suite absorb`, {source(file)}."
    )


def picture(image: str, case: str) -> Callable[[Results], str]:
    """A figures block: the image (a path relative to the Markdown file holding the block) and its caption."""

    def block(results: Results) -> str:
        alt = "Average depth after every append: recluster (default policy) against delta-rs z_order"
        return f"![{alt}]({image})\n\n{caption(results, case)}"

    return block


PICTURES: dict[str, Callable[[Results], str]] = {
    "docs/depth-random-40.svg": lambda results: case_chart(results, "random_40"),
    "docs/depth-random-400.svg": lambda results: case_chart(results, "random_400"),
}
"""The SVG files the generator writes, by path from the repository root."""
