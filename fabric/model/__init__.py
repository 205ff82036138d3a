"""Model layer: the fabric graph and the plain data every other layer shares.

:mod:`~fabric.model.graph` (schema, structured ids, :class:`FabricBuilder`),
:mod:`~fabric.model.spec` (the ``name,arg,key=val`` grammar),
:mod:`~fabric.model.intents` (flow entries, groups, buckets, queues that
routing returns) and :mod:`~fabric.model.lanes` (SL/VL traffic classes).

May import: nothing else of fabric.
"""
