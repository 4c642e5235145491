"""The pass, driven: Runs in (from ``sources``), analysed once, Reports out.

Why a stage of its own: the analysis is the last stage that sees a ``Run``; the diagnosis, the report and
the renderers get the ``RunAnalysis``. Something must still hold the Run and the user's files together
(the price table, MLLOG lines, a trace set's worker processes) and hand the analysis on — that is this
package, and only this package (and the CLI above it) takes a Run and returns a Report.
"""
