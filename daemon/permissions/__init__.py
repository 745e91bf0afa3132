"""Permission rules and hooks: ``shell`` (a command line cut into its commands), ``rules`` (one
rule, matching, checking), ``decide`` (what the rules say about a call, the rule a request
suggests), ``always`` (``permissions.toml``), ``book`` (every rule in force), ``hooks``
(running a hook command). The steps of a call's decision are ``daemon.sessions.permission_gate``'s."""
