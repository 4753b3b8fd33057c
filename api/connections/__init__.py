"""Connections: an organization's credentials for the connections declarative packs declare.

`tables` holds the rows (`connections`) and the request and answer models; `service` checks, seals
and stores them. The secret is sealed to the egress proxy's public key (`egress.sealing`) before it
is stored: the api can write a secret but never read one back, and no answer carries it or its
sealed token.
"""
