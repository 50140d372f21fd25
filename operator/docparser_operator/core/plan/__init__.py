"""What a pass aims at, and the safe step towards it (pure): ``core/`` below status and render.

The desired state (``target``: the spec's revisions, each pod template hashed once), the rollout
planner, drains, scale to zero, schedule windows, the batch pool's size, GPU and host sizing,
the children's ownership and desired-hash, what of a child's change is worth a pass, and the
backoff of a refused child. Why a package below ``render/`` and ``status/``: the renderers read
the ``Target`` and the sizes it plans, and status reports what the plan did, never the other way.
"""
