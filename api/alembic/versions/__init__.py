"""The schema's revisions, oldest first; each is frozen once released (see docs/api.md, Settings)."""
