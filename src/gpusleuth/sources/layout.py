"""The run directory's file names for the stages after the analysis (which import no run model): a light
re-export of ``run/layout.py``'s :class:`RunDir` (no numpy or pyarrow behind it)."""

from gpusleuth.run.layout import SUMMARY_FILE, RunDir

__all__ = ["RunDir", "SUMMARY_FILE"]
