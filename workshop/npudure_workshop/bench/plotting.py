"""Small matplotlib helpers shared by the experiments' plots and the telemetry plot."""

from __future__ import annotations

from pathlib import Path
from typing import Any


def legend(ax: Any) -> None:
    if ax.get_legend_handles_labels()[0]:  # an empty legend only warns
        ax.legend(fontsize=8)


def backend_title(agg_points: dict[str, Any]) -> str:
    return next(iter(agg_points.values()))["conditions"]["backend"]


def save(plt: Any, fig: Any, path: Path, dpi: int = 110) -> None:
    fig.tight_layout()
    fig.savefig(path, dpi=dpi)
    plt.close(fig)
