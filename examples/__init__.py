"""Programs that embed inert, kept type-checked and tested with the library."""
