"""Triggers: routines' subscriptions to packs' events, webhook deliveries and the runs they start."""
