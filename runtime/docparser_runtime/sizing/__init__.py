"""How big a runtime pod must be, and what it may take: the sizing layer (issue 37).

The modules that size a deployment or a pod, apart from serving: ``capacity`` (GPU memory and
throughput per pod, and the live report's equations, a copy of the operator's), ``advise`` and
``advise_table`` (``docparser-runtime advise DIR``), ``live_advise`` (``advise --from-metrics``),
``host_memory`` (the host-memory budget admission hands out) and ``cgroup_memory`` (the limit
and usage of the process's own cgroup). They import preprocessing and the leaves, never the
server; the server imports ``host_memory`` and ``cgroup_memory``.
"""
