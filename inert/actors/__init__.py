"""The pure call decider, the call actors and their router."""
