"""What a pass reports (pure): conditions, diagnosis, stalls, the report and its Events.

Why a package above ``plan/`` and ``render/``: status describes what the plan chose and what
the renderers made of it (the shadow's configuration, the children's ownership), so it reads
both; nothing that plans reads status back, except through the typed status the controller
parses before a pass.
"""
