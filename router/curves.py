"""Training-curve plot of a PPO run (matplotlib, written as a PNG without a display)."""

from __future__ import annotations

import io
from collections.abc import Sequence
from pathlib import Path

from core.io import atomic_write_bytes


def plot_ppo_curve(history: Sequence[dict[str, float]], out_file: str | Path, target_kl: float | None = None, title: str = "") -> Path:
    """Four panels over PPO updates: validation full-path accuracy (with its start and the
    start minus 2 points, the collapse line), ``train/approx_kl`` (with ``target_kl``),
    ``train/clip_fraction`` (a run that does not move shows 0 in both), and
    ``rollout/reward_mean``, with the language-model judge's mean p on the unlabelled questions
    when the run was paid by one (``rollout/reward/label_free/judge`` over the unlabelled share of
    the rollout). Rows lacking a metric are skipped for that panel.

    Args:
        history: metric rows, each with ``update`` and any of the plotted keys.
        out_file: PNG path (written atomically).
        target_kl: drawn as a dashed line when given.
        title: figure title.
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    def series(key: str) -> tuple[list[float], list[float]]:
        rows = [r for r in history if key in r]
        return [r["update"] for r in rows], [r[key] for r in rows]

    fig, axes = plt.subplots(1, 4, figsize=(18, 3.8))
    x, acc = series("route/full_path_acc")
    ax = axes[0]
    if acc:
        ax.plot(x, [100 * a for a in acc], marker="o", ms=3, label="validation full-path acc")
        ax.axhline(100 * acc[0], color="gray", lw=0.8, label="start (SFT)")
        ax.axhline(100 * acc[0] - 2, color="red", ls=":", lw=0.8, label="start - 2 points")
        ax.legend(fontsize=8)
    ax.set(xlabel="PPO update", ylabel="%", title="route/full_path_acc (validation)")
    x, kl = series("train/approx_kl")
    axes[1].plot(x, kl, marker="o", ms=3)
    if target_kl is not None:
        axes[1].axhline(target_kl, color="red", ls="--", lw=0.8, label=f"target_kl {target_kl}")
        axes[1].legend(fontsize=8)
    axes[1].set(xlabel="PPO update", title="train/approx_kl")
    x, clip = series("train/clip_fraction")
    axes[2].plot(x, clip, marker="o", ms=3)
    axes[2].set(xlabel="PPO update", title="train/clip_fraction")
    x, rew = series("rollout/reward_mean")
    axes[3].plot(x, rew, marker="o", ms=3, label="rollout/reward_mean")
    judged = [r for r in history if r.get("rollout/reward/label_free/judge", 0) > 0 and r.get("rollout/reward/labelled", 1) < 1]
    if judged:
        axes[3].plot([r["update"] for r in judged],
                     [r["rollout/reward/label_free/judge"] / (1 - r["rollout/reward/labelled"]) for r in judged],
                     marker="o", ms=3, label="judge p, unlabelled questions")
        axes[3].legend(fontsize=8)
    axes[3].set(xlabel="PPO update", title="rollout rewards")
    if title:
        fig.suptitle(title)
    fig.tight_layout()
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=110)
    plt.close(fig)
    atomic_write_bytes(out_file, buf.getvalue())
    return Path(out_file)
