"""Config values: the schema (frozen dataclasses), TOML loading with ``--set`` overrides, each
key's range, the shipped presets, the generated key reference, argument types and player
specs. Knows no process and no protocol."""
