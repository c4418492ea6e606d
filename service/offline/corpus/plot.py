"""The corpus report's plot: prexid's NAB-style score per kind of change (needs prexid[plot])."""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt

from prexid.service.offline.corpus.score import CorpusResult


def by_kind(r: CorpusResult, path: Path) -> Path:
    kinds = [k for k in r.prexid_by_kind if k != "none"]
    fig, ax = plt.subplots(figsize=(8, 3.5))
    ax.bar(kinds, [r.prexid_by_kind[k] for k in kinds], color="tab:green", label="prexid (own decisions)")
    ax.axhline(
        r.prexid_swept["standard"],
        color="tab:green",
        ls=":",
        label="prexid's score column, whole corpus, best threshold",
    )
    ax.axhline(
        r.windowed_gaussian_best["standard"],
        color="tab:grey",
        ls="--",
        label="windowed Gaussian, whole corpus, best threshold",
    )
    ax.set_ylabel("NAB standard score")
    ax.set_title(
        f"Generic corpus: prexid {r.prexid['standard']:.1f} overall; "
        f"{r.prexid_by_kind.get('none', 0):.0f} false detections on quiet files"
    )
    ax.tick_params(axis="x", rotation=30)
    ax.legend(loc="lower right", fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path
