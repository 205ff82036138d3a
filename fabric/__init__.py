"""fabric: an emulator for AI-cluster network fabrics.

One folder per layer; each ``__init__`` says what that layer may import, and
``tests/unit/test_layers.py`` enforces it:

=================  ===========================================================
``model/``         the fabric graph, spec grammar, routing intents, lanes
``routing/``       pure routing logic (ecmp, spray, adaptive) -> intents
``traffic/``       transfer schedules, the plan format, metrics (plain data)
``agent/``         the host agent that runs a plan for emulated hosts (in their namespaces)
``emulation/``     Mininet, Open vSwitch, shaping, capacity, fidelity, runs
``analysis/``      summaries, run directories, figures (no root)
``testing/``       fake OpenFlow switches for unit-testing controllers
``cli.py``         the ``fabric`` command, on top of everything
``argtypes.py``    its argument types: each value checked as it is parsed
``children.py``    how fabric starts its own child Pythons (this checkout's code)
=================  ===========================================================
"""
