"""Judging a link's busbw against its own history: median and spread, not one fixed ratio. Pure.

One earlier sweep and a fixed ratio cry wolf on a link whose speed varies with the
load of its hosts. With a few good sweeps behind it, a link is slow only when it
falls below its median by more than its own noise allows (a multiple of its median
absolute deviation) and by more than a floor that no noise estimate goes under.
"""

from __future__ import annotations

from statistics import median

MIN_HISTORY = 3  # good sweeps of a link before its own spread is trusted
NOISE_K = 4.0  # how many robust standard deviations below the median a link may fall before it is slow
MAD_TO_SIGMA = 1.4826  # the MAD of a normal sample times this estimates its standard deviation
MIN_DROP = 0.20  # never slow for less than this share below the median, however quiet the link
# A rolling median of fewer than MIN_HISTORY sweeps: the link's noise is not known yet, so only a fall
# this large is slow (a busy host's sweep scatters a link's busbw by a fifth either way).
YOUNG_DROP = 0.25


def median_and_mad(samples: list[float]) -> tuple[float, float]:
    """The median of the samples and their median absolute deviation from it."""
    mid = median(samples)
    return mid, median(abs(x - mid) for x in samples)


def threshold(expected: float, mad: float | None, samples: int, ratio: float) -> float:
    """The busbw below which a link is slow.

    A rolling baseline (it has a spread) with enough history: its noise band. A young rolling
    baseline: YOUNG_DROP below, or ``ratio`` if that is stricter. One sweep an operator named
    as the baseline (no spread): ``ratio`` x expected, as configured.
    """
    if mad is None:
        return ratio * expected
    if samples >= MIN_HISTORY:
        return expected - max(NOISE_K * MAD_TO_SIGMA * mad, MIN_DROP * expected)
    return min(ratio, 1 - YOUNG_DROP) * expected


def slow_text(busbw: float, expected: float, mad: float | None, samples: int, ratio: float) -> str:
    """Why a busbw is below its baseline, with the numbers the rule used."""
    if mad is not None:
        allows = "its own noise allows" if samples >= MIN_HISTORY else "a baseline this young allows"
        return (
            f"busbw {busbw:.3g} GB/s is below this link's usual {expected:.3g} GB/s (median of {samples} good "
            f"sweeps, spread {mad:.2g} GB/s) by more than {allows} "
            f"(threshold {threshold(expected, mad, samples, ratio):.3g} GB/s)"
        )
    return f"busbw {busbw:.3g} GB/s is below {ratio:g} x the baseline {expected:.3g} GB/s"
