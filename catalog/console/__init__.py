"""The web console at ``/ui`` (docs/console.md): server-rendered pages over the ``Catalog`` service,
authorised by the REST API's own guard. ``routes`` (the handlers), ``reading`` (what the caller may
see), ``views`` (page bodies), ``html`` (escaping and the page frame), ``charts`` (inline SVG),
``session`` (cookie and CSRF), ``oidc`` (sign-in by authorization code with PKCE)."""
