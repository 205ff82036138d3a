"""Analysis layer: summaries, run directories and figures; never needs root.

:mod:`~fabric.analysis.summary` and :mod:`~fabric.analysis.draw` (a fabric's
counts, capacity and drawing), :mod:`~fabric.analysis.report` (a traffic
run's nccl-tests figures, incast rounds, collisions),
:mod:`~fabric.analysis.results` (run directories, manifest, CSV),
:mod:`~fabric.analysis.provenance` (the one line that names a run, under every
figure) and :mod:`~fabric.analysis.plotstyle` (one paper style for every figure).

May import: fabric.model, fabric.traffic.
"""
