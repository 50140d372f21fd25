"""Suite-wide pytest setup shared by tests/runtime and tests/operator.

The real control plane (tests/controlplane) is a plugin so its `real_apiserver` fixture and its
"which backend ran" report lines are available to every suite.
"""

pytest_plugins = ["controlplane.pytest_plugin", "gitopscheck.pytest_plugin"]
