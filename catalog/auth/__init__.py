"""Who is calling and what they may do: bearer tokens and the OAuth2 client-credentials endpoint
(``tokens``, ``principals``, ``lockout``), OpenID Connect tokens (``oidc``), the caller's identity
(``identity``), and authorization by grants on catalog, warehouse, namespace and table (``policy``,
``grants``, typed by ``grants.GrantStore`` so that this wing imports nothing of ``database/``).
"""
