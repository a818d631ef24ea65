"""Provider streams to portable ingress events: sans-IO, importing only ``inert.events``."""
