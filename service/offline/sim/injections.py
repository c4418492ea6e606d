"""Discrete counter events scheduled ahead: a weak precursor's few SBEs, a benign burst, a link flap.

Rates (Poisson, `effects.Effects.rate`) suit strong precursors; a handful of errors over half an hour
is better drawn once as exact arrival times, so the total and the growth are what the variant says.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Injection:
    field: str
    node: int
    gpu: int | None  # None: a node-exporter counter
    count: float


Injections = dict[int, list[Injection]]


def add(out: Injections, tick: int, inj: Injection) -> None:
    out.setdefault(tick, []).append(inj)
