"""Who may call: organizations and their API keys, scopes, failed-login limits, node credentials."""
