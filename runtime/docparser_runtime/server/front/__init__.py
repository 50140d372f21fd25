"""Front mode (``DOCPARSER_ROLE=front``): the small CPU process a DocParser at zero GPU pods
keeps behind its Service. Same app, same routes; only the parse service differs: ``proxy``
holds a parse until the backend is ready and forwards it, ``backend_watch`` polls the
backend's ``/readyz``, ``wire`` is what crosses between the front and a pod."""
