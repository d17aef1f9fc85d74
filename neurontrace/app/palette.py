"""Colours of the viewer: one per event category, one per attribution cause (no Dash import).

Categories are the closed enum of ``neurontrace.schema.CATEGORIES``; their order here is the order
of the codes the track index stores. Colours are picked so that work (compute, framework ops) reads
as saturated and markers (annotations, steps) as muted greys.
"""

from __future__ import annotations

from neurontrace import causes, schema

CATEGORY_COLORS: dict[str, str] = {
    # Device work in the colour of the cause it is attributed to (one legend entry for both).
    "compute": causes.COLORS["compute"],
    "collective": causes.COLORS["collectives"],
    "memcpy": causes.COLORS["data_movement"],
    "memset": "#0277bd",
    "dma": "#1e88e5",
    "sync_wait": "#c2185b",
    "throttle": "#8d6e63",
    "execution": "#78909c",
    "runtime": "#ef6c00",
    "driver": "#f4511e",
    "framework_op": "#00897b",
    "python": "#5c6bc0",
    "annotation": "#90a4ae",
    "step": "#546e7a",
    "compile": "#d81b60",
    "load": "#8e24aa",
    "transfer": "#039be5",
    "memory": "#a1887f",
    "overhead": "#bdbdbd",
    "other": "#9e9e9e",
}

#: category names in code order (the index stores ``CATEGORIES.index(category)``)
CATEGORIES: tuple[str, ...] = tuple(schema.CATEGORIES)
if set(CATEGORIES) != set(CATEGORY_COLORS):  # a new schema category needs a colour here
    missing = sorted(set(CATEGORIES) ^ set(CATEGORY_COLORS))
    raise RuntimeError(f"app.palette: categories without a colour (or unknown): {missing}")

# The causes' colours and labels are the vocabulary's (neurontrace.causes), as in the text report and plots.
CAUSE_COLORS: dict[str, str] = dict(causes.COLORS)
CAUSE_LABELS: dict[str, str] = dict(causes.LABELS)

#: how many busy levels a binned cell is drawn with (tints from light to the full colour)
LEVELS = 8


def rgba(color: str, alpha: float) -> str:
    """``#rrggbb`` as ``rgba(r,g,b,alpha)``."""
    r, g, b = (int(color[i:i + 2], 16) for i in (1, 3, 5))
    return f"rgba({r},{g},{b},{alpha:.3f})"


def tint(color: str, amount: float) -> str:
    """``color`` mixed with white: ``amount`` 0 is white, 1 the colour itself."""
    r, g, b = (int(color[i:i + 2], 16) for i in (1, 3, 5))
    mix = [round(255 - (255 - c) * amount) for c in (r, g, b)]
    return "#" + "".join(f"{c:02x}" for c in mix)


def binned_colorscale(colors: list[str]) -> list[list[float | str]]:
    """A heatmap colour scale for cells coded ``1 + k * LEVELS + level`` (0 = empty, transparent).

    Category ``k`` gets ``LEVELS`` tints of its colour, light for a nearly idle cell and full for a
    busy one, so one heatmap shows both what ran and how much of the pixel it filled. Use it with
    ``zmin=-0.5, zmax=top - 0.5`` where ``top = 1 + len(colors) * LEVELS``: code ``c`` then owns the
    band ``[c / top, (c + 1) / top]`` of the scale.
    """
    top = 1 + len(colors) * LEVELS
    scale: list[list[float | str]] = [[0.0, "rgba(0,0,0,0)"], [1 / top, "rgba(0,0,0,0)"]]
    for k, color in enumerate(colors):
        for level in range(LEVELS):
            code = 1 + k * LEVELS + level
            shade = tint(color, 0.3 + 0.7 * (level + 1) / LEVELS)
            scale.append([code / top, shade])
            scale.append([(code + 1) / top, shade])
    scale[-1][0] = 1.0
    return scale
