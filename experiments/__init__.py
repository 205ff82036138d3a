"""Experiments: one module per question, ``run`` (root) and ``plot`` (no root).

``EXPERIMENTS`` maps a name to its module; modules are imported on use.
"""

EXPERIMENTS = {
    "collisions": "experiments.collisions",
    "incast": "experiments.incast",
    "isolation": "experiments.isolation",
    "zones": "experiments.zones",
    "placement": "experiments.placement",
    "failures": "experiments.failures",
    "storage": "experiments.storage",
}
