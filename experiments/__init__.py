"""Experiments: one module per experiment, a root-only run and a root-free plot."""
