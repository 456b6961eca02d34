"""Reading the declaration and planning: TOML to the model, login names, connection files, loading
a declaration into the inventory, what each node must hold, asking nodes who they are. Imports
the core, the protocol, the inventory, the kinds' registry and the agents' transport; never an
action or a read.
"""
