"""docparser-operator: turns DocParser resources into GPU document-parsing services.

Layout: models (typed spec), sizing (GPU memory), naming/labels (shared names), render/
(pure child renderers), cli (render / run); reconciling lives in reconcile/handlers.
"""

__version__ = "0.1.0"
