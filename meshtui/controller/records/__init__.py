"""The records beside the inventory: the audit heads agents keep (anchors), backup, restore and the
restore proof, the audit export. Imports the inventory, agents/ and the core's state-folder
names.
"""
