"""End-to-end suites: ``local`` (operator render + real runtime process, runs in
``make test``) and ``cluster`` (a real cluster from ``KUBECONFIG``, opt-in)."""
