"""Click parameter types the subcommands share."""

from __future__ import annotations

import math

import click


class FiniteRange(click.FloatRange):
    """click's FloatRange that also refuses ``nan`` and ``inf``. ``nan`` passes every comparison, so
    ``--threshold nan`` went through and a run that found no face exited 0; ``inf`` seconds ended in an
    internal error. Every float option uses it (batch manifests convert their cells through the options)."""

    def convert(self, value, param, ctx):
        rv = super().convert(value, param, ctx)
        if not math.isfinite(rv):
            self.fail(f"{value!r} is not a finite number", param, ctx)
        return rv
