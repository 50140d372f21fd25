"""``/v1/document/parse``: the route, its options schema (``protocol``), the body reader,
``ParseService`` (``serving``, shared by jobs and the OpenAI route) and streaming."""
