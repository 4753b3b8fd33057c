"""The egress proxy: every outbound request of declarative actions, the only reader of connection secrets."""
