"""Judging a link's busbw against its own history: median and spread, not one fixed ratio. Pure.

One earlier sweep and a fixed ratio cry wolf on a link whose speed varies with the
load of its hosts. With enough clean sweeps behind it (MIN_HISTORY), a link is below
its band only when it falls below its median by more than its own noise allows (a
multiple of its median absolute deviation) and by more than a floor that no noise
estimate goes under. A younger rolling baseline judges nothing: until its spread is
known, a link is judged against its peers in the same sweep only (core/confirmation.py's
``peer_marks``). Below its band is not yet slow: core/judging.py then holds the pair
against its peers, measured at the same moment under the same load.
"""

from __future__ import annotations

from statistics import median

MIN_HISTORY = 4  # clean figures of a link before it is judged against its own history
NOISE_K = 4.0  # how many robust standard deviations below the median a link may fall before it is slow
MAD_TO_SIGMA = 1.4826  # the MAD of a normal sample times this estimates its standard deviation
MIN_DROP = 0.20  # never slow for less than this share below the median, however quiet the link


def median_and_mad(samples: list[float]) -> tuple[float, float]:
    """The median of the samples and their median absolute deviation from it."""
    mid = median(samples)
    return mid, median(abs(x - mid) for x in samples)


def threshold(expected: float, mad: float | None, samples: int, ratio: float) -> float | None:
    """The busbw below which a link is below its own band; None where its history judges nothing yet.

    A rolling baseline (it has a spread) with MIN_HISTORY clean figures or more: its noise band.
    A younger rolling baseline: None (its spread is not known; the link's peers judge it). One
    sweep an operator named as the baseline (no spread): ``ratio`` x expected, as configured.
    """
    if mad is None:
        return ratio * expected
    if samples >= MIN_HISTORY:
        return expected - max(NOISE_K * MAD_TO_SIGMA * mad, MIN_DROP * expected)
    return None


def slow_text(busbw: float, expected: float, mad: float | None, samples: int, ratio: float) -> str:
    """Why a busbw is below its baseline, with the numbers the rule used."""
    if mad is not None:
        return (
            f"busbw {busbw:.3g} GB/s is below this link's usual {expected:.3g} GB/s (median of {samples} clean "
            f"sweeps, spread {mad:.2g} GB/s) by more than its own noise allows "
            f"(threshold {threshold(expected, mad, samples, ratio) or 0:.3g} GB/s)"
        )
    return f"busbw {busbw:.3g} GB/s is below {ratio:g} x the baseline {expected:.3g} GB/s"
