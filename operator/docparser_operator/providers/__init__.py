"""The analysis' providers: what reads the world for the pure walk, above ``core``.

Why a layer of its own, beside ``kube``: the run and its sources fetch over HTTP (the pods'
``/metrics``, PromQL, golden documents through fsspec), so they cannot sit in ``analysis/``,
which ``core`` imports and which stays pure by folder. As Argo Rollouts keeps
``metricproviders/<provider>/`` behind one ``Provider`` interface, each source is one module
behind base.py's interfaces, and every request goes through the one guarded client (fetch.py).
"""
