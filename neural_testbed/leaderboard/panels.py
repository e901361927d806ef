"""A sweep's panels: the named coordinates of a stratum but T, as figures, tables and the
report site group score records by them.

A score record (``scoring.kl_by_setting``, ``scoring.compare_agents``) carries its
stratum's coordinates by name (``Problem.stratum_columns``): ``temperature`` on the
classification testbed, ``dataset`` on real data, ``input_dim`` and ``noise_variance``
on regression, then ``num_train``; each column means one thing on every sweep.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from neural_testbed.generative import datasets

__all__ = ["COLUMNS", "Panel", "panel", "title"]

# A panel's coordinates, in the order a title names them.
COLUMNS = ("input_dim", "temperature", "noise_variance", "dataset")
_SNR = {0.01: "high SNR", 0.1: "medium SNR", 0.5: "low SNR"}  # the paper's temperatures

Panel = tuple[tuple[str, Any], ...]  # (name, value) pairs, in COLUMNS order


def panel(columns: Mapping[str, Any], skip: tuple[str, ...] = ()) -> Panel:
    """A record's (or ``Problem.stratum_columns``') panel: its stratum coordinates but T
    and ``skip``."""
    return tuple((name, columns[name]) for name in COLUMNS
                 if name in columns and name not in skip)


def title(of: Panel) -> str:
    """A panel's title: its d, temperature (and the paper's SNR name for it), noise
    variance, or dataset (and the paper's dataset it stands in for)."""
    parts = []
    for name, value in of:
        if name == "dataset":
            paper = datasets.STAND_INS.get(value)
            parts.append(f"{value} (for {paper[0]})" if paper else value)
        elif name == "temperature":
            snr = _SNR.get(value)
            parts.append(f"temperature {value:g}" + (f" ({snr})" if snr else ""))
        elif name == "noise_variance":
            parts.append(f"noise variance {value:g}")
        else:
            parts.append(f"d = {value}")
    return ", ".join(parts)
